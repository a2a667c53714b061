package ingress

import (
	"net/http"
	"net/http/httptest"
	"reflect"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// TestRequestSpan: with a tracer, each request is a server span, child of
// the request's valid trace context (a root span without one), naming the
// route (never the key) and the status (an error for a 5xx), and the claim
// carries the span's context with the request's tracestate.
func TestRequestSpan(t *testing.T) {
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	exp := tracetest.NewInMemoryExporter()
	s := &Server{tracer: sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp)).Tracer("test")}
	var claim []kgo.RecordHeader
	status := http.StatusServiceUnavailable
	h := s.traced(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == "POST" {
			claim = s.traceOf(r)
		}
		w.WriteHeader(status)
	}))
	r := httptest.NewRequest("POST", "/v1/events", nil)
	r.Header.Set("traceparent", tp)
	r.Header.Set("tracestate", "a=1")
	h.ServeHTTP(httptest.NewRecorder(), r)
	status = http.StatusOK
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/v1/receipts/secret-key", nil))

	spans := exp.GetSpans()
	if len(spans) != 2 {
		t.Fatalf("%d spans, want 2", len(spans))
	}
	post, get := spans[0], spans[1]
	if post.Name != SpanIngress || post.SpanKind != trace.SpanKindServer || post.Parent.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" ||
		post.Parent.SpanID().String() != "00f067aa0ba902b7" || post.SpanContext.TraceID() != post.Parent.TraceID() {
		t.Errorf("POST span %q kind %v parent %s/%s trace %s; want %q, server, child of the request's", post.Name, post.SpanKind,
			post.Parent.TraceID(), post.Parent.SpanID(), post.SpanContext.TraceID(), SpanIngress)
	}
	wantAttrs := []attribute.KeyValue{attribute.String(AttrMethod, "POST"), attribute.String(AttrRoute, "/v1/events"), attribute.Int(AttrStatusCode, 503)}
	if !reflect.DeepEqual(post.Attributes, wantAttrs) || post.Status.Code != otelcodes.Error {
		t.Errorf("POST span: attributes %v, status %v; want %v, error", post.Attributes, post.Status, wantAttrs)
	}
	want := []kgo.RecordHeader{{Key: "traceparent", Value: []byte("00-4bf92f3577b34da6a3ce929d0e0e4736-" + post.SpanContext.SpanID().String() + "-01")},
		{Key: "tracestate", Value: []byte("a=1")}}
	if !reflect.DeepEqual(claim, want) {
		t.Errorf("claim headers %q, want the span's context %q", claim, want)
	}
	wantAttrs = []attribute.KeyValue{attribute.String(AttrMethod, "GET"), attribute.String(AttrRoute, "/v1/receipts/{key}"), attribute.Int(AttrStatusCode, 200)}
	if get.Parent.IsValid() || !reflect.DeepEqual(get.Attributes, wantAttrs) || get.Status.Code != otelcodes.Unset {
		t.Errorf("GET span: parent %v, attributes %v, status %v; want a root span, %v, unset", get.Parent, get.Attributes, get.Status, wantAttrs)
	}
}
