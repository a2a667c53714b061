package ingress

import (
	"net/http"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// The request span (docs/contract.md#trace-context): with
// Config.TracerProvider set, every request is a server span, child of the
// request's own W3C trace context when it carries a valid one, and the
// claim a POST writes carries the span's context (traceOf), so the
// events' transaction and webhook spans chain to it.

// SpanIngress is the name of the request span.
const SpanIngress = "projector.ingress"

// Attributes of the request span: the OpenTelemetry HTTP semantic
// conventions' names.
const (
	AttrMethod     = "http.request.method"
	AttrRoute      = "http.route"
	AttrStatusCode = "http.response.status_code"
)

// tracerName is the instrumentation scope of the ingress's spans.
const tracerName = "github.com/projector-dev/projector/internal/app/ingress"

// traced makes a span of every request h answers; h itself when tracing
// is off.
func (s *Server) traced(h http.Handler) http.Handler {
	if s.tracer == nil {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		if tc := requestTrace(r); !tc.IsZero() {
			ctx = trace.ContextWithRemoteSpanContext(ctx, tc.SpanContext())
		}
		ctx, span := s.tracer.Start(ctx, SpanIngress, trace.WithSpanKind(trace.SpanKindServer),
			trace.WithAttributes(attribute.String(AttrMethod, r.Method), attribute.String(AttrRoute, routeOf(r.URL.Path))))
		defer span.End()
		sw := &statusWriter{ResponseWriter: w}
		h.ServeHTTP(sw, r.WithContext(ctx))
		if sw.code == 0 {
			sw.code = http.StatusOK
		}
		span.SetAttributes(attribute.Int(AttrStatusCode, sw.code))
		if sw.code >= 500 { // a server span's error: the server's fault, not the client's
			span.SetStatus(otelcodes.Error, http.StatusText(sw.code))
		}
	})
}

// routeOf is the route a path is served by ("" for none): a span names
// the route, never the key in a receipt's path.
func routeOf(path string) string {
	switch {
	case path == "/v1/events":
		return "/v1/events"
	case strings.HasPrefix(path, "/v1/receipts/"):
		return "/v1/receipts/{key}"
	}
	return ""
}
