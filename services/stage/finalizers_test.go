package stage_test

import (
	"context"
	"errors"
	"testing"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/stage"
	"github.com/podflow/podflow/services/stage/stagetest"
)

// TestUnboundPodHeldForFinalizers: deleting an unbound pod removes it at
// once, unless it has finalizers: then it stays, held (grace 0, Failed),
// until RemovePodFinalizer takes the last one — which deletes it, and
// only for the same pod (uid) and finalizer.
func TestUnboundPodHeldForFinalizers(t *testing.T) {
	env, _, _ := stagetest.NewEnv("api")
	ctx := context.Background()
	for _, name := range []string{"free", "held"} {
		p := &corev1.Pod{Metadata: &corev1.ObjectMeta{Namespace: "default", Name: name, Uid: "uid-" + name}, Status: &corev1.PodStatus{Phase: "Pending"}}
		if name == "held" {
			p.Metadata.Finalizers = []string{"example.com/a", "example.com/b"}
		}
		if _, err := env.Store.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		if _, err := stage.DeletePod(ctx, env, "default", name, nil); err != nil {
			t.Fatalf("delete %s: %v", name, err)
		}
	}
	if _, err := objects.Get[*corev1.Pod](ctx, env.Store, "default", "free"); !errors.Is(err, raftstore.ErrNotFound) {
		t.Errorf("unbound pod without finalizers: %v, want it gone", err)
	}
	held, err := objects.Get[*corev1.Pod](ctx, env.Store, "default", "held")
	if err != nil {
		t.Fatalf("unbound pod with finalizers: %v, want it held", err)
	}
	if g := held.GetMetadata().DeletionGracePeriodSeconds; g == nil || *g != 0 || held.GetStatus().GetPhase() != "Failed" {
		t.Errorf("held: grace %v phase %q, want 0 and Failed", g, held.GetStatus().GetPhase())
	}
	for _, c := range []struct{ uid, finalizer string }{{"uid-other", "example.com/a"}, {"uid-held", "example.com/none"}} {
		if rev, err := stage.RemovePodFinalizer(ctx, env.Store, "default", "held", c.uid, c.finalizer); err != nil || rev != 0 {
			t.Errorf("RemovePodFinalizer(%s, %s) = %d, %v; want nothing done", c.uid, c.finalizer, rev, err)
		}
	}
	if _, err := stage.RemovePodFinalizer(ctx, env.Store, "default", "held", "uid-held", "example.com/a"); err != nil {
		t.Fatal(err)
	}
	if p, err := objects.Get[*corev1.Pod](ctx, env.Store, "default", "held"); err != nil || len(p.GetMetadata().GetFinalizers()) != 1 {
		t.Fatalf("after one of two finalizers: %v, %v; want the pod with one left", p.GetMetadata().GetFinalizers(), err)
	}
	if _, err := stage.RemovePodFinalizer(ctx, env.Store, "default", "held", "uid-held", "example.com/b"); err != nil {
		t.Fatal(err)
	}
	if _, err := objects.Get[*corev1.Pod](ctx, env.Store, "default", "held"); !errors.Is(err, raftstore.ErrNotFound) {
		t.Errorf("held pod after its last finalizer: %v, want it gone", err)
	}
}
