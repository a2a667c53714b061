package processor

import (
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/trace"

	"github.com/projector-dev/projector/dedup"
	"github.com/projector-dev/projector/internal/core/eos"
	"github.com/projector-dev/projector/internal/core/seam"
	"github.com/projector-dev/projector/internal/core/state"
	"github.com/projector-dev/projector/projection"
)

// BenchmarkProcessEvent is the processor's whole steady-state per-event
// path, as the loop runs it, without Kafka: decode and fingerprint, dedup
// check and mark, the guard with its merge rule, the projection record and
// its produce, the tally – and, per 5000-event transaction, the changelog
// records and the synced Pebble commit, amortised. Events are new and in
// order, on the same 5000 (of 10k) aggregates in every batch, whose state is
// warm.
func BenchmarkProcessEvent(b *testing.B) { benchProcessEvent(b, nil, nil) }

// BenchmarkProcessEventTraced is BenchmarkProcessEvent whose events carry
// a W3C trace context (traceparent and tracestate headers), which their
// projection records carry on (docs/contract.md#trace-context).
func BenchmarkProcessEventTraced(b *testing.B) { benchProcessEvent(b, benchTraceHeaders, nil) }

// benchTraceHeaders are a W3C trace context's record headers.
var benchTraceHeaders = []kgo.RecordHeader{
	{Key: "traceparent", Value: []byte("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")},
	{Key: "tracestate", Value: []byte("vendor=a")},
}

// benchProcessEvent is BenchmarkProcessEvent with headers on every event
// and, when tp is set, a transaction span per batch (tracing.go).
func benchProcessEvent(b *testing.B, headers []kgo.RecordHeader, tp trace.TracerProvider) {
	const (
		aggregates = 10_000
		txnSize    = 5000
	)
	st, err := state.Open(b.TempDir(), storeOptions(0))
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	p, task, h := directTaskWith(b, st, func(c *Config) { c.TracerProvider = tp })
	changelog := ChangelogTopic(p.cfg.Group, "case-events")
	produced := 0
	produce := func(*kgo.Record) { produced++ }
	now := time.Date(2026, 6, 28, 10, 0, 0, 0, time.UTC)
	version := make([]int64, aggregates)
	recs := make([]*kgo.Record, 0, txnSize)
	next := func() []*kgo.Record {
		recs = recs[:0]
		for range txnSize {
			// Distinct aggregates within a batch (txnSize ≤ aggregates,
			// and 7 is coprime with aggregates), spread over the
			// keyspace: the same ones in every batch.
			a := len(recs) * 7 % aggregates
			version[a]++
			v := version[a]
			agg := fmt.Sprintf("CASE-%06d", a)
			typ := "CaseUpdated"
			if v == 1 {
				typ = "CaseOpened"
			}
			recs = append(recs, &kgo.Record{Key: []byte(agg), Value: fmt.Appendf(nil,
				`{"eventId":"%s-ev-%d","eventType":%q,"aggregateId":%q,"aggregateType":"RegulatoryCase",`+
					`"aggregateVersion":%d,"occurredAt":"2026-06-28T10:15:30Z","producer":"workload","payload":{"owner":"user-%d","updates":%d}}`,
				agg, v, typ, agg, v, v%50, v), Headers: headers})
		}
		return recs
	}
	// Warm up: every aggregate exists and is cached.
	for range 2 {
		bt := eos.NewTaskBatch(st, task, now, produce)
		p.beginSpan(bt) // as Begin does; nothing without a TracerProvider
		for _, r := range next() {
			if err := h.Process(bt, r); err != nil {
				b.Fatal(err)
			}
		}
		if err := bt.Commit(h, changelog); err != nil {
			b.Fatal(err)
		}
	}
	applied0 := p.stats.Outcome(OutcomeApplied)
	batch := next()
	bt := eos.NewTaskBatch(st, task, now, produce)
	p.beginSpan(bt)
	i, processed := 0, 0
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if err := h.Process(bt, batch[i]); err != nil {
			b.Fatal(err)
		}
		processed++
		if i++; i == len(batch) {
			b.StopTimer()
			batch = next()
			b.StartTimer()
			// The dedup segment, the changelog records and the Pebble
			// write, as the loop ends a task's batch.
			if err := bt.Commit(h, changelog); err != nil {
				b.Fatal(err)
			}
			bt = eos.NewTaskBatch(st, task, now, produce)
			p.beginSpan(bt)
			i = 0
		}
	}
	b.StopTimer()
	if err := bt.Commit(h, changelog); err != nil { // the last, partial batch: counted too
		b.Fatal(err)
	}
	// Every timed event took the path measured: applied, nothing else.
	if got := p.stats.Outcome(OutcomeApplied) - applied0; got != int64(processed) {
		b.Fatalf("applied %d of the %d timed events", got, processed)
	}
	for _, oc := range Outcomes {
		if n := p.stats.Outcome(oc); oc != OutcomeApplied && n != 0 {
			b.Fatalf("%d events %s, want none", n, oc)
		}
	}
}

// directTask returns a live processor over st (one versioned projection
// merging CaseOpened and CaseUpdated, effect rules rules) with partition 0
// of case-events restored: for benchmarks and tests that drive records
// through the task's handler without Kafka (eos.NewTaskBatch).
func directTask(tb testing.TB, st *state.Store, rules EffectRules) (*Processor, *eos.Task, *taskState) {
	tb.Helper()
	return directTaskWith(tb, st, func(c *Config) { c.EffectRules = rules })
}

// directTaskWith is directTask whose configuration set changes.
func directTaskWith(tb testing.TB, st *state.Store, set func(*Config)) (*Processor, *eos.Task, *taskState) {
	tb.Helper()
	cfg := Config{
		Session: Session{
			Name: "bench", InstanceID: "b", Brokers: []string{"127.0.0.1:1"}, DeadLetterTopic: "dlq",
		},
		seams:        seam.Seams{Store: st},
		Inputs:       []string{"case-events"},
		EffectsTopic: "effects",
		Projections: []*projection.Projection{{Name: "case-overview", Topic: "case-overview.v1",
			Handler: projection.Rules{"CaseOpened": projection.Merge, "CaseUpdated": projection.Merge}, Versioned: true}},
		Dedup: dedup.NewStore(168 * time.Hour), Mode: Live,
	}
	set(&cfg)
	p, err := New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	id := state.Task{Topic: "case-events", Partition: 0}
	task := &eos.Task{ID: id, Prefix: id.Prefix()}
	h := (*pipeline)(p).NewTask(task)
	if err := h.Restored(); err != nil {
		tb.Fatal(err)
	}
	return p, task, h
}
