package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/projector-dev/projector/internal/harness/testkit"
	"github.com/projector-dev/projector/internal/harness/workload"
)

const rebuildTestConfig = `name: cli-rebuild
kafka:
  brokers: [%s]
  instanceId: t1
  input: [events]
state: {dir: %q}
http: {listen: "off"}
projections:
  - name: overview
    topic: overview.v1
    events: {CaseOpened: merge, CaseUpdated: merge, %s CaseClosed: delete}
sideEffects:
  - name: escalation-email
    on: [CaseEscalated]
    key: "email:{aggregateId}:v{aggregateVersion}"
    webhook: {url: %q}
`

// rebuildSetup starts a broker with a workload on "events" and writes two
// configurations: the live rules and one that no longer merges
// CaseEscalated. Calls to the webhook are counted in calls.
func rebuildSetup(t *testing.T, events int) (brokers []string, cfg, changed string, calls *atomic.Int64) {
	t.Helper()
	b, brokers := testkit.Broker(t, 4, "events")
	ctx := context.Background()
	o := workload.Defaults()
	o.Events, o.Aggregates = events, events/10
	recs, _ := workload.Generate(o)
	if err := testkit.Produce(ctx, brokers, "events", recs); err != nil {
		t.Fatal(err)
	}
	calls = new(atomic.Int64)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { calls.Add(1) }))
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	write := func(name, esc string) string {
		p := filepath.Join(dir, name)
		body := fmt.Sprintf(rebuildTestConfig, b.Addr(), filepath.Join(dir, "state"), esc, srv.URL)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	return brokers, write("live.yaml", "CaseEscalated: merge,"), write("changed.yaml", ""), calls
}

func rebuildCmd(t *testing.T, ctx context.Context, fn func(context.Context, []string, io.Writer, io.Writer) error, args ...string) (string, error) {
	t.Helper()
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	err := fn(ctx, args, &out, &errb)
	if testing.Verbose() {
		t.Logf("%v\nstdout:\n%s\nstderr:\n%s", args, out.String(), errb.String())
	}
	return out.String(), err
}

