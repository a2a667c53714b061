package main

import (
	"strings"
	"testing"
	"time"
)

const signingCheckConfig = `name: sign-test
kafka: {brokers: "k:9092", instanceId: t1, input: [events]}
projections: [{name: p, topic: p.v1, events: {A: merge}}]
sideEffects:
  - name: notify
    on: [A]
    key: "n:{eventId}"
    webhook: {url: "http://127.0.0.1:8099/notify", signingSecret: "${WEBHOOK_SIGNING_SECRET}"}
`

// TestCheckSigningSecret: `projector run --check` takes a Standard Webhooks
// secret (or two, space-separated, during a rotation) from the environment,
// and refuses one that is not whsec_ + base64 with exit 2, naming the key
// and never the value.
func TestCheckSigningSecret(t *testing.T) {
	cfg := writeConfig(t, signingCheckConfig)
	const good, old = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD"
	for _, tc := range []struct {
		name, secret string
		code         int
	}{
		{"one secret", good, 0},
		{"rotation in one variable", good + " " + old, 0},
		{"no whsec_ prefix", "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", 2},
		{"not base64", "whsec_MfKQ9r8GKYqrTwjUPD8I!!!o2LaLaSw", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("WEBHOOK_SIGNING_SECRET", tc.secret)
			r := runBinary(t, time.Minute, "run", "--config", cfg, "--check")
			if r.code != tc.code {
				t.Fatalf("exit %d, want %d; stderr %q", r.code, tc.code, r.stderr)
			}
			if tc.code == 2 && !strings.Contains(r.stderr, "sideEffects[0].webhook.signingSecret") {
				t.Errorf("stderr does not name the key: %q", r.stderr)
			}
			if secret := strings.TrimPrefix(tc.secret, "whsec_"); strings.Contains(r.stdout+r.stderr, secret) {
				t.Errorf("the output shows the secret: %q %q", r.stdout, r.stderr)
			}
		})
	}
}
