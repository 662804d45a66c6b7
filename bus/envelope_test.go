package bus

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "github.com/podflow/podflow/proto/corev1"
	eventsv1 "github.com/podflow/podflow/proto/eventsv1"
	"google.golang.org/protobuf/reflect/protoregistry"
)

func TestEventID(t *testing.T) {
	base := func() *eventsv1.Envelope {
		return &eventsv1.Envelope{PodUid: "u1", RequestId: "r1", Generation: 2, Attempt: 1, Traceparent: NewTraceparent(),
			Payload: &eventsv1.Envelope_PodScheduled{PodScheduled: &eventsv1.PodScheduled{NodeName: "n1"}}}
	}
	if got, want := eventsv1.EventID(base()), "uid/u1/PodScheduled/g2/a1"; got != want {
		t.Fatalf("EventID = %q, want %q", got, want)
	}
	// Deterministic: trace, time, stage and replica do not matter.
	a, b := base(), base()
	b.Replica, b.Stage, b.Redeliveries = "other", "other", 3
	if eventsv1.EventID(a) != eventsv1.EventID(b) {
		t.Fatalf("EventID differs for a retried event: %q vs %q", eventsv1.EventID(a), eventsv1.EventID(b))
	}
	tests := []struct {
		name   string
		mutate func(*eventsv1.Envelope)
		want   string
	}{
		{"generation", func(e *eventsv1.Envelope) { e.Generation = 3 }, "uid/u1/PodScheduled/g3/a1"},
		{"attempt", func(e *eventsv1.Envelope) { e.Attempt = 2 }, "uid/u1/PodScheduled/g2/a2"},
		{"type", func(e *eventsv1.Envelope) { _ = SetPayload(e, &eventsv1.PodReady{}) }, "uid/u1/PodReady/g2/a1"},
		{"request id before persistence", func(e *eventsv1.Envelope) { e.PodUid = "" }, "req/r1/PodScheduled/g2/a1"},
		{"node report", func(e *eventsv1.Envelope) {
			e.PodUid, e.RequestId, e.NodeName = "", "", "n1"
			_ = SetPayload(e, &eventsv1.NodeHeartbeat{})
		}, "node/n1/NodeHeartbeat/g2/a1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := base()
			tt.mutate(e)
			if got := eventsv1.EventID(e); got != tt.want {
				t.Fatalf("EventID = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestTraceparent(t *testing.T) {
	p := NewTraceparent()
	if !ValidTraceparent(p) {
		t.Fatalf("NewTraceparent() = %q is not valid", p)
	}
	if q := NewTraceparent(); q[3:35] == p[3:35] {
		t.Fatalf("two new traces share trace id %q", p[3:35])
	}
	c := ChildTraceparent(p)
	if !ValidTraceparent(c) || c[3:35] != p[3:35] || c[36:52] == p[36:52] || c[53:] != p[53:] {
		t.Fatalf("ChildTraceparent(%q) = %q: want same trace and flags, new span", p, c)
	}
	for _, bad := range []string{"", "00-0-0-01", strings.Repeat("x", 55),
		"00-00000000000000000000000000000000-0000000000000001-01",
		"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01"} {
		if ValidTraceparent(bad) {
			t.Errorf("ValidTraceparent(%q) = true", bad)
		}
		if c := ChildTraceparent(bad); !ValidTraceparent(c) {
			t.Errorf("ChildTraceparent(%q) = %q is invalid", bad, c)
		}
	}
	if !ValidTraceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01") {
		t.Fatal("W3C example traceparent rejected")
	}
}

func TestSetPayload(t *testing.T) {
	env, err := NewEnvelope(&eventsv1.PodUnschedulable{Reason: eventsv1.ReasonUnschedulable})
	if err != nil {
		t.Fatal(err)
	}
	if env.Type() != "PodUnschedulable" || env.GetPodUnschedulable().GetReason() != eventsv1.ReasonUnschedulable {
		t.Fatalf("payload not set: %v", env)
	}
	if _, err := NewEnvelope(&corev1.Pod{}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("NewEnvelope(Pod) error = %v, want ErrInvalid", err)
	}
	// Every payload of the oneof is taken, and replaces the one before.
	od := env.ProtoReflect().Descriptor().Oneofs().ByName("payload")
	for i := 0; i < od.Fields().Len(); i++ {
		md := od.Fields().Get(i).Message()
		mt, err := protoregistry.GlobalTypes.FindMessageByName(md.FullName())
		if err != nil {
			t.Fatal(err)
		}
		if err := SetPayload(env, mt.New().Interface()); err != nil || env.Type() != eventsv1.Type(md.Name()) {
			t.Errorf("SetPayload(%s): type %q, error %v", md.Name(), env.Type(), err)
		}
	}
}

func TestDeliveryNext(t *testing.T) {
	parent := &eventsv1.Envelope{Id: "uid/u1/PodPersisted/g1/a1", PodUid: "u1", RequestId: "r1", Namespace: "ns", PodName: "p",
		Generation: 1, Traceparent: NewTraceparent(), Stage: "persistence", Payload: &eventsv1.Envelope_PodPersisted{PodPersisted: &eventsv1.PodPersisted{}}}
	received := time.Now().Add(-time.Second)
	d := &Delivery{Envelope: parent, NumDelivered: 3, Received: received, Stage: "scheduler", Replica: "s-2"}
	next := d.Next(&eventsv1.PodScheduled{NodeName: "n1"})
	switch {
	case next.PodUid != "u1" || next.RequestId != "r1" || next.Namespace != "ns" || next.PodName != "p" || next.Generation != 1:
		t.Fatalf("identity not copied: %v", next)
	case next.Stage != "scheduler" || next.Replica != "s-2" || next.CausedBy != parent.Id || next.Redeliveries != 2 || next.Attempt != 1:
		t.Fatalf("handling not recorded: %v", next)
	case !next.HandledStart.AsTime().Equal(received) || next.HandledEnd.AsTime().Before(received):
		t.Fatalf("handled_start/end = %v/%v, received %v", next.HandledStart.AsTime(), next.HandledEnd.AsTime(), received)
	case next.Traceparent[3:35] != parent.Traceparent[3:35] || next.Traceparent == parent.Traceparent:
		t.Fatalf("traceparent %q is not a child of %q", next.Traceparent, parent.Traceparent)
	case next.Type() != "PodScheduled" || next.Id != "":
		t.Fatalf("type %q id %q", next.Type(), next.Id)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("Next with a non-payload message did not panic")
		}
	}()
	d.Next(&corev1.Pod{})
}

func TestErrorCodes(t *testing.T) {
	cause := errors.New("disk full")
	p := Permanent(fmt.Errorf("write %q: %w", "pod", cause))
	if !IsPermanent(p) || !IsPermanent(fmt.Errorf("wrapped: %w", p)) || !errors.Is(p, cause) {
		t.Fatalf("Permanent error %v not recognised", p)
	}
	if IsPermanent(cause) || Permanent(nil) != nil {
		t.Fatal("plain error is permanent or Permanent(nil) is not nil")
	}
	// A refusal is permanent too, with its own code.
	f := Forbidden(cause)
	if !IsPermanent(f) || !errors.Is(f, ErrForbidden) || errors.Is(f, ErrPermanent) || !errors.Is(f, cause) || Forbidden(nil) != nil {
		t.Fatalf("Forbidden error %v not recognised", f)
	}
	// Codes decoded from the wire match the sentinels.
	wire := &Error{Code: CodeMaxDeliver, Message: "anything"}
	if !errors.Is(wire, ErrMaxDeliver) || errors.Is(wire, ErrDecode) {
		t.Fatal("errors.Is does not compare by code")
	}
	for _, tt := range []struct {
		err  error
		want string
	}{{nil, ""}, {cause, CodeTransient}, {p, CodePermanent}, {fmt.Errorf("x: %w", ErrStreamUnavailable), CodeStreamUnavailable}, {Forbidden(cause), CodeForbidden}} {
		if got := CodeOf(tt.err); got != tt.want {
			t.Errorf("CodeOf(%v) = %q, want %q", tt.err, got, tt.want)
		}
	}
}

func TestConfigsValidate(t *testing.T) {
	if err := DefaultRunnerConfig("scheduler").Validate(); err != nil {
		t.Fatalf("default runner config: %v", err)
	}
	if err := DefaultStreamsConfig().Validate(); err != nil {
		t.Fatalf("default streams config: %v", err)
	}
	if err := DefaultEmbeddedConfig("/tmp/x").Validate(); err != nil {
		t.Fatalf("default embedded config: %v", err)
	}
	c := DefaultConfig()
	c.URLs = []string{"nats://127.0.0.1:4222"}
	if err := c.Validate(); err != nil {
		t.Fatalf("default client config: %v", err)
	}
	bad := []error{
		func() error { c := DefaultRunnerConfig("s"); c.MaxDeliver = 0; return c.Validate() }(),
		func() error { c := DefaultRunnerConfig("s"); c.Backoff = nil; return c.Validate() }(),
		func() error { c := DefaultRunnerConfig(""); return c.Validate() }(),
		func() error { c := DefaultStreamsConfig(); c.Replicas = 2; return c.Validate() }(),
		func() error { return DefaultEmbeddedConfig("").Validate() }(),
		func() error { return DefaultConfig().Validate() }(),
		func() error {
			return ConsumerSpec{Stream: "S", Durable: "d", MaxDeliver: 2, Backoff: []time.Duration{time.Second, time.Second}}.validate()
		}(),
	}
	for i, err := range bad {
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("case %d: error %v, want ErrInvalid", i, err)
		}
	}
}

// TestDecodeEnvelopeRefusesInvalidUTF8: an envelope whose strings are not
// UTF-8 — anywhere, down to the pod inside its payload — is refused with
// CodeDecode, as proto.Unmarshal refuses it (vtproto's generated decoder
// alone takes it, and a status written from it would leave a pod nobody
// could read back).
func TestDecodeEnvelopeRefusesInvalidUTF8(t *testing.T) {
	for name, env := range map[string]*eventsv1.Envelope{
		"the envelope's id": {Id: "x\xff", Payload: &eventsv1.Envelope_PodScheduled{PodScheduled: &eventsv1.PodScheduled{NodeName: "n1"}}},
		"the payload's pod": {Id: "x", Payload: &eventsv1.Envelope_PodPersisted{PodPersisted: &eventsv1.PodPersisted{
			Pod: &corev1.Pod{Metadata: &corev1.ObjectMeta{Name: "web", Labels: map[string]string{"app": "w\xfe"}}}}}},
	} {
		raw, err := env.MarshalVT() // writes the bytes unchecked, as a hostile publisher may
		if err != nil {
			t.Fatal(err)
		}
		if _, err := DecodeEnvelope(raw); CodeOf(err) != CodeDecode {
			t.Errorf("%s not UTF-8: DecodeEnvelope = %v, want CodeDecode", name, err)
		}
	}
}
