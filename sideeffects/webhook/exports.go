package webhook

import "github.com/projector-dev/projector/internal/app/config"

// The configuration types a user of the package needs, implemented in an
// internal package and re-exported here (in the style of pebble's
// internal.go): the configuration file's own types, so that an effect.Rule's
// Webhook is a Config.

// Config is an effect's HTTP POST target (New).
type Config = config.Webhook

// Duration is Config.Timeout's type: a time.Duration, e.g.
// Duration(5 * time.Second).
type Duration = config.Duration

// DefaultTimeout bounds a call whose effect sets no timeout.
const DefaultTimeout = config.DefaultWebhookTimeout

// SigningSecret is one webhook signing secret (whsec_ + base64 of the key);
// it prints as [redacted].
type SigningSecret = config.SigningSecret

// SigningSecrets is Config.SigningSecret's type: the secrets every call is
// signed with (Signer).
type SigningSecrets = config.SigningSecrets
