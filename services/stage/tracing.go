package stage

import (
	"context"
	"fmt"
	"os"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	sdkresource "go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/podflow/podflow/bus"
)

// Tracing exports an OpenTelemetry span per handled event over OTLP/HTTP.
// It is off unless an endpoint is configured: the standard
// OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT
// environment variables. Each span's parent is the traceparent the event
// carries, so a pod's spans across stages form one trace.
type Tracing struct {
	tp     *sdktrace.TracerProvider
	tracer trace.Tracer
}

// TracingFromEnv returns tracing for stage when an OTLP endpoint is
// configured in the environment, or nil.
func TracingFromEnv(ctx context.Context, stage, replica string) (*Tracing, error) {
	if os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
		return nil, nil
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("stage: OTLP exporter: %w", err)
	}
	return NewTracing(sdktrace.NewBatchSpanProcessor(exp), stage, replica), nil
}

// NewTracing returns tracing that hands spans to sp (an OTLP exporter's
// batch processor, or a recorder in tests).
func NewTracing(sp sdktrace.SpanProcessor, stage, replica string) *Tracing {
	res := sdkresource.NewSchemaless(
		attribute.String("service.name", "podflow-"+stage),
		attribute.String("service.instance.id", replica),
	)
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sp), sdktrace.WithResource(res))
	return &Tracing{tp: tp, tracer: tp.Tracer("github.com/podflow/podflow/services/stage")}
}

// Shutdown flushes and stops the exporter.
func (t *Tracing) Shutdown(ctx context.Context) error { return t.tp.Shutdown(ctx) }

var propagator = propagation.TraceContext{}

// wrap returns h with a span around each handling, child of the event's
// traceparent.
func (t *Tracing) wrap(stageName string, h bus.Handler) bus.Handler {
	return func(ctx context.Context, d *bus.Delivery) error {
		env := d.Envelope
		ctx = propagator.Extract(ctx, propagation.MapCarrier{"traceparent": env.GetTraceparent()})
		ctx, span := t.tracer.Start(ctx, stageName+" "+string(env.Type()), trace.WithSpanKind(trace.SpanKindConsumer),
			trace.WithAttributes(
				attribute.String("podflow.stage", stageName),
				attribute.String("podflow.event.id", env.GetId()),
				attribute.String("podflow.event.type", string(env.Type())),
				attribute.String("k8s.namespace.name", env.GetNamespace()),
				attribute.String("k8s.pod.name", env.GetPodName()),
				attribute.String("k8s.pod.uid", env.GetPodUid()),
				attribute.Int64("messaging.message.delivery_count", int64(d.NumDelivered)),
			))
		defer span.End()
		err := h(ctx, d)
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, bus.CodeOf(err))
		}
		return err
	}
}
