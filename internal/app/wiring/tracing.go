package wiring

import (
	"context"
	"fmt"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/projector-dev/projector/internal/app/config"
	"github.com/projector-dev/projector/processor"
)

// tracingShutdownTimeout bounds the export of the spans still queued when
// the worker stops: a collector that is down never holds the exit longer.
const tracingShutdownTimeout = 5 * time.Second

// newTracing sets the TracerProvider the processor, the executor and the
// ingress make their spans with (docs/contract.md#trace-context):
// Options.TracerProvider (tests), else, with tracing.otlp.endpoint set in
// live mode, an SDK provider exporting over OTLP/HTTP through a batch span
// processor, which Run and Close shut down. Off, a.tracer stays nil and no
// part makes spans. A rebuild makes none: its transactions replay history.
//
// The batch processor never blocks a span's end: it queues up to 2048
// spans and drops the rest while the collector is slow or unreachable
// (the exporter retries a batch for up to a minute, off the transactions'
// path), so a collector can cost spans, never progress.
func (a *App) newTracing(cfg *config.Config, o Options) error {
	if o.TracerProvider != nil {
		a.tracer = o.TracerProvider
		return nil
	}
	if !cfg.Tracing.Enabled() || o.Mode != processor.Live {
		return nil
	}
	// New does not connect: a collector that is down at start is no error.
	exp, err := otlptracehttp.New(context.Background(), otlptracehttp.WithEndpointURL(cfg.Tracing.TracesURL()))
	if err != nil {
		return &config.Error{Key: "tracing.otlp.endpoint", Msg: fmt.Sprintf("the OTLP exporter: %v", err)}
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(
		attribute.String("service.name", cfg.Tracing.ServiceName),
		attribute.String("service.instance.id", cfg.Kafka.InstanceID)))
	if err != nil {
		return fmt.Errorf("tracing: resource: %w", err)
	}
	// The SDK reports failed exports through its global handler (the
	// standard logger by default): to the worker's log instead.
	log := a.Logger
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { log.Warn("tracing: spans not exported", "err", err) }))
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	a.tracing, a.tracer = tp, tp
	a.Logger.Info("tracing: exporting spans over OTLP/HTTP", "url", cfg.Tracing.TracesURL(), "serviceName", cfg.Tracing.ServiceName)
	return nil
}

// stopTracing flushes and stops the provider newTracing built, once,
// within tracingShutdownTimeout; the spans it could not export by then are
// dropped (logged).
func (a *App) stopTracing() {
	tp := a.tracing
	if tp == nil {
		return
	}
	a.tracing = nil
	ctx, cancel := context.WithTimeout(context.Background(), tracingShutdownTimeout)
	defer cancel()
	if err := tp.Shutdown(ctx); err != nil {
		a.Logger.Warn("tracing: spans not exported at shutdown", "err", err)
	}
}
