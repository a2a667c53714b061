package wiring_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/projector-dev/projector/internal/app/ingress"
	"github.com/projector-dev/projector/internal/app/wiring"
	"github.com/projector-dev/projector/internal/harness/testkit"
	"github.com/projector-dev/projector/processor"
	"github.com/projector-dev/projector/sideeffects"
)

// TestSpansEndToEnd: with a TracerProvider (the SDK's, over an in-memory
// exporter) the worker makes the spans of docs/contract.md#trace-context
// and chains them to the input's trace context, through the worker on the
// embedded broker.
//
// Records straight on an input topic (a new event, its duplicate, the same
// id with another payload: three traces): the transaction spans link to
// the three contexts, the first traced record's context is the parent, and
// their counts add up to 3 records, 1 applied, 1 duplicate, 1 conflict, 1
// dead letter. The webhook span is a child of the event's context and the
// webhook request carries the webhook span's context.
//
// A request with a traceparent into the ingress: the ingress span is its
// child; the record the ingress's claim becomes, its projection record and
// its intent carry the ingress span's context; the claim's and the event's
// transaction spans and the webhook span are its children; the webhook
// request carries the webhook span's context: one trace id throughout.
func TestSpansEndToEnd(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	provider := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = provider.Shutdown(context.Background()) })
	hook := newTraceReceiver(t)
	a, brokers := startTraceWorkerWith(t, hook.URL, wiring.Options{TracerProvider: provider})
	ctx := context.Background()

	rec := func(payload int, parent string) *kgo.Record {
		return &kgo.Record{Topic: "tr.events", Key: []byte("direct"), Value: fmt.Appendf(nil,
			`{"eventId":"direct-1","eventType":"OrderPlaced","aggregateId":"direct","aggregateVersion":1,"payload":{"n":%d}}`, payload),
			Headers: []kgo.RecordHeader{{Key: "traceparent", Value: []byte(parent)}}}
	}
	if err := testkit.ProduceRecords(ctx, brokers, 1<<20, rec(1, tp(8)), rec(1, tp(9)), rec(2, tp(10))); err != nil {
		t.Fatal(err)
	}
	direct := map[string]bool{traceID(8): true, traceID(9): true, traceID(10): true}
	var txns []tracetest.SpanStub
	testkit.Await(t, 2*time.Minute, "transaction spans covering the 3 direct records", func() bool {
		txns = spansWhere(exp, func(s tracetest.SpanStub) bool {
			return s.Name == processor.SpanTransaction && len(s.Links) > 0 && direct[s.Links[0].SpanContext.TraceID().String()]
		})
		return sumInt(txns, processor.AttrRecords) == 3
	})
	linked := map[string]bool{}
	for _, s := range txns {
		checkTxnParent(t, s)
		for _, l := range s.Links {
			linked[l.SpanContext.TraceID().String()+"-"+l.SpanContext.SpanID().String()] = true
		}
	}
	for _, n := range []int{8, 9, 10} {
		if !linked[traceID(n)+"-"+inputSpanID] {
			t.Errorf("no transaction span links to the context of trace %s; links %v", traceID(n), linked)
		}
	}
	for attr, want := range map[string]int64{"projector.outcome.applied": 1, "projector.outcome.duplicate": 1,
		"projector.outcome.conflict": 1, processor.AttrDeadLetters: 1} {
		if got := sumInt(txns, attr); got != want {
			t.Errorf("transaction spans of the direct records: %s %d, want %d", attr, got, want)
		}
	}
	w := awaitWebhookSpan(t, exp, "n:direct:v1")
	checkWebhookSpan(t, w, hook, "n:direct:v1", traceID(8), inputSpanID, "")

	// Through the ingress.
	postTraced(t, "http://"+a.Ingress.Addr().String(), "ing", tp(11), "ing=1")
	ins := spansWhere(exp, func(s tracetest.SpanStub) bool { return s.Name == ingress.SpanIngress })
	if len(ins) != 1 {
		t.Fatalf("%d ingress spans, want 1", len(ins))
	}
	in := ins[0]
	if in.Parent.TraceID().String() != traceID(11) || in.Parent.SpanID().String() != inputSpanID || !in.Parent.IsRemote() ||
		in.SpanContext.TraceID().String() != traceID(11) || in.SpanKind != trace.SpanKindServer {
		t.Errorf("ingress span: parent %s/%s (remote %v), trace %s, kind %v; want the request's %s/%s, server",
			in.Parent.TraceID(), in.Parent.SpanID(), in.Parent.IsRemote(), in.SpanContext.TraceID(), in.SpanKind, traceID(11), inputSpanID)
	}
	checkAttrs(t, "ingress span", in.Attributes, map[string]any{ingress.AttrMethod: "POST", ingress.AttrRoute: "/v1/events", ingress.AttrStatusCode: int64(201)})
	inID := in.SpanContext.SpanID().String()
	viaIngress := traced{"00-" + traceID(11) + "-" + inID + "-01", "ing=1"}
	var children []tracetest.SpanStub
	testkit.Await(t, 2*time.Minute, "the claim's and the event's transaction spans", func() bool {
		children = spansWhere(exp, func(s tracetest.SpanStub) bool {
			return s.Name == processor.SpanTransaction && s.Parent.SpanID().String() == inID
		})
		return len(children) == 2
	})
	applied := 0
	for _, s := range children {
		checkTxnParent(t, s)
		if s.SpanContext.TraceID().String() != traceID(11) || len(s.Links) != 1 || s.Links[0].SpanContext.SpanID().String() != inID {
			t.Errorf("transaction span %s: trace %s, links %v; want trace %s, one link to the ingress span", s.SpanContext.SpanID(), s.SpanContext.TraceID(), s.Links, traceID(11))
		}
		if attrOf(s.Attributes, "projector.outcome.applied").AsInt64() == 1 { // the event's; the claim's has no outcome
			applied++
			checkAttrs(t, "the event's transaction span", s.Attributes, map[string]any{processor.AttrRecords: int64(1), processor.AttrDeadLetters: int64(0)})
		} else {
			checkAttrs(t, "the claim's transaction span", s.Attributes, map[string]any{processor.AttrRecords: int64(1), processor.AttrDeadLetters: int64(0)})
		}
	}
	if applied != 1 {
		t.Errorf("%d transaction spans under the ingress span applied the event, want 1", applied)
	}
	w = awaitWebhookSpan(t, exp, "n:ing:v1")
	checkWebhookSpan(t, w, hook, "n:ing:v1", traceID(11), inID, "ing=1")
	checkOutputsOf(t, brokers, "ing", viaIngress)
}

