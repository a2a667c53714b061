package sideeffects

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/projector-dev/projector/sideeffects/effect"
	"github.com/projector-dev/projector/sideeffects/sideeffectstest"
)

// TestCallSpans: with a TracerProvider, each call of a key is a client
// span, child of the intent's trace context, with the call's attributes
// (an error status for a retryable answer), and the caller is given the
// span's context (with the intent's tracestate) to carry.
func TestCallSpans(t *testing.T) {
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	exp := tracetest.NewInMemoryExporter()
	store := sideeffectstest.NewMemStore()
	var mu sync.Mutex
	var sent []string
	caller := callerFunc(func(_ context.Context, in effect.Intent, _ []byte) effect.Result {
		mu.Lock()
		n := len(sent)
		sent = append(sent, in.TraceParent+" "+in.TraceState)
		mu.Unlock()
		if n == 0 {
			return effect.Result{Outcome: effect.OutcomeRetryable, StatusCode: 503, Err: errors.New("sideeffects: webhook: 503 Service Unavailable")}
		}
		return effect.Result{Outcome: effect.OutcomeSucceeded, StatusCode: 200}
	})
	r, err := NewRunner(RunnerConfig{Store: store, Effects: map[string]Effect{"fx": {Caller: caller, Timeout: 5 * time.Second}},
		Backoff: quickBackoff, StartAllowance: testAllowance, TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))})
	if err != nil {
		t.Fatal(err)
	}
	stop := runRunner(t, r)
	in := sideeffectstest.Intent(t, "k", "fx", "p")
	in.TraceParent, in.TraceState = tp, "a=1"
	if err := store.Update(func(l *effect.Ledger) error { _, _, err := l.Offer(in, time.Now()); return err }); err != nil {
		t.Fatal(err)
	}
	r.Enqueue("k")
	waitStatus(t, store, "k", effect.Succeeded)
	stop()
	spans := exp.GetSpans()
	if len(spans) != 2 || len(sent) != 2 {
		t.Fatalf("%d spans, %d calls; want 2 and 2", len(spans), len(sent))
	}
	for i, s := range spans {
		if s.Name != SpanWebhook || s.SpanKind != trace.SpanKindClient || s.Parent.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" ||
			s.Parent.SpanID().String() != "00f067aa0ba902b7" || s.SpanContext.TraceID() != s.Parent.TraceID() {
			t.Errorf("call %d: span %q kind %v parent %s/%s; want %q, client, child of the intent's", i+1, s.Name, s.SpanKind,
				s.Parent.TraceID(), s.Parent.SpanID(), SpanWebhook)
		}
		code, outcome, status := int64(503), "retryable", codes.Error
		if i == 1 {
			code, outcome, status = 200, "succeeded", codes.Unset
		}
		want := map[attribute.Key]attribute.Value{AttrEffect: attribute.StringValue("fx"), AttrKey: attribute.StringValue("k"),
			AttrAttempt: attribute.IntValue(i + 1), AttrStatusCode: attribute.Int64Value(code), AttrOutcome: attribute.StringValue(outcome)}
		for _, kv := range s.Attributes {
			if w, ok := want[kv.Key]; !ok || w.Emit() != kv.Value.Emit() {
				t.Errorf("call %d: attribute %s = %s, want %s", i+1, kv.Key, kv.Value.Emit(), w.Emit())
			}
			delete(want, kv.Key)
		}
		if len(want) > 0 || s.Status.Code != status {
			t.Errorf("call %d: attributes missing %v, status %v; want %v", i+1, want, s.Status, status)
		}
		if w := "00-4bf92f3577b34da6a3ce929d0e0e4736-" + s.SpanContext.SpanID().String() + "-01 a=1"; sent[i] != w {
			t.Errorf("call %d: the caller got %q, want the span's context %q", i+1, sent[i], w)
		}
	}
}