// TestRebuildAndDiffCommands: `projector rebuild` runs to the end offsets,
// prints the summary and resumes; `projector diff` finds two rebuilds of the
// same rules identical (exit 0) and a rebuild with a changed rule different
// (exit 1); nothing is ever called.
func TestRebuildAndDiffCommands(t *testing.T) {
	brokers, cfg, changed, calls := rebuildSetup(t, 5000)
	ctx := context.Background()
	out, err := rebuildCmd(t, ctx, runRebuild, "--config", cfg, "--projection", "overview", "--topic", "overview.v2", "--progress", "lines")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"records on 4 partitions", "done: 100.0%", "complete: caught up with the end offsets taken at start",
		"started from        the earliest offsets", "outcomes            applied 5000", "suppressed effects  ", "nothing was called",
		"dead letters", "to overview.v2.dlq", "rate ", "projector diff --config " + cfg + " --topic overview.v1 --topic overview.v2"} {
		if !strings.Contains(out, want) {
			t.Errorf("rebuild output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "suppressed effects  0") {
		t.Errorf("no suppressed effects:\n%s", out)
	}
	// Run again: it resumes from its committed offsets and has nothing to do.
	out, err = rebuildCmd(t, ctx, runRebuild, "--config", cfg, "--topic", "overview.v2", "--progress", "none")
	if err != nil || !strings.Contains(out, "resumed") || !strings.Contains(out, "events              0 records consumed (target 0)") {
		t.Errorf("second run: %v\n%s", err, out)
	}
	if _, err := rebuildCmd(t, ctx, runRebuild, "--config", cfg, "--topic", "overview.v3", "--progress", "none"); err != nil {
		t.Fatal(err)
	}
	out, err = rebuildCmd(t, ctx, runDiff, "--config", cfg, "--topic", "overview.v2", "--topic", "overview.v3")
	if err != nil || !strings.Contains(out, "identical") || !strings.Contains(out, "different     0") {
		t.Errorf("diff of two rebuilds: %v\n%s", err, out)
	}
	if _, err := rebuildCmd(t, ctx, runRebuild, "--config", changed, "--topic", "overview.v4", "--progress", "none"); err != nil {
		t.Fatal(err)
	}
	out, err = rebuildCmd(t, ctx, runDiff, "--brokers", brokers[0], "--topic", "overview.v2", "--topic", "overview.v4", "--max", "3")
	if !errors.Is(err, errTopicsDiffer) || report(err, io.Discard) != exitRuntime {
		t.Errorf("diff with a changed rule: %v", err)
	}
	if !strings.Contains(out, "DIFFERENT") || !strings.Contains(out, "keys that differ (first 3):") || strings.Contains(out, "different     0") {
		t.Errorf("diff with a changed rule:\n%s", out)
	}
	out, err = rebuildCmd(t, ctx, runDiff, "--brokers", brokers[0], "--topic", "overview.v2", "--topic", "no-such-topic")
	if err == nil || !strings.Contains(err.Error(), "does not exist") || report(err, io.Discard) != exitRuntime {
		t.Errorf("diff with a missing topic: %v\n%s", err, out)
	}
	if n := calls.Load(); n != 0 {
		t.Errorf("the webhook was called %d times by rebuilds", n)
	}
}

// TestRebuildStoppedBeforeStart: a signal while connecting exits 0 with the
// resume hint.
func TestRebuildStoppedBeforeStart(t *testing.T) {
	_, cfg, _, _ := rebuildSetup(t, 100)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	out, err := rebuildCmd(t, ctx, runRebuild, "--config", cfg, "--topic", "overview.v2")
	if err != nil || !strings.Contains(out, "run the same command again to resume") {
		t.Errorf("%v\n%s", err, out)
	}
}

// TestRebuildDiffUsage: usage errors exit 2, --help exits 0 with an example.
func TestRebuildDiffUsage(t *testing.T) {
	cfg := writeConfig(t, fmt.Sprintf(rebuildTestConfig, "127.0.0.1:1", t.TempDir(), "", "http://127.0.0.1:1/"))
	for _, tc := range []struct {
		name string
		fn   func(context.Context, []string, io.Writer, io.Writer) error
		args []string
		want string
	}{
		{"rebuild no topic", runRebuild, []string{"--config", cfg}, "--topic"},
		{"rebuild no config", runRebuild, []string{"--topic", "x"}, "--config"},
		{"rebuild live topic", runRebuild, []string{"--config", cfg, "--topic", "overview.v1"}, "--topic"},
		{"rebuild input topic", runRebuild, []string{"--config", cfg, "--topic", "events"}, "--topic"},
		{"rebuild unknown projection", runRebuild, []string{"--config", cfg, "--topic", "x", "--projection", "nope"}, "--projection"},
		{"rebuild bad from", runRebuild, []string{"--config", cfg, "--topic", "x", "--from", "yesterday"}, "--from"},
		{"rebuild bad progress", runRebuild, []string{"--config", cfg, "--topic", "x", "--progress", "fancy"}, "--progress"},
		{"rebuild argument", runRebuild, []string{"--config", cfg, "--topic", "x", "extra"}, "extra"},
		{"diff one topic", runDiff, []string{"--brokers", "127.0.0.1:1", "--topic", "a"}, "two --topic"},
		{"diff same topic", runDiff, []string{"--brokers", "127.0.0.1:1", "--topic", "a", "--topic", "a"}, "same"},
		{"diff no brokers", runDiff, []string{"--topic", "a", "--topic", "b"}, "--brokers"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var errb bytes.Buffer
			err := tc.fn(context.Background(), tc.args, io.Discard, io.Discard)
			if code := report(err, &errb); code != exitUsage || !strings.Contains(errb.String(), tc.want) {
				t.Errorf("exit %d, %q: want 2 naming %s", code, errb.String(), tc.want)
			}
		})
	}
	for _, fn := range []func(context.Context, []string, io.Writer, io.Writer) error{runRebuild, runDiff} {
		var out bytes.Buffer
		err := fn(context.Background(), []string{"--help"}, &out, io.Discard)
		if !errors.Is(err, pflag.ErrHelp) || !strings.Contains(out.String(), "Example:") || !strings.Contains(out.String(), "projector diff") {
			t.Errorf("--help: %v\n%s", err, out.String())
		}
	}
	for in, want := range map[string]time.Time{
		"2026-06-28T10:15:30Z": time.Date(2026, 6, 28, 10, 15, 30, 0, time.UTC),
		"2026-06-28":           time.Date(2026, 6, 28, 0, 0, 0, 0, time.UTC),
		"1782641730000":        time.UnixMilli(1782641730000),
	} {
		if got, err := parseTime(in); err != nil || !got.Equal(want) {
			t.Errorf("parseTime(%s) = %s, %v", in, got, err)
		}
	}
}
