package processor

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/projector-dev/projector/internal/core/eos"
	"github.com/projector-dev/projector/internal/core/inputformat"
)

// The transaction span (docs/contract.md#trace-context): one OpenTelemetry
// span per transaction, made when Session.TracerProvider is set. Its parent
// is the first trace context among the transaction's input records (the
// lowest topic-partition's first traced record), and it links to every
// distinct one. It is started when the transaction ends, with the
// timestamp of its beginning: only then are its records, their contexts
// and their outcomes known, and the span's work runs once per transaction,
// on the goroutine that ends it, never per record. With tracing off
// (tracer nil) the per-record path does one nil check and nothing else.

// SpanTransaction is the name of the transaction span.
const SpanTransaction = "projector.transaction"

// Attributes of the transaction span.
const (
	// AttrRecords is the number of input records the transaction read.
	AttrRecords = "projector.records"
	// AttrOutcomePrefix + an outcome's label ("applied", "duplicate", …) is
	// how many times the transaction's records had that outcome, summed
	// over the projections (an event two projections apply counts twice);
	// only the outcomes that occurred are set, and none on an aborted
	// transaction, whose outcomes did not take effect.
	AttrOutcomePrefix = "projector.outcome."
	// AttrDeadLetters is how many records the transaction dead-lettered.
	AttrDeadLetters = "projector.dead_letters"
	// AttrPartitions lists the transaction's input partitions, "topic/partition".
	AttrPartitions = "projector.partitions"
)

// tracerName is the instrumentation scope of the processor's spans.
const tracerName = "github.com/projector-dev/projector/processor"

// txnTrace is what one transaction's span is made of: when it began and
// the task batches that took part (each batch's counts and traceTally).
// Task batches join it from the goroutines processing them, hence mu.
type txnTrace struct {
	start time.Time

	mu      sync.Mutex
	batches []*batchState
}

// traceTally is what a task batch collects for the transaction span: its
// records and their trace contexts (aliasing the records, which outlive
// the transaction). Only the batch's goroutine touches it.
type traceTally struct {
	records  int
	contexts []inputformat.TraceContext
}

// note keeps an input record's trace context tc (zero: none).
func (t *traceTally) note(tc inputformat.TraceContext) {
	if !tc.IsZero() {
		t.contexts = append(t.contexts, tc)
	}
}

// beginSpan starts collecting transaction b's span, when tracing is on.
// The loop calls Begin before any task of the transaction is processed
// and after the previous transaction's records were, so workers read
// curTrace without a lock.
func (p *Processor) beginSpan(b *eos.Batch) {
	if p.tracer == nil {
		return
	}
	tt := &txnTrace{start: time.Now()}
	p.curTrace = tt
	b.OnCommitted(func() { p.endSpan(tt, false) })
	b.OnAbort(func() { p.endSpan(tt, true) })
}

// joinSpan makes bs, a new task batch, part of the open transaction's span;
// nothing when tracing is off.
func (p *Processor) joinSpan(bs *batchState) {
	tt := p.curTrace
	if p.tracer == nil || tt == nil {
		return
	}
	bs.trace = &traceTally{}
	tt.mu.Lock()
	tt.batches = append(tt.batches, bs)
	tt.mu.Unlock()
}

// traceRecord counts record r for the transaction span (tracing on), and
// notes a claim's trace context: the ingress put its request's (or its own
// span's) on it. An event's is noted by process, which finds it.
func (ts *taskState) traceRecord(b *eos.Batch, r *kgo.Record) {
	t := ts.batchOf(b).trace
	if t == nil {
		return
	}
	t.records++
	if ts.claims {
		t.note(inputformat.TraceFromHeaders(r.Headers))
	}
}

// endSpan makes the span of a transaction that ended: its hooks run after
// every task batch's, once the transaction committed or did not.
func (p *Processor) endSpan(tt *txnTrace, aborted bool) {
	tt.mu.Lock()
	batches := slices.Clone(tt.batches)
	tt.mu.Unlock()
	slices.SortFunc(batches, func(a, b *batchState) int {
		x, y := a.ts.task.ID, b.ts.task.ID
		return cmp.Or(cmp.Compare(x.Topic, y.Topic), cmp.Compare(x.Partition, y.Partition))
	})
	var outcomes [len(outcomeNames)]int64
	var records int
	var deadLetters int64
	var parent trace.SpanContext
	var links []trace.Link
	seen := map[string]bool{}
	parts := make([]string, 0, len(batches))
	for _, bs := range batches {
		parts = append(parts, bs.ts.task.ID.String())
		records += bs.trace.records
		for _, tc := range bs.trace.contexts {
			if seen[string(tc.Parent)] {
				continue
			}
			seen[string(tc.Parent)] = true
			sc := tc.SpanContext()
			if !parent.IsValid() {
				parent = sc
			}
			links = append(links, trace.Link{SpanContext: sc})
		}
		for _, e := range bs.counts.events {
			outcomes[e.key.outcome] += e.n
		}
		for _, n := range bs.counts.dlq {
			deadLetters += n
		}
	}
	attrs := []attribute.KeyValue{attribute.Int(AttrRecords, records), attribute.StringSlice(AttrPartitions, parts)}
	if !aborted {
		for o, n := range outcomes {
			if n > 0 {
				attrs = append(attrs, attribute.Int64(AttrOutcomePrefix+Outcome(o).String(), n))
			}
		}
		attrs = append(attrs, attribute.Int64(AttrDeadLetters, deadLetters))
	}
	ctx := context.Background()
	if parent.IsValid() {
		ctx = trace.ContextWithRemoteSpanContext(ctx, parent)
	}
	_, span := p.tracer.Start(ctx, SpanTransaction, trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithTimestamp(tt.start), trace.WithLinks(links...), trace.WithAttributes(attrs...))
	if aborted {
		span.SetStatus(codes.Error, "the transaction aborted: its records will be processed again")
	}
	span.End()
}
