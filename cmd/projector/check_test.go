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
	os.Unsetenv("POD_NAME")
	r = runBinary(t, 30*time.Second, "run", "--config", cfg, "--check")
	if r.code != 2 || !strings.Contains(r.stderr, "POD_NAME") {
		t.Errorf("unset POD_NAME: exit %d, stderr %q; want 2 naming the variable", r.code, r.stderr)
	}
}
