package metrics

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/projector-dev/projector/internal/core/state"
	"github.com/projector-dev/projector/internal/harness/testkit"
	"github.com/projector-dev/projector/processor"
	"github.com/projector-dev/projector/sideeffects"
)

var (
	_ Source         = processorStats{}
	_ ExecutorSource = executorStats{}
)

// fakeSource is a settable Source.
type fakeSource struct {
	mu sync.Mutex
	// counts are every counter the Source reports, by what and labels
	// ("events", projection, outcome; "dlq", reason; "effects", effect,
	// status; "txns", result).
	counts    map[string]int64
	restored  int64
	standby   processor.StandbyStats
	ready     bool
	assigned  []processor.Partition
	gaps      map[string]processor.GapSummary
	observers []func(processor.TxnObservation)
}

func newFake() *fakeSource {
	return &fakeSource{counts: map[string]int64{}}
}

// locked reads one of the fake's fields under its mutex.
func locked[T any](f *fakeSource, read func() T) T {
	f.mu.Lock()
	defer f.mu.Unlock()
	return read()
}

func countKey(what string, labels ...string) string {
	return what + "|" + strings.Join(labels, "|")
}

// set sets one counter (what and labels as in counts).
func (f *fakeSource) set(n int64, what string, labels ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.counts[countKey(what, labels...)] = n
}

func (f *fakeSource) count(what string, labels ...string) int64 {
	return locked(f, func() int64 { return f.counts[countKey(what, labels...)] })
}

func (f *fakeSource) Events(p, o string) int64    { return f.count("events", p, o) }
func (f *fakeSource) DeadLetters(r string) int64  { return f.count("dlq", r) }
func (f *fakeSource) Effects(e, s string) int64   { return f.count("effects", e, s) }
func (f *fakeSource) Transactions(r string) int64 { return f.count("txns", r) }
func (f *fakeSource) Restored() int64             { return locked(f, func() int64 { return f.restored }) }
func (f *fakeSource) MissingInputs() []string     { return nil }
func (f *fakeSource) RestoreRetries() int64       { return 0 }
func (f *fakeSource) HeldTransactions() int64     { return 0 }
func (f *fakeSource) Standby() processor.StandbyStats {
	return locked(f, func() processor.StandbyStats { return f.standby })
}

func (f *fakeSource) Ready() bool { return locked(f, func() bool { return f.ready }) }
func (f *fakeSource) Assigned() []processor.Partition {
	return locked(f, func() []processor.Partition { return slices.Clone(f.assigned) })
}
func (f *fakeSource) Gaps() map[string]processor.GapSummary {
	return locked(f, func() map[string]processor.GapSummary { return maps.Clone(f.gaps) })
}
func (f *fakeSource) Observe(fn func(processor.TxnObservation)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.observers = append(f.observers, fn)
}
func (f *fakeSource) txn(result string, d time.Duration) {
	f.mu.Lock()
	f.counts[countKey("txns", result)]++
	obs := slices.Clone(f.observers)
	f.mu.Unlock()
	for _, o := range obs {
		o(processor.TxnObservation{Result: result, Duration: d})
	}
}

// series gathers reg into "name{k=v,...}" → value (histograms: _count and _sum).
func series(t *testing.T, g prometheus.Gatherer) map[string]float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var ls []string
			for _, l := range m.GetLabel() {
				ls = append(ls, l.GetName()+"="+l.GetValue())
			}
			sort.Strings(ls)
			key := mf.GetName()
			if len(ls) > 0 {
				key += "{" + strings.Join(ls, ",") + "}"
			}
			switch mf.GetType() {
			case dto.MetricType_COUNTER:
				out[key] = m.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				out[key] = m.GetGauge().GetValue()
			case dto.MetricType_HISTOGRAM:
				out[mf.GetName()+"_count"] = float64(m.GetHistogram().GetSampleCount())
				out[mf.GetName()+"_sum"] = m.GetHistogram().GetSampleSum()
			}
		}
	}
	return out
}

