package controller_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/raftstore/raftstoretest"
	"github.com/podflow/podflow/services/controller"
	"github.com/podflow/podflow/services/informer"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/objects/objectstest"
)

// TestPodsOf: over the controller index, PodsOf gives the pods whose
// controller is the object (namespace, kind, name and uid all count; an
// owner that is not the controller does not), with orphans the
// namespace's pods without a controller, and follows a release.
func TestPodsOf(t *testing.T) {
	st := objects.FromKV(objectstest.New())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pod := func(ns, name string, refs ...*corev1.OwnerReference) *corev1.Pod {
		return &corev1.Pod{Metadata: &corev1.ObjectMeta{Namespace: ns, Name: name, OwnerReferences: refs}}
	}
	ref := func(kind, name, uid string, ctl bool) *corev1.OwnerReference {
		return &corev1.OwnerReference{Kind: kind, Name: name, Uid: uid, Controller: ctl}
	}
	rs := ref("ReplicaSet", "web", "u1", true)
	for _, p := range []*corev1.Pod{
		pod("a", "mine-1", rs),
		pod("a", "mine-2", ref("Deployment", "web", "d1", false), rs),
		pod("a", "other-uid", ref("ReplicaSet", "web", "u2", true)),
		pod("a", "other-kind", ref("ReplicationController", "web", "u1", true)),
		pod("a", "orphan"),
		pod("a", "owned-not-controlled", ref("ReplicaSet", "web", "u1", false)),
		pod("b", "orphan"),
		pod("b", "same-ref-other-ns", rs),
	} {
		if _, err := st.Apply(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	inf, err := informer.New[*corev1.Pod](st, "", informer.Handlers[*corev1.Pod]{})
	if err != nil {
		t.Fatal(err)
	}
	controller.AddPodControllerIndex(inf)
	controller.AddPodControllerIndex(inf) // a second call is a no-op
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- inf.Run(runCtx) }()
	defer func() {
		stop()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Error(err)
		}
	}()
	if err := inf.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
	got := func(orphans bool) []string {
		var out []string
		for _, p := range controller.PodsOf(inf, "a", "ReplicaSet", "web", "u1", orphans) {
			out = append(out, p.GetMetadata().GetName())
		}
		slices.Sort(out)
		return out
	}
	if g, w := got(false), []string{"mine-1", "mine-2"}; !slices.Equal(g, w) {
		t.Errorf("PodsOf without orphans = %v, want %v", g, w)
	}
	if g, w := got(true), []string{"mine-1", "mine-2", "orphan", "owned-not-controlled"}; !slices.Equal(g, w) {
		t.Errorf("PodsOf with orphans = %v, want %v", g, w)
	}
	if _, err := st.Apply(ctx, pod("a", "mine-1")); err != nil { // released
		t.Fatal(err)
	}
	raftstoretest.WaitFor(t, 10*time.Second, "the release in the index", func() bool {
		return slices.Equal(got(false), []string{"mine-2"}) && slices.Equal(got(true), []string{"mine-1", "mine-2", "orphan", "owned-not-controlled"})
	})
}

// TestNewPodInformer: a controller's pod informer keeps whole its own
// kind's pods and orphans (a non-controller owner makes no controller),
// and another kind's pods with their identity, labels and owners only;
// the controller index and PodsOf work over both.
func TestNewPodInformer(t *testing.T) {
	st := objects.FromKV(objectstest.New())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pod := func(name string, refs ...*corev1.OwnerReference) *corev1.Pod {
		return &corev1.Pod{Metadata: &corev1.ObjectMeta{Namespace: "a", Name: name, Labels: map[string]string{"app": "x"}, OwnerReferences: refs},
			Spec: &corev1.PodSpec{NodeName: "n1"}, Status: &corev1.PodStatus{Phase: "Running"}}
	}
	ref := func(kind, uid string, ctl bool) *corev1.OwnerReference {
		return &corev1.OwnerReference{Kind: kind, Name: "x", Uid: uid, Controller: ctl}
	}
	for _, p := range []*corev1.Pod{
		pod("job-pod", ref("Job", "j1", true)),
		pod("rs-pod", ref("ReplicaSet", "r1", true)),
		pod("orphan"),
		pod("owned-not-controlled", ref("ReplicaSet", "r1", false)),
	} {
		if _, err := st.Apply(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	inf, err := controller.NewPodInformer(st, "Job", informer.Handlers[*corev1.Pod]{})
	if err != nil {
		t.Fatal(err)
	}
	controller.AddPodControllerIndex(inf)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- inf.Run(runCtx) }()
	defer func() { stop(); <-done }()
	if err := inf.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
	for name, whole := range map[string]bool{"job-pod": true, "orphan": true, "owned-not-controlled": true, "rs-pod": false} {
		p, ok := inf.Get("a", name)
		if !ok {
			t.Fatalf("%s not cached", name)
		}
		if got := p.GetSpec().GetNodeName() == "n1" && p.GetStatus().GetPhase() == "Running"; got != whole {
			t.Errorf("%s: whole = %v, want %v", name, got, whole)
		}
		if owners := map[bool]int{true: 1}[name != "orphan"]; p.GetMetadata().GetLabels()["app"] != "x" || len(p.GetMetadata().GetOwnerReferences()) != owners {
			t.Errorf("%s: labels or owners lost: %v", name, p.GetMetadata())
		}
	}
	if got := controller.PodsOf(inf, "a", "ReplicaSet", "x", "r1", false); len(got) != 1 || got[0].GetMetadata().GetName() != "rs-pod" {
		t.Errorf("PodsOf the ReplicaSet = %v, want rs-pod", got)
	}
}
