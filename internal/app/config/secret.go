package config

// Webhook signing secrets (sideEffects[].webhook.signingSecret): the
// Standard Webhooks form, decoded and checked without ever printing the
// value. The secret's type, which never prints it, is the webhook's
// (webhook.SigningSecret): one type wherever a secret is held.

import (
	"fmt"
	"reflect"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/projector-dev/projector/sideeffects/webhook"
)

// The YAML value is one secret, a list of them, or one string of several
// separated by spaces (so that a single environment variable can carry a
// rotation).
var signingSecretsType = reflect.TypeFor[webhook.SigningSecrets]()

// decodeSigningSecrets decodes signingSecret from its resolved, non-null
// node. Its messages name the YAML type at most, never the value (describe
// would quote it).
func (d *decoder) decodeSigningSecrets(n *yaml.Node, path string) (webhook.SigningSecrets, bool) {
	switch n.Kind {
	case yaml.ScalarNode:
		out := webhook.SigningSecrets{}
		for _, f := range strings.Fields(n.Value) {
			out = append(out, webhook.SigningSecret(f))
		}
		return out, true
	case yaml.SequenceNode:
		out := make(webhook.SigningSecrets, 0, len(n.Content))
		for i, e := range n.Content {
			p := fmt.Sprintf("%s[%d]", path, i)
			d.lines[p] = e.Line
			e, ok := d.resolve(e, p)
			if !ok {
				return nil, false
			}
			if e.Kind != yaml.ScalarNode || isNull(e) {
				d.fail(p, e, "expected a %s… secret, got %s", webhook.SigningSecretPrefix, kindName(e))
				return nil, false
			}
			out = append(out, webhook.SigningSecret(e.Value))
		}
		return out, true
	}
	d.fail(path, n, "expected a %s… secret or a list of them, got %s", webhook.SigningSecretPrefix, kindName(n))
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
func validateSigningSecrets(l *errorList, key string, ss webhook.SigningSecrets) {
	if ss == nil {
		return
	}
	if len(ss) == 0 {
		l.add(key, "empty: give a %s… secret (or a list of them), or leave the key out for unsigned calls", webhook.SigningSecretPrefix)
		return
	}
	seen := map[webhook.SigningSecret]int{}
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
