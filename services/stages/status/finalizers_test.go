package status

import (
	"context"
	"errors"
	"testing"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/stage"
	"github.com/podflow/podflow/services/stage/stagetest"
)

// TestFinalizersHoldADeletedPod: a pod being deleted whose node is done
// (PodDeleted) but that still has a finalizer stays, as kube-apiserver
// keeps it after kubelet's final delete: deletionGracePeriodSeconds 0,
// Failed since it had not ended, its node allocation released. A second
// PodDeleted changes nothing. Removing the last finalizer
// (stage.RemovePodFinalizer) deletes it; a pod without finalizers goes at
// once.
func TestFinalizersHoldADeletedPod(t *testing.T) {
	env, _, _ := stagetest.NewEnv("status")
	ctx := context.Background()
	grace := int64(30)
	for _, name := range []string{"held", "free"} {
		pod := &corev1.Pod{
			Metadata: &corev1.ObjectMeta{Name: name, Namespace: "default", Uid: "uid-" + name, DeletionTimestamp: timestamppb.Now(),
				DeletionGracePeriodSeconds: &grace},
			Spec:   &corev1.PodSpec{NodeName: "n1"},
			Status: &corev1.PodStatus{Phase: "Running"},
		}
		if name == "held" {
			pod.Metadata.Finalizers = []string{"batch.kubernetes.io/job-tracking"}
		}
		if _, err := env.Store.Create(ctx, pod); err != nil {
			t.Fatal(err)
		}
	}
	alloc := &corev1.NodeAllocation{Metadata: &corev1.ObjectMeta{Name: "n1"}, Pods: map[string]*corev1.AllocatedPod{"uid-held": {}, "uid-free": {}}}
	if _, err := env.Store.Create(ctx, alloc); err != nil {
		t.Fatal(err)
	}
	s, err := NewStage(env, DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"held", "free", "held"} {
		if err := s.Handle(ctx, stagetest.Deliver(env, nodeEvent("n1", name, true))); err != nil {
			t.Fatalf("PodDeleted of %s: %v", name, err)
		}
	}
	if _, err := objects.Get[*corev1.Pod](ctx, env.Store, "default", "free"); !errors.Is(err, raftstore.ErrNotFound) {
		t.Errorf("the pod without finalizers: %v, want it gone", err)
	}
	held, err := objects.Get[*corev1.Pod](ctx, env.Store, "default", "held")
	if err != nil {
		t.Fatalf("the pod with a finalizer: %v, want it kept", err)
	}
	if g := held.GetMetadata().DeletionGracePeriodSeconds; g == nil || *g != 0 || held.GetStatus().GetPhase() != "Failed" {
		t.Errorf("held pod: grace %v phase %q, want 0 and Failed", g, held.GetStatus().GetPhase())
	}
	a, err := objects.Get[*corev1.NodeAllocation](ctx, env.Store, "", "n1")
	if err != nil {
		t.Fatal(err)
	}
	if len(a.GetPods()) != 0 {
		t.Errorf("allocation of n1 still holds %v", a.GetPods())
	}
	if _, err := stage.RemovePodFinalizer(ctx, env.Store, "default", "held", "uid-held", "batch.kubernetes.io/job-tracking"); err != nil {
		t.Fatal(err)
	}
	if _, err := objects.Get[*corev1.Pod](ctx, env.Store, "default", "held"); !errors.Is(err, raftstore.ErrNotFound) {
		t.Errorf("the held pod after its last finalizer went: %v, want it gone", err)
	}
}
