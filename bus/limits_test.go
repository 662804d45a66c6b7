package bus_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/bus/bustest"
	"github.com/podflow/podflow/proto/corev1"
	eventsv1 "github.com/podflow/podflow/proto/eventsv1"
)

// TestStreamFullRefusesNew: PODFLOW_EVENTS at its MaxBytes refuses new
// events with ErrStreamFull (and counts the refusal) instead of evicting
// events no consumer has seen; every accepted event is still there.
func TestStreamFullRefusesNew(t *testing.T) {
	srv := bustest.Server(t)
	conn := bustest.Connect(t, srv, "pub")
	ctx, cancel := context.WithTimeout(context.Background(), bustest.Timeout)
	defer cancel()
	cfg := bus.DefaultStreamsConfig()
	cfg.EventsMaxBytes = 16 << 10
	if err := bus.Provision(ctx, conn.JetStream(), bus.Topology{Streams: bus.DefaultStreams(cfg)}); err != nil {
		t.Fatal(err)
	}
	before := bus.StreamFullRefusals()
	accepted := 0
	var err error
	for _, env := range podEvents(2000) {
		start := time.Now()
		if _, err = conn.Publish(ctx, env); err != nil {
			if d := time.Since(start); d > 2*time.Second {
				t.Errorf("refusal took %s", d)
			}
			break
		}
		accepted++
	}
	if !errors.Is(err, bus.ErrStreamFull) || errors.Is(err, bus.ErrStreamUnavailable) || !strings.Contains(err.Error(), "maximum bytes exceeded") {
		t.Fatalf("publish into a full stream: %v", err)
	}
	if accepted == 0 || bus.StreamFullRefusals() <= before {
		t.Fatalf("accepted %d, refusals %d -> %d", accepted, before, bus.StreamFullRefusals())
	}
	st, err := conn.JetStream().Stream(ctx, bus.EventsStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.FirstSeq != 1 || info.State.Msgs != uint64(accepted) {
		t.Fatalf("accepted events evicted: first %d, %d messages, %d accepted", info.State.FirstSeq, info.State.Msgs, accepted)
	}
	// The server goes on serving the other streams.
	if _, err := conn.JetStream().Publish(ctx, bus.DLQSubject("x"), []byte("dead")); err != nil {
		t.Fatalf("publish to the DLQ beside a full events stream: %v", err)
	}
}

// TestMessageTooLarge: a client publishing a message larger than the
// stream's MaxMsgSize onto the events stream is refused with a clear
// error; nothing is stored and the server goes on serving.
func TestMessageTooLarge(t *testing.T) {
	srv := bustest.Server(t)
	admin := bustest.Connect(t, srv, "admin")
	bustest.Provision(t, admin)
	ctx, cancel := context.WithTimeout(context.Background(), bustest.Timeout)
	defer cancel()
	js := admin.JetStream()
	subj := "podflow.pod.PodRequested.default.junk"
	_, err := js.PublishMsg(ctx, &nats.Msg{Subject: subj, Data: make([]byte, 4<<20)})
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) || apiErr.ErrorCode != jetstream.JSErrCodeStreamMessageExceedsMaximum {
		t.Fatalf("4 MiB PodRequested: %v", err)
	}
	// Through the bus's publish path the error has a code.
	big := &eventsv1.Envelope{PodUid: "u", Namespace: "default", PodName: "p", Generation: 1, Attempt: 1,
		Payload: &eventsv1.Envelope_PodRequested{PodRequested: &eventsv1.PodRequested{Pod: &corev1.Pod{
			Metadata: &corev1.ObjectMeta{Name: "p", Annotations: map[string]string{"junk": strings.Repeat("x", 3<<20)}}}}}}
	start := time.Now()
	if _, err := admin.Publish(ctx, big); !errors.Is(err, bus.ErrMessageTooLarge) {
		t.Fatalf("large event: %v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("refusal took %s", d)
	}
	if _, err := js.PublishMsg(ctx, &nats.Msg{Subject: subj, Data: []byte("small")}); err != nil {
		t.Fatalf("a small message after: %v", err)
	}
	st, _ := admin.JetStream().Stream(ctx, bus.EventsStream)
	info, err := st.Info(ctx)
	if err != nil || info.State.Msgs != 1 {
		t.Fatalf("stream holds %v messages (%v), want 1", info.State.Msgs, err)
	}
}

// TestDLQBounded: PODFLOW_DLQ and PODFLOW_ADVISORIES are bounded by bytes
// and age.
func TestDLQBounded(t *testing.T) {
	cfg := bus.DefaultStreamsConfig()
	for _, s := range bus.DefaultStreams(cfg) {
		if s.Name != bus.DLQStream && s.Name != bus.AdvisoriesStream {
			continue
		}
		if s.MaxBytes != cfg.DLQMaxBytes || s.MaxAge != cfg.DLQMaxAge || s.MaxBytes <= 0 || s.MaxAge <= 0 {
			t.Errorf("%s: MaxBytes %d MaxAge %s", s.Name, s.MaxBytes, s.MaxAge)
		}
	}
}
