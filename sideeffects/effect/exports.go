package effect

import "github.com/projector-dev/projector/internal/app/config"

// The configuration types a user of the package needs, implemented in an
// internal package and re-exported here (in the style of pebble's
// internal.go): they are the configuration file's own types, so
// internal/app/wiring passes the file's sideEffects to NewRules as they are.

// Rule is one configured side effect: the event types and optional condition
// that trigger it, its idempotency key template, its webhook and its retry
// policy (the sideEffects entries of the configuration file). Its Webhook is
// a webhook.Config.
type Rule = config.SideEffect

// Condition restricts a Rule to events whose field equals a value.
type Condition = config.Condition

// The values of Rule.OnUnknown (and of the executor's Effect.OnUnknown), and
// the default of a Rule's MaxAttempts.
const (
	OnUnknownRetry     = config.OnUnknownRetry
	OnUnknownPark      = config.OnUnknownPark
	DefaultMaxAttempts = config.DefaultMaxAttempts
)
