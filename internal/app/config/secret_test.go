package config

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/projector-dev/projector/sideeffects/webhook"
)

// secretOf returns a valid whsec_ secret of an n-byte key filled with b.
func secretOf(n int, b byte) string {
	return webhook.SigningSecretPrefix + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{b}, n))
}

const signedEffect = `name: p
kafka: {brokers: [k:9092], input: [in]}
projections: [{name: p, topic: out, events: {A: merge}}]
sideEffects:
  - name: fx
    on: [A]
    key: "k:{eventId}"
    webhook:
      url: http://h/x
      signingSecret: %s
`

// TestSigningSecretForms: one secret, a list, a space-separated string (one
// environment variable carrying a rotation), each through ${ENV}, all decode
// to the secrets in order and their keys.
func TestSigningSecretForms(t *testing.T) {
	a, b := secretOf(32, 'a'), secretOf(24, 'b')
	env := map[string]string{"WHSEC": a, "WHSEC_NEW": a, "WHSEC_OLD": b, "WHSEC_BOTH": a + " " + b}
	for _, tc := range []struct {
		name, value string
		want        []string
	}{
		{"one", a, []string{a}},
		{"one from env", "${WHSEC}", []string{a}},
		{"list", fmt.Sprintf("[%s, %s]", a, b), []string{a, b}},
		{"list from env", `["${WHSEC_NEW}", "${WHSEC_OLD}"]`, []string{a, b}},
		{"block list", "\n        - " + a + "\n        - ${WHSEC_OLD}", []string{a, b}},
		{"spaces in one variable", "${WHSEC_BOTH}", []string{a, b}},
		{"absent (null)", "null", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := mustParse(t, fmt.Sprintf(signedEffect, tc.value), env)
			got := c.SideEffects[0].Webhook.SigningSecret
			if len(got) != len(tc.want) {
				t.Fatalf("got %d secrets, want %d", len(got), len(tc.want))
			}
			for i, s := range got {
				if string(s) != tc.want[i] {
					t.Errorf("secret %d differs from the one configured", i)
				}
				key, err := s.Key()
				if err != nil {
					t.Fatalf("Key: %v", err)
				}
				want, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(tc.want[i], webhook.SigningSecretPrefix))
				if !bytes.Equal(key, want) {
					t.Errorf("key %d: got %x", i, key)
				}
			}
		})
	}
}

// TestSigningSecretErrors: a secret that is not whsec_ + base64 of a 24 to
// 64 byte key is refused naming the key (exit 2 in the binary) and the
// message never contains the secret.
func TestSigningSecretErrors(t *testing.T) {
	good := secretOf(32, 'g')
	raw := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{'r'}, 32))
	for _, tc := range []struct {
		name, value, key, msg string
		secrets               []string // must not appear in the message
	}{
		{"no prefix", raw, "signingSecret", "not a Standard Webhooks secret", []string{raw}},
		{"not base64", "whsec_Zm9v*YmFy.secretpart", "signingSecret", "not standard base64", []string{"Zm9v*YmFy.secretpart"}},
		{"too short", secretOf(16, 's'), "signingSecret", "the key is 16 bytes", []string{secretOf(16, 's')}},
		{"too long", secretOf(65, 'l'), "signingSecret", "the key is 65 bytes", []string{secretOf(65, 'l')}},
		{"empty", `""`, "signingSecret", "empty", nil},
		{"empty list", "[]", "signingSecret", "empty", nil},
		{"bad second of a list", fmt.Sprintf("[%s, %s]", good, raw), "signingSecret[1]", "not a Standard Webhooks secret", []string{good, raw}},
		{"duplicate", fmt.Sprintf("[%s, %s]", good, good), "signingSecret[1]", "the same secret as", []string{good}},
		{"mapping", "{a: " + good + "}", "signingSecret", "got a mapping", []string{good}},
		{"list of lists", "[[" + good + "]]", "signingSecret[0]", "got a list", []string{good}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(fmt.Sprintf(signedEffect, tc.value)), nil)
			e := wantKey(t, err, "sideEffects[0].webhook."+tc.key)
			if !strings.Contains(e.Msg, tc.msg) {
				t.Errorf("message %q does not say %q", e.Msg, tc.msg)
			}
			for _, s := range tc.secrets {
				if strings.Contains(err.Error(), s) || strings.Contains(err.Error(), strings.TrimPrefix(s, webhook.SigningSecretPrefix)) {
					t.Errorf("the message shows a secret: %q", err.Error())
				}
			}
		})
	}
}

// redacted is what a webhook.SigningSecret prints as.
const redacted = "[redacted]"

// TestSigningSecretNeverPrinted: the ways a configuration gets printed (fmt
// verbs on the struct, slog text and JSON, encoding/json) show [redacted].
func TestSigningSecretNeverPrinted(t *testing.T) {
	s := secretOf(32, 'p')
	w := Webhook{URL: "http://h/x", SigningSecret: webhook.SigningSecrets{webhook.SigningSecret(s)}}
	body := strings.TrimPrefix(s, webhook.SigningSecretPrefix)
	var outs []string
	for _, f := range []string{"%v", "%+v", "%#v", "%s", "%q"} {
		outs = append(outs, fmt.Sprintf(f, w), fmt.Sprintf(f, w.SigningSecret[0]))
	}
	j, err := json.Marshal(w)
	if err != nil {
		t.Fatal(err)
	}
	outs = append(outs, string(j))
	var buf bytes.Buffer
	slog.New(slog.NewTextHandler(&buf, nil)).Info("x", "webhook", w, "secret", w.SigningSecret[0])
	slog.New(slog.NewJSONHandler(&buf, nil)).Info("x", "webhook", w, "secret", w.SigningSecret[0])
	outs = append(outs, buf.String())
	for _, o := range outs {
		if strings.Contains(o, body) {
			t.Errorf("printed: %s", o)
		}
	}
	if !strings.Contains(string(j), redacted) {
		t.Errorf("JSON %s does not show %s", j, redacted)
	}
}
