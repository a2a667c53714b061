package config

// Webhook signing secrets (sideEffects[].webhook.signingSecret): the
// Standard Webhooks form, decoded without ever printing the value.

import (
	"encoding/base64"
	"fmt"
	"log/slog"
	"reflect"
	"strings"

	"gopkg.in/yaml.v3"
)

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

// SigningSecret is one webhook signing secret, whsec_ + base64 of the key.
// It never prints its value: fmt (%v, %s, %q, %+v of a struct holding it),
// slog and JSON all show [redacted]. Read it with Key.
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
// the old one until every receiver has the new one). The YAML value is one
// secret, a list of them, or one string of several separated by spaces (so
// that a single environment variable can carry a rotation).
type SigningSecrets []SigningSecret

var signingSecretsType = reflect.TypeFor[SigningSecrets]()

// decodeSigningSecrets decodes signingSecret from its resolved, non-null
// node. Its messages name the YAML type at most, never the value (describe
// would quote it).
func (d *decoder) decodeSigningSecrets(n *yaml.Node, path string) (SigningSecrets, bool) {
	switch n.Kind {
	case yaml.ScalarNode:
		out := SigningSecrets{}
		for _, f := range strings.Fields(n.Value) {
			out = append(out, SigningSecret(f))
		}
		return out, true
	case yaml.SequenceNode:
		out := make(SigningSecrets, 0, len(n.Content))
		for i, e := range n.Content {
			p := fmt.Sprintf("%s[%d]", path, i)
			d.lines[p] = e.Line
			e, ok := d.resolve(e, p)
			if !ok {
				return nil, false
			}
			if e.Kind != yaml.ScalarNode || isNull(e) {
				d.fail(p, e, "expected a %s… secret, got %s", SigningSecretPrefix, kindName(e))
				return nil, false
			}
			out = append(out, SigningSecret(e.Value))
		}
		return out, true
	}
	d.fail(path, n, "expected a %s… secret or a list of them, got %s", SigningSecretPrefix, kindName(n))
	return nil, false
}

// kindName names a node's kind without its value.
func kindName(n *yaml.Node) string {
	switch {
	case n.Kind == yaml.SequenceNode:
		return "a list"
	case n.Kind == yaml.MappingNode:
		return "a mapping"
	case isNull(n):
		return "null"
	}
	return "a " + strings.TrimPrefix(n.ShortTag(), "!!") + " value"
}

// validateSigningSecrets checks each secret's form (never printing it) and
// that none is listed twice. key is the signingSecret key's path.
func validateSigningSecrets(l *errorList, key string, ss SigningSecrets) {
	if ss == nil {
		return
	}
	if len(ss) == 0 {
		l.add(key, "empty: give a %s… secret (or a list of them), or leave the key out for unsigned calls", SigningSecretPrefix)
		return
	}
	seen := map[SigningSecret]int{}
	for i, s := range ss {
		k := key
		if len(ss) > 1 {
			k = fmt.Sprintf("%s[%d]", key, i)
		}
		if _, err := s.Key(); err != nil {
			l.add(k, "%v", err)
		}
		if j, dup := seen[s]; dup {
			l.add(k, "the same secret as %s[%d]", key, j)
		}
		seen[s] = i
	}
}