// inputSpanID is the parent id of every tp(n).
const inputSpanID = "00f067aa0ba902b7"

// traceID is the trace id of tp(n).
func traceID(n int) string { return strings.Split(tp(n), "-")[1] }

func spansWhere(exp *tracetest.InMemoryExporter, ok func(tracetest.SpanStub) bool) []tracetest.SpanStub {
	var out []tracetest.SpanStub
	for _, s := range exp.GetSpans() {
		if ok(s) {
			out = append(out, s)
		}
	}
	return out
}

func attrOf(kvs []attribute.KeyValue, key string) attribute.Value {
	for _, kv := range kvs {
		if string(kv.Key) == key {
			return kv.Value
		}
	}
	return attribute.Value{}
}

func sumInt(spans []tracetest.SpanStub, key string) int64 {
	var n int64
	for _, s := range spans {
		n += attrOf(s.Attributes, key).AsInt64()
	}
	return n
}

// checkAttrs checks attributes by their value as a string or an int64.
func checkAttrs(t *testing.T, what string, kvs []attribute.KeyValue, want map[string]any) {
	t.Helper()
	for k, w := range want {
		v := attrOf(kvs, k)
		var got any = v.AsString()
		if _, ok := w.(int64); ok {
			got = v.AsInt64()
		}
		if v.Type() == attribute.INVALID || got != w {
			t.Errorf("%s: attribute %s = %v, want %v", what, k, v.Emit(), w)
		}
	}
}

// checkTxnParent: a transaction span is a consumer span whose parent is
// its first link, the input's remote context.
func checkTxnParent(t *testing.T, s tracetest.SpanStub) {
	t.Helper()
	if s.SpanKind != trace.SpanKindConsumer || len(s.Links) == 0 || !s.Parent.Equal(s.Links[0].SpanContext) || !s.Parent.IsRemote() {
		t.Errorf("transaction span %s: kind %v, parent %s/%s, links %v; want a consumer span whose parent is its first link",
			s.SpanContext.SpanID(), s.SpanKind, s.Parent.TraceID(), s.Parent.SpanID(), s.Links)
	}
	if s.Status.Code != codes.Unset {
		t.Errorf("transaction span %s: status %v, want unset (committed)", s.SpanContext.SpanID(), s.Status)
	}
}

func awaitWebhookSpan(t *testing.T, exp *tracetest.InMemoryExporter, key string) tracetest.SpanStub {
	t.Helper()
	var got []tracetest.SpanStub
	testkit.Await(t, 2*time.Minute, "the webhook span of "+key, func() bool {
		got = spansWhere(exp, func(s tracetest.SpanStub) bool {
			return s.Name == sideeffects.SpanWebhook && attrOf(s.Attributes, sideeffects.AttrKey).AsString() == key
		})
		return len(got) > 0
	})
	if len(got) != 1 {
		t.Errorf("%d webhook spans of %s, want 1", len(got), key)
	}
	return got[0]
}

