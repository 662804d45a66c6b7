package eventsv1_test

import (
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podflow/podflow/proto/eventsv1"
)

// Unfold gives a report's steps back as whole envelopes behind the report:
// each keeps its id, payload and time (the report's when it has none) and
// takes the rest of its routing from the report; other envelopes are
// themselves alone.
func TestUnfold(t *testing.T) {
	t0, t1 := timestamppb.New(time.Unix(100, 0)), timestamppb.New(time.Unix(105, 0))
	report := &eventsv1.Envelope{Id: "r", PodUid: "u1", Namespace: "ns", PodName: "web", NodeName: "n1", Stage: "nodeagent",
		Replica: "n1", Attempt: 1, Generation: 9, Time: t1, Traceparent: "tp", RequestId: "req",
		Payload: &eventsv1.Envelope_PodStatusReport{PodStatusReport: &eventsv1.PodStatusReport{Seq: 9, Steps: []*eventsv1.Envelope{
			{Id: "s1", Time: t0, Payload: &eventsv1.Envelope_PodSandboxReady{PodSandboxReady: &eventsv1.PodSandboxReady{PodIp: "10.0.0.2"}}},
			{Id: "s2", Payload: &eventsv1.Envelope_PodRunning{PodRunning: &eventsv1.PodRunning{}}},
		}}}}
	got := eventsv1.Unfold(report)
	if len(got) != 3 || got[0] != report || got[1].GetId() != "s1" || got[2].GetId() != "s2" {
		t.Fatalf("Unfold = %v", got)
	}
	if got[1].GetPodSandboxReady().GetPodIp() != "10.0.0.2" || got[1].GetTime() != t0 || got[2].GetPodRunning() == nil || got[2].GetTime() != t1 {
		t.Errorf("steps' payloads and times: %v, %v", got[1], got[2])
	}
	for _, s := range got[1:] {
		if s.GetPodUid() != "u1" || s.GetNamespace() != "ns" || s.GetPodName() != "web" || s.GetNodeName() != "n1" || s.GetStage() != "nodeagent" ||
			s.GetReplica() != "n1" || s.GetAttempt() != 1 || s.GetGeneration() != 9 || s.GetTraceparent() != "tp" || s.GetRequestId() != "req" {
			t.Errorf("step %s routing: %v", s.GetId(), s)
		}
	}
	if len(report.GetPodStatusReport().GetSteps()[1].GetPodUid()) != 0 {
		t.Error("Unfold changed the report's steps")
	}
	plain := &eventsv1.Envelope{Id: "p", Payload: &eventsv1.Envelope_PodDeleted{PodDeleted: &eventsv1.PodDeleted{}}}
	if got := eventsv1.Unfold(plain); len(got) != 1 || got[0] != plain {
		t.Errorf("Unfold(PodDeleted) = %v", got)
	}
}
