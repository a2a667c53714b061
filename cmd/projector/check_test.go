package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestRunCheck: `projector run --check` validates without starting: a good
// configuration exits 0 with a summary and creates no state directory; a
// bad one exits 2 naming the key, including problems only found when the
// worker is built (a rule, a TLS file), not by the YAML validation alone.
func TestRunCheck(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	good := fmt.Sprintf(`name: chk
kafka:
  brokers: [10.255.255.1:9092]   # never dialled: --check connects to nothing
  instanceId: ${POD_NAME}
  input: [events]
state: {dir: %q}
http: {listen: "0.0.0.0:9464"}
projections:
  - {name: p, topic: p.v1, events: {A: merge}}
`, state)
	cfg := writeConfig(t, good)
	t.Setenv("POD_NAME", "projector-3")
	r := runBinary(t, 30*time.Second, "run", "--config", cfg, "--role", "processor", "--check")
	if r.code != 0 || !strings.Contains(r.stdout, "configuration OK: name=chk instanceId=projector-3 role=processor brokers=10.255.255.1:9092") {
		t.Fatalf("good config: exit %d\nstdout %q\nstderr %q", r.code, r.stdout, r.stderr)
	}
	if _, err := os.Stat(state); !os.IsNotExist(err) {
		t.Errorf("--check created or touched the state dir %s (stat: %v)", state, err)
	}
	for _, tc := range []struct{ name, body, key string }{
		{"bad rule", strings.Replace(good, "A: merge", "A: mrge", 1), "projections[0].events.A"},
		{"missing CA file", strings.Replace(good, "  input: [events]\n", "  input: [events]\n  tls: {enabled: true, caFile: /nonexistent/ca.pem}\n", 1), "kafka.tls.caFile"},
	} {
		r := runBinary(t, 30*time.Second, "run", "--config", writeConfig(t, tc.body), "--check")
		if r.code != 2 || !strings.Contains(r.stderr, tc.key) {
			t.Errorf("%s: exit %d, stderr %q; want 2 naming %s", tc.name, r.code, r.stderr, tc.key)
		}
	}
	// The ingress: open on 0.0.0.0 without ingress.auth is refused; a
	// tokens file that does not parse is named; auth: none states it.
	ingress := func(auth string) string { return good + `ingress: {listen: "0.0.0.0:8080"` + auth + "}\n" }
	tokens := filepath.Join(dir, "tokens")
	if err := os.WriteFile(tokens, []byte("not-a-hash acme\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, body, key string }{
		{"open ingress on 0.0.0.0", ingress(""), "ingress.auth: required when ingress.listen (0.0.0.0:8080) is not a loopback address"},
		{"bad tokens file", ingress(", auth: {tokensFile: " + tokens + "}"), "ingress.auth.tokensFile: line 1"},
		{"missing tokens file", ingress(", auth: {tokensFile: /nonexistent/tokens}"), "ingress.auth.tokensFile"},
	} {
		r := runBinary(t, 30*time.Second, "run", "--config", writeConfig(t, tc.body), "--check")
		if r.code != 2 || !strings.Contains(r.stderr, tc.key) {
			t.Errorf("%s: exit %d, stderr %q; want 2 naming %s", tc.name, r.code, r.stderr, tc.key)
		}
	}
	r = runBinary(t, 30*time.Second, "run", "--config", writeConfig(t, ingress(", auth: none")), "--check")
	if r.code != 0 {
		t.Errorf("auth: none on 0.0.0.0: exit %d, stderr %q; want 0 (the opt-out is explicit)", r.code, r.stderr)
	}
	os.Unsetenv("POD_NAME")
	r = runBinary(t, 30*time.Second, "run", "--config", cfg, "--check")
	if r.code != 2 || !strings.Contains(r.stderr, "POD_NAME") {
		t.Errorf("unset POD_NAME: exit %d, stderr %q; want 2 naming the variable", r.code, r.stderr)
	}
}
