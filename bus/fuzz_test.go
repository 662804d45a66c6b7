package bus_test

import (
	"errors"
	"testing"

	"github.com/podflow/podflow/bus"
	eventsv1 "github.com/podflow/podflow/proto/eventsv1"
	"google.golang.org/protobuf/proto"
)

// FuzzEnvelopeDecode: DecodeEnvelope never panics, fails only with
// ErrDecode, and what it accepts survives a marshal round trip with the
// same subject and event id.
func FuzzEnvelopeDecode(f *testing.F) {
	seeds := []*eventsv1.Envelope{
		podEvent("u1", "web.example", 1),
		{NodeName: "n1", Payload: &eventsv1.Envelope_NodeHeartbeat{NodeHeartbeat: &eventsv1.NodeHeartbeat{RunningPods: 3}}},
		{Stage: "scheduler", Payload: &eventsv1.Envelope_DeadLetter{DeadLetter: &eventsv1.DeadLetter{Code: bus.CodeDecode, Data: []byte{1, 2, 3}}}},
		{RequestId: "r1", Namespace: "a b", PodName: "*>", Traceparent: bus.NewTraceparent(), Payload: &eventsv1.Envelope_PodRejected{PodRejected: &eventsv1.PodRejected{}}},
	}
	for _, e := range seeds {
		b, err := proto.Marshal(e)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{})
	f.Add([]byte{0xff, 0xff, 0xff})
	f.Add([]byte{0x0a, 0x02, 'i', 'd'}) // an id and no payload
	f.Fuzz(func(t *testing.T, data []byte) {
		env, err := bus.DecodeEnvelope(data)
		if err != nil {
			if !errors.Is(err, bus.ErrDecode) {
				t.Fatalf("decode error %v does not match ErrDecode", err)
			}
			return
		}
		if env.Type() == "" {
			t.Fatal("accepted an envelope without payload")
		}
		b, err := proto.Marshal(env)
		if err != nil {
			t.Fatalf("re-marshal: %v", err)
		}
		again, err := bus.DecodeEnvelope(b)
		if err != nil {
			t.Fatalf("re-decode: %v", err)
		}
		if bus.Subject(again) != bus.Subject(env) || eventsv1.EventID(again) != eventsv1.EventID(env) {
			t.Fatalf("round trip changed subject or id: %q/%q vs %q/%q", bus.Subject(again), eventsv1.EventID(again), bus.Subject(env), eventsv1.EventID(env))
		}
		s := bus.Subject(env)
		if info, err := bus.ParseSubject(s); err != nil || info.String() != s {
			t.Fatalf("subject %q of a decoded envelope does not parse back: %+v, %v", s, info, err)
		}
	})
}

// FuzzParseSubject: ParseSubject never panics, accepts only canonical
// subjects (String rebuilds the input exactly), and token encoding is a
// bijection on any string.
func FuzzParseSubject(f *testing.F) {
	for _, s := range []string{
		"podflow.pod.PodRequested.~.default.web_1",
		"podflow.pod.PodScheduled.node_a.kube-system.dns",
		"podflow.node.n1.NodeHeartbeat",
		"podflow.dlq.scheduler",
		"podflow.pod.PodReady.~.a~5Fb.~C3~A9",
		"podflow.pod.PodReady.~.~2E.x",
		"podflow.api.create",
		"podflow.pod.X.a.b",
		"",
		"....",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		info, err := bus.ParseSubject(s)
		if err == nil {
			if got := info.String(); got != s {
				t.Fatalf("ParseSubject(%q).String() = %q", s, got)
			}
		} else if !errors.Is(err, bus.ErrInvalid) {
			t.Fatalf("ParseSubject error %v does not match ErrInvalid", err)
		}
		tok := bus.EncodeToken(s)
		back, err := bus.DecodeToken(tok)
		if err != nil || back != s {
			t.Fatalf("DecodeToken(EncodeToken(%q)) = %q, %v", s, back, err)
		}
		if v, err := bus.DecodeToken(s); err == nil && bus.EncodeToken(v) != s {
			t.Fatalf("DecodeToken accepted non-canonical %q (-> %q -> %q)", s, v, bus.EncodeToken(v))
		}
	})
}
