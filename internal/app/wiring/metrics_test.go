package wiring_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/projector-dev/projector/internal/app/config"
	"github.com/projector-dev/projector/internal/app/wiring"
	"github.com/projector-dev/projector/internal/harness/testkit"
	"github.com/projector-dev/projector/internal/harness/testsize"
	"github.com/projector-dev/projector/internal/harness/workload"
)

const metricsConfig = `name: mx
kafka:
  brokers: [%s]
  instanceId: m1
  input: [case-events]
  sessionTimeout: 6s
state: {dir: %q}
http: {listen: "off"}
projections:
  - name: overview
    topic: overview.v1
    events: {CaseOpened: merge, CaseUpdated: merge, CaseEscalated: merge, CaseClosed: delete}
`

func runApp(t *testing.T, cfg *config.Config) (*wiring.App, func()) {
	t.Helper()
	a, err := wiring.New(cfg, wiring.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	return a, func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
		a.Close()
	}
}

func gauge(t *testing.T, a *wiring.App, name, labels string) float64 {
	t.Helper()
	mfs, err := a.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			var parts []string
			for _, l := range m.GetLabel() {
				parts = append(parts, l.GetName()+"="+l.GetValue())
			}
			if strings.Join(parts, ",") == labels {
				if m.Counter != nil {
					return m.GetCounter().GetValue()
				}
				return m.GetGauge().GetValue()
			}
		}
	}
	t.Fatalf("no series %s{%s}", name, labels)
	return 0
}

// TestMetricsAfterKnownStream: after a workload whose outcomes the reference
// fold knows, every events_total and deadletter_total series has exactly the
// expected value; then, with the state directory wiped, /readyz (App.Ready)
// is false while the state is restored from the changelog and true after,
// and restore_records_total counts the restored records.
func TestMetricsAfterKnownStream(t *testing.T) {
	b, brokers := testkit.Broker(t, 4, "case-events")
	ctx := context.Background()
	o := workload.Defaults()
	o.Events, o.Aggregates, o.Seed = 20000, 2000, 3
	if testsize.Small() { // a fifth, as the integration workloads run by default
		o.Events, o.Aggregates = 4000, 400
	}
	recs, exp := workload.Generate(o)
	if err := testkit.Produce(ctx, brokers, "case-events", recs); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfg, err := config.Parse([]byte(fmt.Sprintf(metricsConfig, b.Addr(), dir)), nil)
	if err != nil {
		t.Fatal(err)
	}
	a, stop := runApp(t, cfg)
	// Every contract series exists from the start.
	if n := testutil.CollectAndCount(a.Registry, "projector_events_total"); n == 0 {
		t.Fatal("projector_events_total has no series at start")
	}
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := testkit.WaitCaughtUp(wctx, brokers, "mx", "case-events"); err != nil {
		t.Fatal(err)
	}
	// The counters are published after Pebble is written, which follows the
	// Kafka commit that made the offsets visible: give the last one a moment.
	// The checks below say what is missing if it never comes.
	_ = testkit.WaitFor(ctx, 30*time.Second, func() bool {
		return gauge(t, a, "projector_events_total", "outcome=applied,projection=overview") >= float64(exp.Applied)
	})
	for _, c := range []struct {
		projection, outcome string
		want                int
	}{
		{"overview", "applied", exp.Applied}, {"overview", "duplicate", exp.Duplicates},
		{"overview", "stale", exp.Stale}, {"overview", "held", exp.Held},
		{"overview", "conflict", exp.Conflicts}, {"_record", "invalid", exp.Invalid},
		{"overview", "failed", 0},
	} {
		if got := gauge(t, a, "projector_events_total", "outcome="+c.outcome+",projection="+c.projection); got != float64(c.want) {
			t.Errorf("events_total{%s,%s} = %v, want %d", c.projection, c.outcome, got, c.want)
		}
	}
	for reason, want := range exp.DeadLetters {
		if got := gauge(t, a, "projector_deadletter_total", "reason="+reason); got != float64(want) {
			t.Errorf("deadletter_total{%s} = %v, want %d", reason, got, want)
		}
	}
	if got := gauge(t, a, "projector_gaps_open", "projection=overview"); got != 0 {
		t.Errorf("gaps_open = %v after every gap closed", got)
	}
	if got := gauge(t, a, "projector_transactions_total", "result=committed"); got < 1 {
		t.Errorf("transactions_total{committed} = %v", got)
	}
	if ok, why := a.Ready(); !ok {
		t.Errorf("not ready after catching up: %s", why)
	}
	stop()

	// Restore from the changelog: wipe the processor's state.
	if err := os.RemoveAll(filepath.Join(dir, "processor")); err != nil {
		t.Fatal(err)
	}
	a2, stop2 := runApp(t, cfg)
	defer stop2()
	// Sample readiness until ready: it must be false while partitions are
	// assigned but their state is still being restored, and never true
	// before the restore is complete.
	type sample struct {
		assigned, ready bool
		restored        int64
	}
	var samples []sample
	st := a2.Processor.Stats()
	deadline := time.Now().Add(time.Minute)
	for {
		// Ready first: a sample that says ready must have read the
		// restored count after readiness (a restore finishing between
		// the two reads would otherwise look like ready too early).
		ready, _ := a2.Ready()
		smp := sample{ready: ready, restored: st.Restored(), assigned: len(st.Assigned()) > 0}
		samples = append(samples, smp)
		if smp.ready {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("never ready after the restore")
		}
		time.Sleep(time.Millisecond) // sleep ok: the sampling interval; the samples themselves are what is checked
	}
	final := st.Restored()
	notReadyWhileRestoring := false
	for _, smp := range samples {
		if smp.ready && smp.restored < final {
			t.Errorf("ready with %d of %d changelog records restored", smp.restored, final)
		}
		if smp.assigned && !smp.ready && smp.restored < final {
			notReadyWhileRestoring = true
		}
	}
	if !notReadyWhileRestoring {
		t.Error("no sample saw partitions assigned and the restore in progress while not ready")
	}
	restored := gauge(t, a2, "projector_restore_records_total", "")
	if restored == 0 {
		t.Error("restore_records_total = 0 after restoring an empty state dir")
	}
	if !t.Failed() {
		t.Logf("%d records; events_total and deadletter_total match the reference fold; restore of %v changelog records: not ready, then ready", len(recs), restored)
	}
}
