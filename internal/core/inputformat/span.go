package inputformat

import (
	"encoding/hex"

	"go.opentelemetry.io/otel/trace"
)

// SpanContext is t as an OpenTelemetry remote span context: the parent or
// a link of a span projector makes (docs/contract.md#trace-context).
// Invalid when t is zero. A tracestate OpenTelemetry does not accept (its
// list-member rules are stricter than the printable ASCII kept here) is
// left out of the span context; the trace and parent ids are kept.
func (t TraceContext) SpanContext() trace.SpanContext {
	if t.Parent == nil {
		return trace.SpanContext{}
	}
	// t.Parent was validated (newTraceContext): the digits are lower-case
	// hex, so the decodes cannot fail.
	var cfg trace.SpanContextConfig
	_, _ = hex.Decode(cfg.TraceID[:], t.Parent[3:35])
	_, _ = hex.Decode(cfg.SpanID[:], t.Parent[36:52])
	var flags [1]byte
	_, _ = hex.Decode(flags[:], t.Parent[53:55])
	cfg.TraceFlags, cfg.Remote = trace.TraceFlags(flags[0]), true
	if t.State != nil {
		if ts, err := trace.ParseTraceState(string(t.State)); err == nil {
			cfg.TraceState = ts
		}
	}
	return trace.NewSpanContext(cfg)
}

// TraceOf is the W3C trace context (version 00) of span context sc: what
// a record or request carries on from a span projector made. Zero when sc
// is invalid. The slices are new.
func TraceOf(sc trace.SpanContext) TraceContext {
	if !sc.IsValid() {
		return TraceContext{}
	}
	tid, sid, flags := sc.TraceID(), sc.SpanID(), [1]byte{byte(sc.TraceFlags())}
	p := make([]byte, 0, 55)
	p = append(p, "00-"...)
	p = append(hex.AppendEncode(p, tid[:]), '-')
	p = append(hex.AppendEncode(p, sid[:]), '-')
	p = hex.AppendEncode(p, flags[:])
	t := TraceContext{Parent: p}
	if s := sc.TraceState().String(); s != "" {
		t.State = []byte(s)
	}
	return t
}
