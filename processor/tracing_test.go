package processor

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/projector-dev/projector/internal/core/eos"
	"github.com/projector-dev/projector/internal/core/state"
)

// TestTransactionSpan: one span per transaction, made when it commits: its
// parent is the first traced record's context, its links are the distinct
// contexts of its records (a duplicate's repeated context is linked once),
// and it counts the records, their outcomes and the dead letters exactly.
// Without a TracerProvider the task batch collects nothing.
func TestTransactionSpan(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	provider := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	st, err := state.Open(t.TempDir(), storeOptions(0))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	p, task, h := directTaskWith(t, st, func(c *Config) { c.TracerProvider = provider })
	const (
		tpA = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
		tpB = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
		tpC = "00-11111111111111111111111111111111-2222222222222222-00"
	)
	ev := func(v int, typ string, hs ...string) *kgo.Record {
		r := &kgo.Record{Key: []byte("CASE-1"), Offset: int64(v), Value: fmt.Appendf(nil,
			`{"eventId":"e-%d","eventType":%q,"aggregateId":"CASE-1","aggregateType":"RegulatoryCase","aggregateVersion":%d}`, v, typ, v)}
		for i := 0; i+1 < len(hs); i += 2 {
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: hs[i], Value: []byte(hs[i+1])})
		}
		return r
	}
	invalid := &kgo.Record{Key: []byte("x"), Offset: 9, Value: []byte(`not json`),
		Headers: []kgo.RecordHeader{{Key: "traceparent", Value: []byte(tpC)}}}
	recs := []*kgo.Record{
		ev(1, "CaseOpened", "traceparent", tpA),
		ev(2, "CaseUpdated", "traceparent", tpB, "tracestate", "k=v"),
		ev(1, "CaseOpened", "traceparent", tpA), // a duplicate, same context
		ev(3, "CaseUpdated"),                    // no context
		invalid,
	}
	bt := eos.NewTaskBatch(st, task, time.Now(), func(*kgo.Record) {})
	p.beginSpan(bt)
	for _, r := range recs {
		if err := h.Process(bt, r); err != nil {
			t.Fatal(err)
		}
	}
	if err := bt.Commit(h, ChangelogTopic(p.cfg.Group, "case-events")); err != nil {
		t.Fatal(err)
	}
	spans := exp.GetSpans()
	if len(spans) != 1 {
		t.Fatalf("%d spans, want 1", len(spans))
	}
	s := spans[0]
	if s.Name != SpanTransaction || s.SpanKind != trace.SpanKindConsumer {
		t.Errorf("span %q kind %v, want %q consumer", s.Name, s.SpanKind, SpanTransaction)
	}
	var links []string
	for _, l := range s.Links {
		links = append(links, "00-"+l.SpanContext.TraceID().String()+"-"+l.SpanContext.SpanID().String()+"-"+l.SpanContext.TraceFlags().String())
	}
	if fmt.Sprint(links) != fmt.Sprint([]string{tpA, tpB, tpC}) {
		t.Errorf("links %v, want %v", links, []string{tpA, tpB, tpC})
	}
	if len(s.Links) == 3 && s.Links[1].SpanContext.TraceState().String() != "k=v" {
		t.Errorf("link to B: tracestate %q, want k=v", s.Links[1].SpanContext.TraceState())
	}
	if got := "00-" + s.Parent.TraceID().String() + "-" + s.Parent.SpanID().String() + "-01"; got != tpA || !s.Parent.IsRemote() ||
		s.SpanContext.TraceID() != s.Parent.TraceID() {
		t.Errorf("parent %s (remote %v), trace %s; want %s, remote, its trace", got, s.Parent.IsRemote(), s.SpanContext.TraceID(), tpA)
	}
	want := map[string]attribute.Value{
		AttrRecords: attribute.IntValue(5), AttrOutcomePrefix + "applied": attribute.Int64Value(3),
		AttrOutcomePrefix + "duplicate": attribute.Int64Value(1), AttrOutcomePrefix + "invalid": attribute.Int64Value(1),
		AttrDeadLetters: attribute.Int64Value(1), AttrPartitions: attribute.StringSliceValue([]string{"case-events/0"}),
	}
	got := map[string]attribute.Value{}
	for _, kv := range s.Attributes {
		got[string(kv.Key)] = kv.Value
	}
	if len(got) != len(want) {
		t.Errorf("attributes %v, want %v", got, want)
	}
	for k, w := range want {
		if got[k] != w && got[k].Emit() != w.Emit() {
			t.Errorf("attribute %s = %s, want %s", k, got[k].Emit(), w.Emit())
		}
	}

	// An aborted transaction: its span says so, with its records and
	// without the outcomes that did not take effect.
	exp.Reset()
	bt = eos.NewTaskBatch(st, task, time.Now(), func(*kgo.Record) {})
	p.beginSpan(bt)
	if err := h.Process(bt, ev(4, "CaseUpdated", "traceparent", tpB)); err != nil {
		t.Fatal(err)
	}
	bt.Abort()
	if spans = exp.GetSpans(); len(spans) != 1 {
		t.Fatalf("aborted: %d spans, want 1", len(spans))
	}
	s = spans[0]
	if s.Status.Code != codes.Error || len(s.Attributes) != 2 || s.Attributes[0] != attribute.Int(AttrRecords, 1) ||
		s.Parent.SpanID().String() != "00f067aa0ba902b7" {
		t.Errorf("aborted: status %v, attributes %v, parent %s; want error, %s=1 and the partitions alone, parent B", s.Status, s.Attributes, s.Parent.SpanID(), AttrRecords)
	}

	// Off: no tally, no span.
	p2, task2, h2 := directTaskWith(t, st, func(*Config) {})
	bt2 := eos.NewTaskBatch(st, task2, time.Now(), func(*kgo.Record) {})
	p2.beginSpan(bt2)
	if err := h2.Process(bt2, ev(4, "CaseUpdated", "traceparent", tpA)); err != nil {
		t.Fatal(err)
	}
	if h2.openState.trace != nil || p2.curTrace != nil {
		t.Errorf("tracing off: the batch collects %+v, the processor %+v", h2.openState.trace, p2.curTrace)
	}
}

// BenchmarkProcessEventSpans is BenchmarkProcessEventTraced with tracing
// on: a TracerProvider whose spans go to an in-memory exporter (reset
// every 100 transactions), one span per 5000-event transaction.
func BenchmarkProcessEventSpans(b *testing.B) {
	exp := tracetest.NewInMemoryExporter()
	provider := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	n := 0
	provider.RegisterSpanProcessor(resetter{func() {
		if n++; n%100 == 0 {
			exp.Reset()
		}
	}})
	benchProcessEvent(b, benchTraceHeaders, provider)
}

// resetter is a span processor that calls fn at each span's end.
type resetter struct{ fn func() }

func (r resetter) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (r resetter) OnEnd(sdktrace.ReadOnlySpan)                     { r.fn() }
func (r resetter) Shutdown(context.Context) error                  { return nil }
func (r resetter) ForceFlush(context.Context) error                { return nil }
