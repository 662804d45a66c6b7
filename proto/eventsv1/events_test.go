package eventsv1_test

import (
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/eventsv1"
)

func TestEnvelopeType(t *testing.T) {
	tests := []struct {
		name string
		env  *eventsv1.Envelope
		want eventsv1.Type
	}{
		{"nil", nil, ""},
		{"empty", &eventsv1.Envelope{}, ""},
		{"requested", &eventsv1.Envelope{Payload: &eventsv1.Envelope_PodRequested{PodRequested: &eventsv1.PodRequested{}}}, "PodRequested"},
		{"scheduled", &eventsv1.Envelope{Payload: &eventsv1.Envelope_PodScheduled{PodScheduled: &eventsv1.PodScheduled{NodeName: "n1"}}}, "PodScheduled"},
		{"dead letter", &eventsv1.Envelope{Payload: &eventsv1.Envelope_DeadLetter{DeadLetter: &eventsv1.DeadLetter{}}}, "DeadLetter"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.env.Type(); got != tt.want {
				t.Fatalf("Type() = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestTypesCoverIssueList checks that every lifecycle event the design
// names exists, so a renamed message cannot silently drop one.
func TestTypesCoverIssueList(t *testing.T) {
	have := map[eventsv1.Type]bool{}
	for _, ty := range eventsv1.Types() {
		if have[ty] {
			t.Fatalf("event type %q listed twice", ty)
		}
		have[ty] = true
	}
	for _, want := range []eventsv1.Type{
		"PodRequested", "PodAuthorized", "PodAdmitted", "PodPersisted", "PodScheduled",
		"PodUnschedulable", "PodSandboxReady", "ImagePulled", "ContainerStarted",
		"ContainerExited", "PodRunning", "PodReady", "PodNotReady", "EndpointsUpdated",
		"PodRejected", "PodFailed", "PodDeleteRequested", "PodTerminating", "PodDeleted",
	} {
		if !have[want] {
			t.Errorf("event type %q missing from Envelope.payload", want)
		}
	}
}

func TestPayloadMessage(t *testing.T) {
	env := &eventsv1.Envelope{Payload: &eventsv1.Envelope_PodFailed{PodFailed: &eventsv1.PodFailed{Reason: eventsv1.ReasonErrImagePull}}}
	pf, ok := env.PayloadMessage().(*eventsv1.PodFailed)
	if !ok || pf.GetReason() != eventsv1.ReasonErrImagePull {
		t.Fatalf("PayloadMessage() = %v", env.PayloadMessage())
	}
	if (&eventsv1.Envelope{}).PayloadMessage() != nil {
		t.Fatal("PayloadMessage() of an empty envelope is not nil")
	}
}

func seedEnvelopes() []*eventsv1.Envelope {
	pod := &corev1.Pod{
		Metadata: &corev1.ObjectMeta{Name: "my-nginx-pod", Namespace: "default", Labels: map[string]string{"app": "nginx"}},
		Spec: &corev1.PodSpec{Containers: []*corev1.Container{{
			Name: "nginx-container", Image: "nginx",
			Ports: []*corev1.ContainerPort{{ContainerPort: 80, Protocol: "TCP"}},
		}}},
	}
	return []*eventsv1.Envelope{
		{Id: "r1/PodRequested/0/1", RequestId: "r1", Namespace: "default", PodName: "my-nginx-pod", Time: timestamppb.Now(),
			Payload: &eventsv1.Envelope_PodRequested{PodRequested: &eventsv1.PodRequested{Pod: pod, Token: "t"}}},
		{Id: "u/PodScheduled/1/1", PodUid: "u", NodeName: "n1",
			Payload: &eventsv1.Envelope_PodScheduled{PodScheduled: &eventsv1.PodScheduled{NodeName: "n1", Revision: 7}}},
		{Payload: &eventsv1.Envelope_PodRejected{PodRejected: &eventsv1.PodRejected{Status: &corev1.Status{Code: 403, Reason: eventsv1.ReasonForbidden}}}},
	}
}

// FuzzEnvelopeDecode: decoding arbitrary bytes never panics, and whatever
// decodes re-encodes to bytes that decode to an equal envelope.
func FuzzEnvelopeDecode(f *testing.F) {
	for _, env := range seedEnvelopes() {
		b, err := proto.Marshal(env)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{})
	f.Add([]byte{0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		var env eventsv1.Envelope
		if err := proto.Unmarshal(data, &env); err != nil {
			return
		}
		_ = env.Type()
		b, err := proto.Marshal(&env)
		if err != nil {
			t.Fatalf("re-marshal: %v", err)
		}
		var again eventsv1.Envelope
		if err := proto.Unmarshal(b, &again); err != nil {
			t.Fatalf("decode of re-marshalled envelope: %v", err)
		}
		if !proto.Equal(&env, &again) {
			t.Fatalf("round trip changed the envelope:\n%v\n%v", &env, &again)
		}
	})
}
