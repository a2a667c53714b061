package sideeffects

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/projector-dev/projector/internal/core/inputformat"
	"github.com/projector-dev/projector/sideeffects/effect"
)

// The call span (docs/contract.md#trace-context): with
// RunnerConfig.TracerProvider set, every call of an effect is a client
// span, child of the trace context the intent carried (kept in the key's
// ledger entry), and the call carries the span's own context on (the
// webhook request's traceparent), as an instrumented HTTP client does: the
// receiver's spans become its children, in the same trace. Without a
// TracerProvider the call carries the intent's context unchanged.

// SpanWebhook is the name of the call span.
const SpanWebhook = "projector.webhook"

// Attributes of the call span (with http.response.status_code when an
// answer came).
const (
	AttrEffect  = "projector.effect"         // the effect's name
	AttrKey     = "projector.effect.key"     // the idempotency key
	AttrAttempt = "projector.effect.attempt" // the attempt's number, from 1
	AttrOutcome = "projector.effect.outcome" // succeeded, retryable, failed or unknown
	// AttrStatusCode is the OpenTelemetry semantic convention's name.
	AttrStatusCode = "http.response.status_code"
)

// tracerName is the instrumentation scope of the executor's spans.
const tracerName = "github.com/projector-dev/projector/sideeffects"

// tracedCall is call with a span: the span's context replaces the intent's
// as the one the call carries.
func (r *Runner) tracedCall(ctx context.Context, eff Effect, e effect.Entry, in effect.Intent) effect.Result {
	// The ledger kept the context validated; parsed again, as it is cheap
	// and an entry is only as good as the topic it was read from.
	parent := inputformat.ParseTrace([]byte(in.TraceParent), []byte(in.TraceState)).SpanContext()
	if parent.IsValid() {
		ctx = trace.ContextWithRemoteSpanContext(ctx, parent)
	}
	ctx, span := r.tracer.Start(ctx, SpanWebhook, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(
		attribute.String(AttrEffect, e.Effect), attribute.String(AttrKey, e.Key), attribute.Int(AttrAttempt, e.Attempts)))
	defer span.End()
	tc := inputformat.TraceOf(span.SpanContext())
	in.TraceParent, in.TraceState = string(tc.Parent), string(tc.State)
	res := eff.Caller.Call(ctx, in, e.Intent)
	if res.StatusCode != 0 {
		span.SetAttributes(attribute.Int(AttrStatusCode, res.StatusCode))
	}
	span.SetAttributes(attribute.String(AttrOutcome, res.Outcome.String()))
	if res.Outcome != effect.OutcomeSucceeded {
		msg := res.Outcome.String()
		if res.Err != nil {
			msg = res.Err.Error()
		}
		span.SetStatus(codes.Error, msg)
	}
	return res
}
