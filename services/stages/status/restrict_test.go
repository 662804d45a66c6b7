package status

import (
	"context"
	"errors"
	"testing"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/eventsv1"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/stage"
	"github.com/podflow/podflow/services/stage/stagetest"
)

// restrictFixture: a status stage over the fakes, with pods "mine" (bound
// to n1), "theirs" (bound to n2) and "going" (bound to n1, being deleted).
func restrictFixture(t *testing.T) (*Stage, stage.Env) {
	t.Helper()
	env, _, _ := stagetest.NewEnv("status")
	ctx := context.Background()
	for _, p := range []struct {
		name, node string
		deleting   bool
	}{{"mine", "n1", false}, {"theirs", "n2", false}, {"going", "n1", true}} {
		pod := &corev1.Pod{
			Metadata: &corev1.ObjectMeta{Name: p.name, Namespace: "default", Uid: "uid-" + p.name},
			Spec:     &corev1.PodSpec{NodeName: p.node},
			Status:   &corev1.PodStatus{Phase: "Running", PodIp: "10.244.0.10"},
		}
		if p.deleting {
			pod.Metadata.DeletionTimestamp = timestamppb.Now()
		}
		if _, err := env.Store.Create(ctx, pod); err != nil {
			t.Fatal(err)
		}
	}
	s, err := NewStage(env, DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	return s, env
}

// nodeEvent is what node's agent publishes about pod: a status report
// (moving the pod's IP, with a Warning Event) or PodDeleted.
func nodeEvent(node, pod string, deleted bool) *eventsv1.Envelope {
	e := &eventsv1.Envelope{Namespace: "default", PodName: pod, PodUid: "uid-" + pod, NodeName: node, Stage: "nodeagent", Replica: node}
	if deleted {
		e.Payload = &eventsv1.Envelope_PodDeleted{PodDeleted: &eventsv1.PodDeleted{}}
		return e
	}
	e.Payload = &eventsv1.Envelope_PodStatusReport{PodStatusReport: &eventsv1.PodStatusReport{
		Seq:    10,
		Status: &corev1.PodStatus{Phase: "Running", PodIp: "10.244.9.9"},
		Events: []*eventsv1.EventRecord{{Type: "Warning", Reason: "Forged", Message: "forged"}},
	}}
	return e
}

// TestNodeRestriction: node n1, publishing on its own subjects, cannot
// change or delete n2's pod, cannot delete its own pod that nobody
// deleted, and cannot send an envelope that disagrees with its subject;
// each refusal is permanent with its reason, and the store is unchanged.
// Its own reports and deletions are applied.
func TestNodeRestriction(t *testing.T) {
	s, env := restrictFixture(t)
	ctx := context.Background()
	mismatch := func(mutate func(e *eventsv1.Envelope)) *bus.Delivery {
		e := nodeEvent("n1", "mine", false)
		subject := bus.Subject(e) // n1's own subject for its own pod
		mutate(e)
		return stagetest.DeliverOn(env, e, subject)
	}
	tests := []struct {
		name   string
		d      *bus.Delivery
		reason string
		pod    string // still stored, unchanged
	}{
		{"report for a pod bound to n2", stagetest.Deliver(env, nodeEvent("n1", "theirs", false)), stage.RefusedNotBoundToNode, "theirs"},
		{"deletion of a pod bound to n2", stagetest.Deliver(env, nodeEvent("n1", "theirs", true)), stage.RefusedNotBoundToNode, "theirs"},
		{"deletion of its own pod nobody deleted", stagetest.Deliver(env, nodeEvent("n1", "mine", true)), stage.RefusedNotTerminating, "mine"},
		{"envelope names n2 on n1's subject", mismatch(func(e *eventsv1.Envelope) { e.NodeName = "n2" }), stage.RefusedSubjectMismatch, "mine"},
		{"envelope names another namespace", mismatch(func(e *eventsv1.Envelope) { e.Namespace = "kube-system" }), stage.RefusedSubjectMismatch, "mine"},
		{"envelope names another pod", mismatch(func(e *eventsv1.Envelope) { e.PodName, e.PodUid = "theirs", "uid-theirs" }), stage.RefusedSubjectMismatch, "theirs"},
		{"a deletion on a report's subject", mismatch(func(e *eventsv1.Envelope) {
			e.Payload = &eventsv1.Envelope_PodDeleted{PodDeleted: &eventsv1.PodDeleted{}}
		}), stage.RefusedSubjectMismatch, "mine"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := s.Handle(ctx, tt.d)
			if !bus.IsPermanent(err) || stage.RefusalReason(err) != tt.reason {
				t.Fatalf("Handle = %v, want a permanent refusal %s", err, tt.reason)
			}
			pod, err := objects.Get[*corev1.Pod](ctx, env.Store, "default", tt.pod)
			if err != nil {
				t.Fatalf("pod %s: %v", tt.pod, err)
			}
			if ip := pod.GetStatus().GetPodIp(); ip != "10.244.0.10" {
				t.Errorf("pod %s's IP is %s: the refused report was applied", tt.pod, ip)
			}
			if evs, _, err := objects.List[*corev1.Event](ctx, env.Store, ""); err != nil || len(evs) != 0 {
				t.Errorf("Events %v (%v), want none recorded", evs, err)
			}
		})
	}

	t.Run("its own pods", func(t *testing.T) {
		if err := s.Handle(ctx, stagetest.Deliver(env, nodeEvent("n1", "mine", false))); err != nil {
			t.Fatal(err)
		}
		pod, err := objects.Get[*corev1.Pod](ctx, env.Store, "default", "mine")
		if err != nil || pod.GetStatus().GetPodIp() != "10.244.9.9" {
			t.Errorf("n1's report on its pod not applied: %v %v", pod.GetStatus(), err)
		}
		if err := s.Handle(ctx, stagetest.Deliver(env, nodeEvent("n1", "going", true))); err != nil {
			t.Fatal(err)
		}
		if _, err := objects.Get[*corev1.Pod](ctx, env.Store, "default", "going"); !errors.Is(err, raftstore.ErrNotFound) {
			t.Errorf("n1's deleted pod still stored: %v", err)
		}
	})
}
