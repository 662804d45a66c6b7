package stage

import (
	"context"
	"errors"
	"testing"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/proto/eventsv1"
)

// Each handling is a span whose parent is the event's traceparent, so the
// stages' spans of one pod form one trace; a failed handling is an error
// span carrying the bus error code.
func TestTracingSpansFollowTheTraceparent(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tr := NewTracing(rec, "admission", "admission-1")
	defer tr.Shutdown(context.Background())

	const traceID, parentID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	env, err := bus.NewEnvelope(&eventsv1.PodAuthorized{})
	if err != nil {
		t.Fatal(err)
	}
	env.Traceparent = "00-" + traceID + "-" + parentID + "-01"
	env.Namespace, env.PodName, env.Id = "default", "web", "req/r1/PodAuthorized/g0/a1"
	d := &bus.Delivery{Envelope: env, NumDelivered: 2, Stage: "admission"}

	ok := tr.wrap("admission", func(context.Context, *bus.Delivery) error { return nil })
	bad := tr.wrap("admission", func(context.Context, *bus.Delivery) error { return bus.Permanent(errors.New("nope")) })
	if err := ok(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	if err := bad(context.Background(), d); err == nil {
		t.Fatal("the wrapped handler's error was lost")
	}
	spans := rec.Ended()
	if len(spans) != 2 {
		t.Fatalf("%d spans, want 2", len(spans))
	}
	for _, s := range spans {
		if s.SpanContext().TraceID().String() != traceID || s.Parent().SpanID().String() != parentID {
			t.Errorf("span %q trace %s parent %s, want %s/%s", s.Name(), s.SpanContext().TraceID(), s.Parent().SpanID(), traceID, parentID)
		}
		if s.Name() != "admission PodAuthorized" {
			t.Errorf("span name %q", s.Name())
		}
	}
	if spans[0].Status().Code == codes.Error || spans[1].Status().Code != codes.Error || spans[1].Status().Description != bus.CodePermanent {
		t.Errorf("statuses %v, %v", spans[0].Status(), spans[1].Status())
	}
}

var _ sdktrace.SpanProcessor = tracetest.NewSpanRecorder()