func newTest(t *testing.T, o Options) (*prometheus.Registry, *Metrics, *fakeSource) {
	t.Helper()
	f := newFake()
	if o.Processor == nil {
		o.Processor = f
	}
	if o.Projections == nil {
		o.Projections = []string{"case-overview", "sla"}
	}
	if o.Effects == nil {
		o.Effects = []string{"sla-breach-email"}
	}
	reg := prometheus.NewPedanticRegistry()
	m, err := New(reg, o)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return reg, m, f
}

func TestEverySeriesExistsAtZero(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	reg, _, f := newTest(t, Options{Now: func() time.Time { return now }})
	f.assigned = []processor.Partition{{Topic: "events", Partition: 0}, {Topic: "events", Partition: 3}}

	want := map[string]int{
		"projector_events_total":          3 * len(processor.Outcomes), // two projections + _record
		"projector_deadletter_total":      len(EnvelopeFields) + 4,
		"projector_side_effects_total":    len(EffectStatuses),
		"projector_transactions_total":    3,
		"projector_gaps_open":             2,
		"projector_gap_oldest_seconds":    2,
		"projector_side_effects_pending":  1,
		"projector_restore_records_total": 1,
		"projector_standby_partitions":    1,
		"projector_standby_records_total": 1,
		"projector_transaction_seconds":   1,
		"projector_consumer_lag":          2,
		"projector_ready":                 1,
	}
	for name, n := range want {
		if got := count(t, reg, name); got != n {
			t.Errorf("%s: %d series, want %d", name, got, n)
		}
	}
	for k, v := range series(t, reg) {
		if v != 0 && k != "projector_assigned_partitions" {
			t.Errorf("%s = %v before any event, want 0", k, v)
		}
	}
	s := series(t, reg)
	for _, k := range []string{
		"projector_events_total{outcome=applied,projection=case-overview}",
		"projector_events_total{outcome=invalid,projection=_record}",
		"projector_deadletter_total{reason=invalid:occurredAt}",
		"projector_deadletter_total{reason=invalid:value}",
		"projector_deadletter_total{reason=gap-timeout}",
		"projector_deadletter_total{reason=handler-error}",
		"projector_deadletter_total{reason=conflict}",
		"projector_side_effects_total{effect=sla-breach-email,status=duplicate}",
		"projector_transactions_total{result=failed}",
		"projector_gap_oldest_seconds{projection=sla}",
		"projector_consumer_lag{partition=3,topic=events}",
		"projector_transaction_seconds_count",
	} {
		if _, ok := s[k]; !ok {
			t.Errorf("missing series %s", k)
		}
	}
}

func count(t *testing.T, g prometheus.Gatherer, name string) int {
	t.Helper()
	n, err := testutil.GatherAndCount(g, name)
	if err != nil {
		t.Fatalf("count %s: %v", name, err)
	}
	return n
}

