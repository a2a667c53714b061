package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/projector-dev/projector/internal/harness/testkit"
	"github.com/projector-dev/projector/internal/harness/workload"
)

var binary string

// TestMain builds the real binary once: these tests run it as a user would.
// Their parallel tests wait on processes, brokers and webhooks far more than
// they compute (TestKafkaACLs' removal runs: 20 s at -parallel 2, 12 s at 4,
// the same CPU time), so four run at once.
func TestMain(m *testing.M) {
	flag.Parse()
	testkit.WaitingParallel(4)
	dir, err := os.MkdirTemp("", "projector-bin-")
	if err != nil {
		panic(err)
	}
	if binary, err = testkit.BuildProjector(context.Background(), dir); err != nil {
		fmt.Fprintf(os.Stderr, "build: %v\n", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

type result struct {
	code           int
	stdout, stderr string
}

func runBinary(t *testing.T, timeout time.Duration, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return result{code, o.String(), e.String()}
}

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "projector.yaml")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestInvalidConfigExits2 checks that a bad configuration exits 2 and names the key.
func TestInvalidConfigExits2(t *testing.T) {
	for _, tc := range []struct{ name, body, key string }{
		{"unknown key", "name: x\nkafka:\n  brokerz: [a:1]\n  input: [in]\nprojections:\n  - {name: p, topic: p.v1, events: {A: merge}}\n", "kafka.brokerz"},
		{"bad rule", "name: x\nkafka:\n  brokers: embedded\n  input: [in]\nprojections:\n  - {name: p, topic: p.v1, events: {A: mrge}}\n", "projections[0].events.A"},
		{"bad policy", "name: x\nkafka:\n  brokers: embedded\n  input: [in]\ngaps: {onTimeout: never}\nprojections:\n  - {name: p, topic: p.v1, events: {A: merge}}\n", "gaps.onTimeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := runBinary(t, time.Minute, "run", "--config", writeConfig(t, tc.body))
			if r.code != 2 || !strings.Contains(r.stderr, tc.key) {
				t.Fatalf("exit %d, stderr %q: want exit 2 naming %s", r.code, r.stderr, tc.key)
			}
		})
	}
	r := runBinary(t, time.Minute, "run")
	if r.code != 2 || !strings.Contains(r.stderr, "--config") {
		t.Fatalf("run without --config: exit %d, stderr %q", r.code, r.stderr)
	}
	r = runBinary(t, time.Minute, "frobnicate")
	if r.code != 2 {
		t.Fatalf("unknown command: exit %d", r.code)
	}
	r = runBinary(t, time.Minute, "run", "--help")
	if r.code != 0 || !strings.Contains(r.stdout, "Example:") {
		t.Fatalf("run --help: exit %d, stdout %q", r.code, r.stdout)
	}
}

const runConfig = `name: cli-test
kafka:
  brokers: embedded
  embeddedBroker: {listen: "127.0.0.1:0", dir: %q}
  instanceId: t1
  input: [events]
state: {dir: %q}
http: {listen: "off"}
projections:
  - name: overview
    topic: overview.v1
    events: {CaseOpened: merge, CaseUpdated: merge, CaseEscalated: merge, CaseClosed: delete}
`

// startWorker starts `projector run` and waits until it logs that it started.
func startWorker(t *testing.T, args ...string) (*exec.Cmd, *bytes.Buffer) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &syncWriter{b: &stderr}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	if err := testkit.WaitFor(context.Background(), time.Minute, func() bool {
		return strings.Contains(cmd.Stderr.(*syncWriter).String(), "processor started")
	}); err != nil {
		t.Fatalf("worker did not start (%v): %s", err, cmd.Stderr.(*syncWriter).String())
	}
	return cmd, &stderr
}

func waitExit(t *testing.T, cmd *exec.Cmd, within time.Duration) int {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode()
		}
		if err != nil {
			t.Fatal(err)
		}
		return 0
	case <-time.After(within):
		t.Fatalf("process did not exit within %s", within)
		return -1
	}
}

// TestRunEmbeddedSIGTERM: `projector run` on the embedded broker exits 0 on SIGTERM.
func TestRunEmbeddedSIGTERM(t *testing.T) {
	dir := t.TempDir()
	cfg := writeConfig(t, fmt.Sprintf(runConfig, filepath.Join(dir, "broker"), filepath.Join(dir, "state")))
	cmd, _ := startWorker(t, "run", "--config", cfg)
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := waitExit(t, cmd, 30*time.Second); code != 0 {
		t.Fatalf("exit code %d after SIGTERM: %s", code, cmd.Stderr.(*syncWriter).String())
	}
}

// TestRunAgainstBrokerAddress: `projector run --brokers ADDR` processes a
// stream on an external broker and exits 0 on SIGTERM after it is caught up.
func TestRunAgainstBrokerAddress(t *testing.T) {
	b, brokers := testkit.Broker(t, 4, "events")
	ctx := context.Background()
	o := workload.Defaults()
	o.Events, o.Aggregates = 5000, 500
	recs, exp := workload.Generate(o)
	if err := testkit.Produce(ctx, brokers, "events", recs); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfg := writeConfig(t, fmt.Sprintf(runConfig, filepath.Join(dir, "broker"), filepath.Join(dir, "state")))
	cmd, _ := startWorker(t, "run", "--config", cfg, "--brokers", b.Addr(), "--log-format", "json")
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := testkit.WaitCaughtUp(wctx, brokers, "cli-test", "events"); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := waitExit(t, cmd, 30*time.Second); code != 0 {
		t.Fatalf("exit code %d after SIGTERM", code)
	}
	if !strings.Contains(cmd.Stderr.(*syncWriter).String(), `"msg":"stopped cleanly"`) {
		t.Errorf("no JSON log line for the clean stop: %s", cmd.Stderr.(*syncWriter).String())
	}
	out, err := testkit.ReadAll(wctx, brokers, "overview.v1")
	if err != nil {
		t.Fatal(err)
	}
	if rep := testkit.CheckProjection(out, exp.Final); !rep.OK() {
		t.Fatal(rep)
	}
}

// TestDemo runs the demo end to end (small bulk phase) and checks its verdicts.
func TestDemo(t *testing.T) {
	r := runBinary(t, 2*time.Minute, "demo", "--bulk", "3000")
	if r.code != 0 {
		t.Fatalf("demo exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	for _, want := range []string{"applied    12        12", "duplicate  2         2", "invalid    4         4",
		"CASE-6  (deleted: tombstone)", "gap-timeout", "conflict", "equals the reference fold",
		"attempts 1  unknown", "succeeded (resolved:", "at most 1 request(s) per key",
		"the sink received 0 requests from it", "0 different, 0 missing",
		"first request      201  applied", "retry, reordered   200  replayed=true, same body, 1 event(s) written in all", "changed payload    409  refused",
		"applied 2, duplicate 1 (the JSON copy of the Avro event)", `CASE-9  v1  {"amount":75,"status":"OPEN"}`} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("demo output lacks %q:\n%s", want, r.stdout)
		}
	}
	// The demo logs at warn level: on a healthy run nothing may interleave
	// with its summary.
	if strings.Contains(r.stdout+r.stderr, "level=WARN") || strings.Contains(r.stdout+r.stderr, "level=ERROR") {
		t.Errorf("the demo logged warnings or errors:\nstdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	}
}
