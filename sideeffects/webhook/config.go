package webhook

import (
	"encoding/base64"
	"fmt"
	"log/slog"
	"strings"
	"time"
)

// Config is an effect's HTTP POST target, as New builds its Client.
type Config struct {
	// URL is an absolute http or https URL.
	URL string
	// Timeout bounds one request, including reading the response; 0 takes
	// DefaultTimeout.
	Timeout time.Duration
	// SigningSecret, when set, signs every call as the Standard Webhooks
	// specification defines (sign.go): one secret, or several during a
	// rotation. Nil sends unsigned calls.
	SigningSecret SigningSecrets
}

// DefaultTimeout bounds a call whose effect sets no timeout.
const DefaultTimeout = 5 * time.Second

// SigningSecretPrefix starts a Standard Webhooks symmetric secret
// (https://www.standardwebhooks.com/): whsec_ followed by the base64 of the
// key.
const SigningSecretPrefix = "whsec_"

// Key sizes the Standard Webhooks specification gives for a symmetric
// signing secret: 192 to 512 bits.
const (
	MinSigningKeyBytes = 24
	MaxSigningKeyBytes = 64
)

// redacted is what a secret prints as, wherever it is printed.
const redacted = "[redacted]"

// SigningSecret is one webhook signing secret, whsec_ + base64 of the key
// (the form Standard Webhooks libraries take). It never prints its value:
// fmt (%v, %s, %q, %#v, %+v of a struct holding it), slog and JSON all show
// [redacted]. Read it with Key.
type SigningSecret string

// String implements fmt.Stringer.
func (SigningSecret) String() string { return redacted }

// GoString implements fmt.GoStringer (%#v).
func (SigningSecret) GoString() string { return redacted }

// LogValue implements slog.LogValuer.
func (SigningSecret) LogValue() slog.Value { return slog.StringValue(redacted) }

// MarshalText implements encoding.TextMarshaler (JSON, YAML).
func (SigningSecret) MarshalText() ([]byte, error) { return []byte(redacted), nil }

// Key decodes the secret into the HMAC key. The error describes what is
// wrong without the value.
func (s SigningSecret) Key() ([]byte, error) {
	b64, ok := strings.CutPrefix(string(s), SigningSecretPrefix)
	if !ok {
		return nil, fmt.Errorf("not a Standard Webhooks secret: want %s followed by the base64 of a %d to %d byte key (the value is not shown)",
			SigningSecretPrefix, MinSigningKeyBytes, MaxSigningKeyBytes)
	}
	key, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		// A CorruptInputError holds only the offset, never the input.
		return nil, fmt.Errorf("the part after %s is not standard base64 (%v; the value is not shown)", SigningSecretPrefix, err)
	}
	if len(key) < MinSigningKeyBytes || len(key) > MaxSigningKeyBytes {
		return nil, fmt.Errorf("the key is %d bytes; the Standard Webhooks specification wants %d to %d",
			len(key), MinSigningKeyBytes, MaxSigningKeyBytes)
	}
	return key, nil
}

// SigningSecrets are the secrets a webhook is signed with: every call
// carries one signature per secret, so that a receiver holding any one of
// them can verify it (rotation without downtime: list the new secret and
// the old one until every receiver has the new one).
type SigningSecrets []SigningSecret