func TestExactValues(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	pending := int64(0)
	x := newFake() // the executor
	reg, _, f := newTest(t, Options{
		Executor: x,
		Now:      func() time.Time { return now },
		Pending:  func() int64 { return pending },
	})
	f.set(7, "events", "case-overview", "applied")
	f.set(2, "events", "sla", "stale")
	f.set(3, "events", "", "invalid")
	f.set(2, "dlq", "invalid:eventId")
	f.set(1, "dlq", "conflict")
	f.set(4, "effects", "sla-breach-email", "enqueued")
	f.set(5, "effects", "sla-breach-email", "suppressed")
	f.restored = 42
	f.standby = processor.StandbyStats{Partitions: 2, CaughtUp: 1, Records: 77}
	f.ready = true
	f.assigned = []processor.Partition{{Topic: "events", Partition: 1}}
	f.gaps = map[string]processor.GapSummary{"sla": {Open: 2, Oldest: now.Add(-90 * time.Second)}}
	pending = 3
	f.txn("committed", 20*time.Millisecond)
	f.txn("committed", 30*time.Millisecond)
	f.txn("aborted", time.Second) // counted, not observed
	f.txn("failed", 0)
	x.set(1, "effects", "sla-breach-email", "succeeded")
	x.set(1, "effects", "sla-breach-email", "unknown")
	x.set(1, "effects", "sla-breach-email", "in-flight") // not a contract status
	x.set(1, "effects", "sla-breach-email", "enqueued")  // adds to the processor's
	x.restored = 8
	x.assigned = []processor.Partition{{Topic: "effects", Partition: 0}}
	x.txn("committed", 50*time.Millisecond)
	x.txn("aborted", 0)

	want := map[string]float64{
		"projector_events_total{outcome=applied,projection=case-overview}":        7,
		"projector_events_total{outcome=stale,projection=sla}":                    2,
		"projector_events_total{outcome=invalid,projection=_record}":              3,
		"projector_events_total{outcome=applied,projection=sla}":                  0,
		"projector_deadletter_total{reason=invalid:eventId}":                      2,
		"projector_deadletter_total{reason=conflict}":                             1,
		"projector_deadletter_total{reason=gap-timeout}":                          0,
		"projector_side_effects_total{effect=sla-breach-email,status=enqueued}":   5,
		"projector_side_effects_total{effect=sla-breach-email,status=suppressed}": 5,
		"projector_side_effects_total{effect=sla-breach-email,status=succeeded}":  1,
		"projector_side_effects_total{effect=sla-breach-email,status=unknown}":    1,
		"projector_side_effects_total{effect=sla-breach-email,status=failed}":     0,
		"projector_side_effects_pending":                                          3,
		"projector_transactions_total{result=committed}":                          3,
		"projector_transactions_total{result=aborted}":                            2,
		"projector_transactions_total{result=failed}":                             1,
		"projector_transaction_seconds_count":                                     3,
		"projector_transaction_seconds_sum":                                       0.1,
		"projector_restore_records_total":                                         50,
		"projector_standby_partitions":                                            2,
		"projector_standby_caught_up_partitions":                                  1,
		"projector_standby_records_total":                                         77,
		"projector_gaps_open{projection=sla}":                                     2,
		"projector_gap_oldest_seconds{projection=sla}":                            90,
		"projector_gaps_open{projection=case-overview}":                           0,
		"projector_gap_oldest_seconds{projection=case-overview}":                  0,
		"projector_consumer_lag{partition=1,topic=events}":                        0,
		"projector_consumer_lag{partition=0,topic=effects}":                       0,
		"projector_ready":               0, // the executor is not
		"projector_assigned_partitions": 2,
	}
	got := series(t, reg)
	for k, v := range want {
		g, ok := got[k]
		if !ok {
			t.Errorf("missing %s", k)
			continue
		}
		if d := g - v; d > 1e-9 || d < -1e-9 {
			t.Errorf("%s = %v, want %v", k, g, v)
		}
	}
	if _, ok := got["projector_side_effects_total{effect=sla-breach-email,status=in-flight}"]; ok {
		t.Error("in-flight exported; not a contract status")
	}
	x.mu.Lock()
	x.ready = true
	x.mu.Unlock()
	if v := series(t, reg)["projector_ready"]; v != 1 {
		t.Errorf("projector_ready with both loops ready = %v", v)
	}

	// The exposition format of one family, exactly.
	exp := `
# HELP projector_transactions_total Kafka transactions by result.
# TYPE projector_transactions_total counter
projector_transactions_total{result="aborted"} 2
projector_transactions_total{result="committed"} 3
projector_transactions_total{result="failed"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(exp), "projector_transactions_total"); err != nil {
		t.Error(err)
	}
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
}

// Values are read at scrape time: two scrapes with nothing new report the
// same numbers (no double counting), and new commits show on the next one.
func TestScrapeIsIdempotent(t *testing.T) {
	reg, _, f := newTest(t, Options{})
	f.set(1, "events", "sla", "applied")
	k := "projector_events_total{outcome=applied,projection=sla}"
	if a, b := series(t, reg)[k], series(t, reg)[k]; a != 1 || b != 1 {
		t.Fatalf("scrapes: %v, %v; want 1, 1", a, b)
	}
	f.set(4, "events", "sla", "applied")
	if v := series(t, reg)[k]; v != 4 {
		t.Fatalf("after commits: %v, want 4", v)
	}
}

func TestNoLoops(t *testing.T) {
	// Without any loop (the HTTP server up before the processor is built,
	// say) every series is still there, at 0, and the process is not ready.
	reg := prometheus.NewPedanticRegistry()
	if _, err := New(reg, Options{Projections: []string{"p"}}); err != nil {
		t.Fatal(err)
	}
	if n := count(t, reg, "projector_events_total"); n != 2*len(processor.Outcomes) {
		t.Fatalf("events series: %d", n)
	}
	if n := count(t, reg, "projector_transactions_total"); n != 3 {
		t.Fatalf("transactions series: %d", n)
	}
}

func TestNewErrors(t *testing.T) {
	if _, err := New(nil, Options{}); err == nil {
		t.Error("nil registerer: no error")
	}
	if _, err := New(prometheus.NewRegistry(), Options{Projections: []string{RecordLevel}}); err == nil {
		t.Error("reserved projection name: no error")
	}
	reg := prometheus.NewRegistry()
	if _, err := New(reg, Options{}); err != nil {
		t.Fatal(err)
	}
	if _, err := New(reg, Options{}); err == nil {
		t.Error("second New on the same registry: no error")
	}
	// The failed New left the first set intact and nothing of its own.
	if n := count(t, reg, "projector_transactions_total"); n != 3 {
		t.Errorf("transactions series after failed New: %d", n)
	}
}

func TestDeadLetterReasons(t *testing.T) {
	got := DeadLetterReasons()
	for _, r := range []string{"invalid:eventId", "invalid:eventType", "invalid:aggregateId", "invalid:aggregateType",
		"invalid:aggregateVersion", "invalid:tenantId", "invalid:occurredAt", "invalid:correlationId",
		"invalid:causationId", "invalid:producer", "invalid:payload", "invalid:value",
		"conflict", "gap-timeout", "handler-error", "too-large"} {
		if !slices.Contains(got, r) {
			t.Errorf("missing reason %s", r)
		}
	}
	if len(got) != 16 {
		t.Errorf("%d reasons, want 16: %v", len(got), got)
	}
}

type fakeLag struct {
	mu    sync.Mutex
	calls int
	fn    func(call int) (map[TopicPartition]int64, error)
}

func (l *fakeLag) Lag(ctx context.Context) (map[TopicPartition]int64, error) {
	l.mu.Lock()
	l.calls++
	n := l.calls
	l.mu.Unlock()
	return l.fn(n)
}

func (l *fakeLag) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.calls
}

func TestLagRefresh(t *testing.T) {
	p0, p1 := TopicPartition{"events", 0}, TopicPartition{"events", 1}
	lag := &fakeLag{fn: func(call int) (map[TopicPartition]int64, error) {
		switch call {
		case 1:
			return map[TopicPartition]int64{p0: 5, p1: 7, {"other", 0}: 9}, nil
		case 2: // partial failure: p0 loaded, p1 keeps its last value
			return map[TopicPartition]int64{p0: 2}, errors.New("p1: leader not available")
		default:
			return nil, errors.New("down")
		}
	}}
	reg, m, f := newTest(t, Options{Lag: lag, LagInterval: time.Hour})
	f.assigned = []processor.Partition{{Topic: "events", Partition: 0}, {Topic: "events", Partition: 1}}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	testkit.Await(t, 10*time.Second, "the lag series", func() bool { return lag.count() >= 1 })
	testkit.Await(t, 10*time.Second, "the lag series", func() bool { return series(t, reg)["projector_consumer_lag{partition=0,topic=events}"] == 5 })
	s := series(t, reg)
	if s["projector_consumer_lag{partition=1,topic=events}"] != 7 {
		t.Errorf("p1 lag %v, want 7", s["projector_consumer_lag{partition=1,topic=events}"])
	}
	if _, ok := s["projector_consumer_lag{partition=0,topic=other}"]; ok {
		t.Error("lag reported for a partition not assigned")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if err := m.Run(context.Background()); err == nil {
		t.Error("second Run: no error")
	}

	// Partial failure, then total failure: driven directly.
	m.refreshLag(context.Background())
	s = series(t, reg)
	if s["projector_consumer_lag{partition=0,topic=events}"] != 2 || s["projector_consumer_lag{partition=1,topic=events}"] != 7 {
		t.Errorf("after partial failure: %v", s)
	}
	m.refreshLag(context.Background())
	s = series(t, reg)
	if s["projector_consumer_lag{partition=0,topic=events}"] != 2 || s["projector_consumer_lag_errors_total"] != 2 {
		t.Errorf("after failure: lag p0 %v, errors %v", s["projector_consumer_lag{partition=0,topic=events}"], s["projector_consumer_lag_errors_total"])
	}
}

func TestRunWithoutLagReturns(t *testing.T) {
	_, m, _ := newTest(t, Options{})
	if err := m.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestPebble(t *testing.T) {
	st, err := state.Open("db", state.Options{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	reg, _, _ := newTest(t, Options{Pebble: map[string]func() *pebble.Metrics{"processor": st.Metrics}})
	s := series(t, reg)
	for _, k := range []string{
		"projector_pebble_disk_bytes", "projector_pebble_compactions_total", "projector_pebble_block_cache_hits_total",
		"projector_pebble_block_cache_misses_total", "projector_pebble_block_cache_hit_ratio",
		"projector_pebble_block_cache_bytes", "projector_pebble_memtable_bytes", "projector_pebble_read_amplification",
	} {
		if _, ok := s[k+"{store=processor}"]; !ok {
			t.Errorf("missing %s{store=processor}", k)
		}
	}
	if v := s["projector_pebble_memtable_bytes{store=processor}"]; v <= 0 {
		t.Errorf("memtable bytes %v, want > 0", v)
	}
}

func ExampleDeadLetterReasons() {
	r := DeadLetterReasons()
	fmt.Println(len(r), r[0], r[len(r)-1])
	// Output: 16 invalid:eventId too-large
}

func TestTypedNilSources(t *testing.T) {
	var ps *processor.Stats
	var ws *sideeffects.WorkerStats
	reg := prometheus.NewPedanticRegistry()
	if _, err := New(reg, Options{Processor: Processor(ps), Executor: Executor(ws), Effects: []string{"e"}}); err != nil {
		t.Fatal(err)
	}
	if n := count(t, reg, "projector_side_effects_total"); n != len(EffectStatuses) {
		t.Fatalf("effects series: %d", n)
	}
}

func TestLagSources(t *testing.T) {
	a := &fakeLag{fn: func(int) (map[TopicPartition]int64, error) {
		return map[TopicPartition]int64{{"in", 0}: 1}, nil
	}}
	b := &fakeLag{fn: func(int) (map[TopicPartition]int64, error) {
		return map[TopicPartition]int64{{"fx", 0}: 2}, errors.New("fx/1: no leader")
	}}
	got, err := LagSources{a, b}.Lag(context.Background())
	if err == nil || got[TopicPartition{"in", 0}] != 1 || got[TopicPartition{"fx", 0}] != 2 {
		t.Fatalf("got %v, %v", got, err)
	}
}