// checkWebhookSpan: the webhook span of key is a client span, child of the
// intent's context (trace, parent), with the call's attributes, and the
// request carried its context (and the intent's tracestate).
func checkWebhookSpan(t *testing.T, w tracetest.SpanStub, hook *traceReceiver, key, trace_, parent, state string) {
	t.Helper()
	if w.SpanKind != trace.SpanKindClient || w.Parent.TraceID().String() != trace_ || w.Parent.SpanID().String() != parent ||
		w.SpanContext.TraceID().String() != trace_ {
		t.Errorf("webhook span %s: kind %v, parent %s/%s, trace %s; want client, parent %s/%s",
			key, w.SpanKind, w.Parent.TraceID(), w.Parent.SpanID(), w.SpanContext.TraceID(), trace_, parent)
	}
	checkAttrs(t, "webhook span "+key, w.Attributes, map[string]any{sideeffects.AttrEffect: "notify", sideeffects.AttrKey: key,
		sideeffects.AttrAttempt: int64(1), sideeffects.AttrStatusCode: int64(200), sideeffects.AttrOutcome: "succeeded"})
	want := traced{"00-" + trace_ + "-" + w.SpanContext.SpanID().String() + "-01", state}
	if got := hook.call(key); got != want {
		t.Errorf("webhook request %s: traceparent %q, tracestate %q; want the webhook span's %q, %q", key, got.parent, got.state, want.parent, want.state)
	}
}

// checkOutputsOf: the record the ingress's claim became on the input
// topic, the projection record and the intent of aggregate agg carry want.
func checkOutputsOf(t *testing.T, brokers []string, agg string, want traced) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, c := range []struct{ topic, key string }{{"tr.events", agg}, {"tr.orders.v1", agg}, {"tr.effects", "n:" + agg + ":v1"}} {
		recs, err := testkit.ReadAll(ctx, brokers, c.topic)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, r := range recs {
			if string(r.Key) == c.key && json.Valid(r.Value) {
				n++
				checkTrace(t, c.topic+" record "+c.key, r.Headers, want)
			}
		}
		if n != 1 {
			t.Errorf("%s: %d records of %s, want 1", c.topic, n, c.key)
		}
	}
}

// TestSpansCollectorDown: with tracing.otlp.endpoint set to a collector
// that accepts the export and never answers, events flow as without
// tracing: the batch span processor queues the spans and its exporter
// waits off the transactions' path. Once an export is stuck at the
// collector, further events are processed, called and traced within a few
// seconds, less than the exporter's 10 s timeout that an export on the
// transactions' path (a synchronous span processor) would cost each
// transaction and call. The worker's exit waits for the collector at most
// tracingShutdownTimeout (the cleanup's Close).
func TestSpansCollectorDown(t *testing.T) {
	t.Parallel() // mostly waits: exports hang on a collector that never answers
	var exports atomic.Int32
	release := make(chan struct{})
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		exports.Add(1)
		<-release // hang, until the test ends
	}))
	t.Cleanup(func() { close(release); collector.Close() }) // after the worker's cleanup
	hook := newTraceReceiver(t)
	b, brokers := testkit.Broker(t, 1, traceTopics...)
	src := fmt.Sprintf(traceConfig, b.Addr(), filepath.Join(t.TempDir(), "state"), anyPort, hook.URL) +
		fmt.Sprintf("tracing: {otlp: {endpoint: %q}}\n", collector.URL)
	a := runWorker(t, src)
	testkit.Await(t, time.Minute, "the worker to be ready", func() bool { ok, _ := a.Ready(); return ok })
	produce := func(i int) {
		r := &kgo.Record{Topic: "tr.events", Key: []byte("down"), Value: fmt.Appendf(nil,
			`{"eventId":"down-%d","eventType":"OrderPlaced","aggregateId":"down","aggregateVersion":%d}`, i, i),
			Headers: []kgo.RecordHeader{{Key: "traceparent", Value: []byte(tp(20 + i))}}}
		if err := testkit.ProduceRecords(context.Background(), brokers, 1<<20, r); err != nil {
			t.Fatal(err)
		}
	}
	produce(1)
	testkit.Await(t, time.Minute, "the first event's call", func() bool { return hook.count() == 1 })
	// The batch processor exports within its 5 s schedule: then an export hangs.
	testkit.Await(t, 30*time.Second, "an export at the collector", func() bool { return exports.Load() > 0 })
	const n = 4
	for i := 2; i <= n; i++ {
		produce(i)
	}
	testkit.Await(t, 8*time.Second, "the other events' calls while the export hangs", func() bool { return hook.count() == n })
	for i := 1; i <= n; i++ {
		// Tracing is on: the call carries its span's context, not the event's.
		got := hook.call(fmt.Sprintf("n:down:v%d", i))
		if !strings.HasPrefix(got.parent, "00-"+traceID(20+i)+"-") || strings.Contains(got.parent, inputSpanID) {
			t.Errorf("call %d: traceparent %q, want the webhook span's, in trace %s", i, got.parent, traceID(20+i))
		}
	}
}
