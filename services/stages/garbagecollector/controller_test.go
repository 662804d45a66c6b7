package garbagecollector

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/objects/objectstest"
	"github.com/podflow/podflow/services/stage"
	"github.com/podflow/podflow/services/stage/stagetest"
)

// fixture is a collector over an in-memory store.
type fixture struct {
	t   *testing.T
	ctx context.Context
	c   *Controller
	st  *objects.Store
	kv  *objectstest.KV
}

func newFixture(t *testing.T) *fixture {
	env, _, kv := stagetest.NewEnv("garbagecollector")
	c, err := New(env, DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{t: t, ctx: context.Background(), c: c, st: env.Store, kv: kv}
}

// start runs the collector (its list, watch and worker) until the test
// ends, and waits for its index.
func (f *fixture) start() {
	f.t.Helper()
	stagetest.Start(f.t, f.c.Start)
	f.waitFor("the index is listed", func() bool { return f.c.idx.Load() != nil })
}

// waitFor waits for ok, which the running collector is to make true; the
// deadline only ends a test that would otherwise hang.
func (f *fixture) waitFor(what string, ok func() bool) {
	f.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			f.t.Fatalf("timed out waiting: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// countLists counts the store's List calls from now on.
func (f *fixture) countLists() *atomic.Int64 {
	var n atomic.Int64
	f.kv.Hook(func(method, _ string) error {
		if method == "List" {
			n.Add(1)
		}
		return nil
	})
	return &n
}

// create stores obj of kind k in ns with uid and refs; it returns obj as stored.
func (f *fixture) create(k objects.Kind, ns, name string, refs ...*corev1.OwnerReference) objects.Object {
	f.t.Helper()
	obj := k.New()
	md := objects.Meta(obj)
	md.Namespace, md.Name, md.Uid, md.OwnerReferences = ns, name, "uid-"+k.Name+"-"+name, refs
	if p, ok := obj.(*corev1.Pod); ok { // bound: it stays until its node is done
		p.Spec = &corev1.PodSpec{NodeName: "n1", Containers: []*corev1.Container{{Name: "c", Image: "i"}}}
	}
	if _, err := f.st.Create(f.ctx, obj); err != nil {
		f.t.Fatal(err)
	}
	return obj
}

// mark marks obj for deletion with finalizer fin, as the api stage does.
func (f *fixture) mark(k objects.Kind, obj objects.Object, fin string) {
	f.t.Helper()
	md := obj.GetMetadata()
	md.DeletionTimestamp, md.Finalizers = timestamppb.Now(), append(md.Finalizers, fin)
	if _, err := f.st.Update(f.ctx, obj); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) get(k objects.Kind, ns, name string) objects.Object {
	f.t.Helper()
	o, err := f.st.GetKind(f.ctx, k, ns, name)
	if errors.Is(err, raftstore.ErrNotFound) {
		return nil
	}
	if err != nil {
		f.t.Fatal(err)
	}
	return o
}

// sync is one pass of the collector over the store as it is: the index
// listed afresh, then a sync of each object it calls for (index.scan),
// without the watch (what the pass writes is seen by the next).
func (f *fixture) sync() {
	f.t.Helper()
	_, _, keys, err := f.c.rebuild(f.ctx)
	if err != nil {
		f.t.Fatal(err)
	}
	for _, k := range keys {
		if err := f.c.Sync(f.ctx, k); err != nil {
			f.t.Fatal(err)
		}
	}
}

func ref(k objects.Kind, obj objects.Object, block bool) *corev1.OwnerReference {
	md := obj.GetMetadata()
	return &corev1.OwnerReference{ApiVersion: k.APIVersion(), Kind: k.Name, Name: md.GetName(), Uid: md.GetUid(), Controller: true, BlockOwnerDeletion: block}
}

// TestOrphan: an owner marked with the orphan finalizer loses it (and so
// goes) after each dependent — of any kind — lost its reference to it;
// the dependents stay, with their other owners.
func TestOrphan(t *testing.T) {
	f := newFixture(t)
	rs := f.create(objects.ReplicaSets, "a", "web")
	other := f.create(objects.ConfigMaps, "a", "keeper")
	f.create(objects.Pods, "a", "web-1", ref(objects.ReplicaSets, rs, true))
	f.create(objects.ConfigMaps, "a", "web-cm", ref(objects.ReplicaSets, rs, true), ref(objects.ConfigMaps, other, false))
	f.mark(objects.ReplicaSets, rs, stage.FinalizerOrphan)
	f.sync()
	if f.get(objects.ReplicaSets, "a", "web") != nil {
		t.Fatal("the orphaning ReplicaSet is still there")
	}
	pod := f.get(objects.Pods, "a", "web-1")
	if pod == nil || pod.GetMetadata().GetDeletionTimestamp() != nil || len(pod.GetMetadata().GetOwnerReferences()) != 0 {
		t.Fatalf("pod after orphaning: %v", pod)
	}
	cm := f.get(objects.ConfigMaps, "a", "web-cm")
	if cm == nil || len(cm.GetMetadata().GetOwnerReferences()) != 1 || cm.GetMetadata().GetOwnerReferences()[0].GetName() != "keeper" {
		t.Fatalf("configmap after orphaning: %v", cm)
	}
}

// TestForeground: an owner marked foregroundDeletion has its dependents
// deleted and stays until the ones blocking it (blockOwnerDeletion) are
// gone; a dependent with another live owner only loses the reference.
func TestForeground(t *testing.T) {
	f := newFixture(t)
	rs := f.create(objects.ReplicaSets, "a", "web")
	keeper := f.create(objects.ReplicationControllers, "a", "keeper")
	f.create(objects.Pods, "a", "web-1", ref(objects.ReplicaSets, rs, true))
	f.create(objects.Pods, "a", "shared", ref(objects.ReplicaSets, rs, true), ref(objects.ReplicationControllers, keeper, false))
	f.create(objects.ConfigMaps, "a", "loose", ref(objects.ReplicaSets, rs, false))
	f.mark(objects.ReplicaSets, rs, stage.FinalizerForeground)
	f.sync()
	owner := f.get(objects.ReplicaSets, "a", "web")
	if owner == nil || !slices.Contains(owner.GetMetadata().GetFinalizers(), stage.FinalizerForeground) {
		t.Fatalf("the owner went before its blocking pod: %v", owner)
	}
	if p := f.get(objects.Pods, "a", "web-1"); p == nil || p.GetMetadata().GetDeletionTimestamp() == nil {
		t.Fatalf("the blocking pod is not being deleted: %v", p)
	}
	if f.get(objects.ConfigMaps, "a", "loose") != nil {
		t.Fatal("the non-blocking ConfigMap is still there")
	}
	shared := f.get(objects.Pods, "a", "shared")
	if shared == nil || shared.GetMetadata().GetDeletionTimestamp() != nil || len(shared.GetMetadata().GetOwnerReferences()) != 1 ||
		shared.GetMetadata().GetOwnerReferences()[0].GetName() != "keeper" {
		t.Fatalf("the pod with a live owner: %v", shared)
	}
	// Again: nothing changes while the pod terminates.
	f.sync()
	if f.get(objects.ReplicaSets, "a", "web") == nil {
		t.Fatal("the owner went while its pod terminates")
	}
	// Its node is done: the pod goes, and so does the owner.
	if _, err := f.st.Delete(f.ctx, objects.Pods, "a", "web-1", 0); err != nil {
		t.Fatal(err)
	}
	f.sync()
	if o := f.get(objects.ReplicaSets, "a", "web"); o != nil {
		t.Fatalf("the owner stays with no dependent left: %v", o)
	}
}

// TestBackgroundEveryKind: dependents of any kind — a ConfigMap, a Secret,
// a custom resource — whose owners are gone are deleted, whether the
// owner was a ConfigMap, a custom resource or a cluster-scoped object.
func TestBackgroundEveryKind(t *testing.T) {
	crKind, err := objects.Replace(objects.GenericKind{Group: "gc.example.com", Version: "v1", Kind: "Widget", Resource: "widgets",
		Namespaced: true, Prefix: objects.CustomResourcePrefix("gc.example.com", "widgets")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { objects.Unregister("gc.example.com", "Widget") })
	f := newFixture(t)
	cr := f.create(crKind, "a", "w")
	cm := f.create(objects.ConfigMaps, "a", "owner")
	pv := f.create(objects.PersistentVolumes, "", "pv")
	f.create(objects.ConfigMaps, "a", "of-cr", ref(crKind, cr, false))
	f.create(objects.Secrets, "a", "of-cm", ref(objects.ConfigMaps, cm, false))
	f.create(crKind, "a", "of-pv", ref(objects.PersistentVolumes, pv, false))
	f.create(objects.ConfigMaps, "a", "unknown-owner", &corev1.OwnerReference{ApiVersion: "nowhere.example.com/v1", Kind: "Thing", Name: "x", Uid: "ux"})
	f.sync()
	for _, o := range []struct {
		k    objects.Kind
		name string
	}{{objects.ConfigMaps, "of-cr"}, {objects.Secrets, "of-cm"}, {crKind, "of-pv"}} {
		if f.get(o.k, "a", o.name) == nil {
			t.Fatalf("%s %s deleted while its owner exists", o.k.Name, o.name)
		}
	}
	for _, del := range []struct {
		k    objects.Kind
		ns   string
		name string
	}{{crKind, "a", "w"}, {objects.ConfigMaps, "a", "owner"}, {objects.PersistentVolumes, "", "pv"}} {
		if _, err := f.st.Delete(f.ctx, del.k, del.ns, del.name, 0); err != nil {
			t.Fatal(err)
		}
	}
	f.sync()
	for _, o := range []struct {
		k    objects.Kind
		name string
	}{{objects.ConfigMaps, "of-cr"}, {objects.Secrets, "of-cm"}, {crKind, "of-pv"}} {
		if got := f.get(o.k, "a", o.name); got != nil {
			t.Errorf("%s %s is still there after its owner went", o.k.Name, o.name)
		}
	}
	if f.get(objects.ConfigMaps, "a", "unknown-owner") == nil {
		t.Error("a dependent of an owner of an unknown kind was deleted")
	}
}

// TestClusterScopedOwnerOrphan: a cluster-scoped owner marked orphan
// releases its dependents in every namespace before it goes.
func TestClusterScopedOwnerOrphan(t *testing.T) {
	f := newFixture(t)
	pv := f.create(objects.PersistentVolumes, "", "pv")
	f.create(objects.ConfigMaps, "a", "one", ref(objects.PersistentVolumes, pv, true))
	f.create(objects.ConfigMaps, "b", "two", ref(objects.PersistentVolumes, pv, true))
	f.mark(objects.PersistentVolumes, pv, stage.FinalizerOrphan)
	f.sync()
	if f.get(objects.PersistentVolumes, "", "pv") != nil {
		t.Fatal("the orphaning PersistentVolume is still there")
	}
	for _, ns := range []string{"a", "b"} {
		for _, cm := range []string{"one", "two"} {
			if o := f.get(objects.ConfigMaps, ns, cm); o != nil && len(o.GetMetadata().GetOwnerReferences()) != 0 {
				t.Errorf("%s/%s keeps its reference: %v", ns, cm, o)
			}
		}
	}
	if f.get(objects.ConfigMaps, "a", "one") == nil || f.get(objects.ConfigMaps, "b", "two") == nil {
		t.Fatal("an orphaned dependent was deleted")
	}
}

// TestIdempotent: a second sync of the same state changes nothing, and a
// sync of an owner already gone is fine.
func TestIdempotent(t *testing.T) {
	f := newFixture(t)
	rs := f.create(objects.ReplicaSets, "a", "web")
	f.create(objects.Pods, "a", "web-1", ref(objects.ReplicaSets, rs, true))
	f.mark(objects.ReplicaSets, rs, stage.FinalizerOrphan)
	f.sync()
	rev := f.get(objects.Pods, "a", "web-1").GetMetadata().GetResourceVersion()
	f.sync()
	if got := f.get(objects.Pods, "a", "web-1").GetMetadata().GetResourceVersion(); got != rev {
		t.Fatalf("a second sync wrote the pod again: %s → %s", rev, got)
	}
}

// TestServiceNotCollected: a Service whose owner is gone is left (its
// ClusterIP is released only by the api stage's deletion); one blocking a
// foreground owner is released instead, so the owner goes.
func TestServiceNotCollected(t *testing.T) {
	f := newFixture(t)
	gone := f.create(objects.ConfigMaps, "a", "gone")
	fg := f.create(objects.ConfigMaps, "a", "fg")
	f.create(objects.Services, "a", "orphan-svc", ref(objects.ConfigMaps, gone, true))
	f.create(objects.Services, "a", "blocking-svc", ref(objects.ConfigMaps, fg, true))
	if _, err := f.st.Delete(f.ctx, objects.ConfigMaps, "a", "gone", 0); err != nil {
		t.Fatal(err)
	}
	f.mark(objects.ConfigMaps, fg, stage.FinalizerForeground)
	f.sync()
	if f.get(objects.Services, "a", "orphan-svc") == nil {
		t.Fatal("the collector deleted a Service")
	}
	if svc := f.get(objects.Services, "a", "blocking-svc"); svc == nil || len(svc.GetMetadata().GetOwnerReferences()) != 0 {
		t.Fatalf("the blocking Service: %v", svc)
	}
	if f.get(objects.ConfigMaps, "a", "fg") != nil {
		t.Fatal("the foreground owner is held back by a Service")
	}
}

// TestForegroundTransitive: a foreground owner's dependent that has
// dependents of its own is deleted in the foreground too, so the owner
// waits for the whole tree (a Deployment for its ReplicaSet's pods).
func TestForegroundTransitive(t *testing.T) {
	f := newFixture(t)
	d := f.create(objects.Deployments, "a", "web")
	rs := f.create(objects.ReplicaSets, "a", "web-1", ref(objects.Deployments, d, true))
	f.create(objects.Pods, "a", "web-1-a", ref(objects.ReplicaSets, rs, true))
	f.mark(objects.Deployments, d, stage.FinalizerForeground)
	f.sync()
	got := f.get(objects.ReplicaSets, "a", "web-1")
	if got == nil || gcFinalizer(got.GetMetadata()) != stage.FinalizerForeground {
		t.Fatalf("the ReplicaSet is not deleted in the foreground: %v", got)
	}
	f.sync() // the ReplicaSet marked: its pod is deleted
	if p := f.get(objects.Pods, "a", "web-1-a"); p == nil || p.GetMetadata().GetDeletionTimestamp() == nil {
		t.Fatalf("the pod is not being deleted: %v", p)
	}
	if f.get(objects.Deployments, "a", "web") == nil || f.get(objects.ReplicaSets, "a", "web-1") == nil {
		t.Fatal("an owner went before the pod")
	}
	if _, err := f.st.Delete(f.ctx, objects.Pods, "a", "web-1-a", 0); err != nil {
		t.Fatal(err)
	}
	f.sync()
	f.sync()
	if f.get(objects.ReplicaSets, "a", "web-1") != nil || f.get(objects.Deployments, "a", "web") != nil {
		t.Fatal("the owners stay with no pod left")
	}
}

// TestForegroundCycle: two objects owning each other, blocking, one
// deleted in the foreground: the references are made non-blocking and
// both go, instead of waiting for each other forever.
func TestForegroundCycle(t *testing.T) {
	f := newFixture(t)
	a := f.create(objects.ConfigMaps, "a", "a")
	b := f.create(objects.ConfigMaps, "a", "b", ref(objects.ConfigMaps, a, true))
	a.GetMetadata().OwnerReferences = []*corev1.OwnerReference{ref(objects.ConfigMaps, b, true)}
	if _, err := f.st.Update(f.ctx, a); err != nil {
		t.Fatal(err)
	}
	f.mark(objects.ConfigMaps, a, stage.FinalizerForeground)
	for i := 0; i < 3; i++ {
		f.sync()
	}
	if f.get(objects.ConfigMaps, "a", "a") != nil || f.get(objects.ConfigMaps, "a", "b") != nil {
		t.Fatalf("the cycle is stuck: %v %v", f.get(objects.ConfigMaps, "a", "a"), f.get(objects.ConfigMaps, "a", "b"))
	}
}

// TestPodCircle: three pods owning each other in a circle, each
// reference blocking (the conformance test "should not be blocked by
// dependency circle"): once one is deleted, the collector deletes the
// next, and so on round the circle until none is left. Pods take no
// collector finalizers, so the first goes as any pod does.
func TestPodCircle(t *testing.T) {
	f := newFixture(t)
	p1 := f.create(objects.Pods, "a", "pod1")
	p2 := f.create(objects.Pods, "a", "pod2", ref(objects.Pods, p1, true))
	p3 := f.create(objects.Pods, "a", "pod3", ref(objects.Pods, p2, true))
	p1 = f.get(objects.Pods, "a", "pod1")
	p1.GetMetadata().OwnerReferences = []*corev1.OwnerReference{ref(objects.Pods, p3, true)}
	if _, err := f.st.Update(f.ctx, p1); err != nil {
		t.Fatal(err)
	}
	if _, err := f.st.Delete(f.ctx, objects.Pods, "a", "pod1", 0); err != nil {
		t.Fatal(err)
	}
	for round := 0; round < 4; round++ {
		f.sync()
		// Their node is done with the pods being deleted.
		for _, name := range []string{"pod2", "pod3"} {
			if p := f.get(objects.Pods, "a", name); p != nil && p.GetMetadata().GetDeletionTimestamp() != nil {
				if _, err := f.st.Delete(f.ctx, objects.Pods, "a", name, 0); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	for _, name := range []string{"pod2", "pod3"} {
		if p := f.get(objects.Pods, "a", name); p != nil {
			t.Errorf("%s is left: %v", name, p.GetMetadata())
		}
	}
}

// TestForegroundKeepsPodsWithLiveOwner: an owner deleted in the
// foreground whose pods half have a second, live owner (not a controller,
// not blocking; the conformance test "should not delete dependents that
// have both valid owner and owner that's waiting for dependents to be
// deleted"): those keep living with only the live owner's reference, the
// others are deleted, and the owner goes once they are.
func TestForegroundKeepsPodsWithLiveOwner(t *testing.T) {
	f := newFixture(t)
	rc1 := f.create(objects.ReplicationControllers, "a", "to-be-deleted")
	rc2 := f.create(objects.ReplicationControllers, "a", "to-stay")
	const n = 6
	for i := range n {
		refs := []*corev1.OwnerReference{ref(objects.ReplicationControllers, rc1, true)}
		if i%2 == 0 {
			second := ref(objects.ReplicationControllers, rc2, false)
			second.Controller = false
			refs = append(refs, second)
		}
		f.create(objects.Pods, "a", fmt.Sprintf("p%d", i), refs...)
	}
	f.mark(objects.ReplicationControllers, rc1, stage.FinalizerForeground)
	for round := 0; round < 3; round++ {
		f.sync()
		for i := range n {
			name := fmt.Sprintf("p%d", i)
			if p := f.get(objects.Pods, "a", name); p != nil && p.GetMetadata().GetDeletionTimestamp() != nil {
				if _, err := f.st.Delete(f.ctx, objects.Pods, "a", name, 0); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	if o := f.get(objects.ReplicationControllers, "a", "to-be-deleted"); o != nil {
		t.Fatalf("the owner stays: %v", o.GetMetadata())
	}
	for i := range n {
		p := f.get(objects.Pods, "a", fmt.Sprintf("p%d", i))
		switch {
		case i%2 == 1 && p != nil:
			t.Errorf("p%d (only the deleted owner) is left", i)
		case i%2 == 0 && (p == nil || p.GetMetadata().GetDeletionTimestamp() != nil):
			t.Errorf("p%d (a live owner too) was deleted: %v", i, p)
		case i%2 == 0 && (len(p.GetMetadata().GetOwnerReferences()) != 1 || p.GetMetadata().GetOwnerReferences()[0].GetName() != "to-stay"):
			t.Errorf("p%d keeps references %v, want only to-stay's", i, p.GetMetadata().GetOwnerReferences())
		}
	}
}

// TestBackgroundAcrossNamespaces: a pass judges every namespace: a
// dependent whose only owner is gone is deleted, one with a live owner
// left loses the reference to the gone one.
func TestBackgroundAcrossNamespaces(t *testing.T) {
	f := newFixture(t)
	for _, ns := range []string{"a", "b"} {
		owner := f.create(objects.ConfigMaps, ns, "owner")
		f.create(objects.Secrets, ns, "dep", ref(objects.ConfigMaps, owner, false))
		f.create(objects.Secrets, ns, "kept", ref(objects.ConfigMaps, owner, false))
		if _, err := f.st.Delete(f.ctx, objects.ConfigMaps, ns, "owner", 0); err != nil {
			t.Fatal(err)
		}
		live := f.create(objects.ConfigMaps, ns, "live")
		kept := f.get(objects.Secrets, ns, "kept")
		kept.GetMetadata().OwnerReferences = append(kept.GetMetadata().OwnerReferences, ref(objects.ConfigMaps, live, false))
		if _, err := f.st.Update(f.ctx, kept); err != nil {
			t.Fatal(err)
		}
	}
	f.sync()
	for _, ns := range []string{"a", "b"} {
		if f.get(objects.Secrets, ns, "dep") != nil {
			t.Errorf("%s/dep is still there", ns)
		}
		if k := f.get(objects.Secrets, ns, "kept"); k == nil || len(k.GetMetadata().GetOwnerReferences()) != 1 {
			t.Errorf("%s/kept: %v", ns, k)
		}
	}
}

// TestDeletionsAndResyncsListNothing: once its index is listed, the
// collector reads no list of the store — not when pods of a big
// namespace are deleted one by one (each once made it list the whole
// namespace), not on Reconcile (each once listed every namespace) — and
// still collects a dependent whose owner is gone.
func TestDeletionsAndResyncsListNothing(t *testing.T) {
	f := newFixture(t)
	rs := f.create(objects.ReplicaSets, "a", "web")
	const n = 40
	for i := range n {
		f.create(objects.Pods, "a", fmt.Sprintf("web-%d", i), ref(objects.ReplicaSets, rs, true))
	}
	f.start()
	lists := f.countLists()
	for i := range n / 2 {
		if _, err := f.st.Delete(f.ctx, objects.Pods, "a", fmt.Sprintf("web-%d", i), 0); err != nil {
			t.Fatal(err)
		}
		if i%5 == 0 {
			if err := f.c.Reconcile(f.ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	// A dependent whose owner is gone, after all that: once it is
	// collected, the collector has seen every change before it.
	f.create(objects.ConfigMaps, "a", "sentinel", &corev1.OwnerReference{ApiVersion: "v1", Kind: "ConfigMap", Name: "nobody", Uid: "uid-gone"})
	f.waitFor("the sentinel is collected", func() bool { return f.get(objects.ConfigMaps, "a", "sentinel") == nil })
	if got := lists.Load(); got != 0 {
		t.Errorf("the collector listed the store %d times after its index was listed, want 0", got)
	}
	if f.get(objects.ReplicaSets, "a", "web") == nil || f.get(objects.Pods, "a", fmt.Sprintf("web-%d", n-1)) == nil {
		t.Fatal("the ReplicaSet or a pod of it was deleted")
	}
}

// TestDependentOfGoneOwnerCollectedAtOnce: a dependent made after its
// owner is gone is collected from the watch alone, with no Reconcile
// (kube's virtual node: an owner not in the graph is read).
func TestDependentOfGoneOwnerCollectedAtOnce(t *testing.T) {
	f := newFixture(t)
	owner := f.create(objects.ConfigMaps, "a", "owner")
	if _, err := f.st.Delete(f.ctx, objects.ConfigMaps, "a", "owner", 0); err != nil {
		t.Fatal(err)
	}
	f.start() // after the owner's deletion: only the dependent's creation is watched
	f.create(objects.Secrets, "a", "late", ref(objects.ConfigMaps, owner, false))
	f.waitFor("the late dependent is collected", func() bool { return f.get(objects.Secrets, "a", "late") == nil })
}

// TestWatchedCascade: with the watch alone, a Deployment deleted in the
// foreground goes after its ReplicaSet and that one's pods (their node
// done with them), and a ReplicaSet deleted in the background takes its
// pods with it.
func TestWatchedCascade(t *testing.T) {
	f := newFixture(t)
	d := f.create(objects.Deployments, "a", "web")
	rs := f.create(objects.ReplicaSets, "a", "web-1", ref(objects.Deployments, d, true))
	bg := f.create(objects.ReplicaSets, "a", "bg")
	for i := range 3 {
		f.create(objects.Pods, "a", fmt.Sprintf("web-1-%d", i), ref(objects.ReplicaSets, rs, true))
		f.create(objects.Pods, "a", fmt.Sprintf("bg-%d", i), ref(objects.ReplicaSets, bg, true))
	}
	f.start()
	f.mark(objects.Deployments, d, stage.FinalizerForeground)
	if _, err := f.st.Delete(f.ctx, objects.ReplicaSets, "a", "bg", 0); err != nil {
		t.Fatal(err)
	}
	// The node agent: a pod marked for deletion goes.
	f.waitFor("every pod is deleted", func() bool {
		pods, _, err := f.st.ListKind(f.ctx, objects.Pods, "a")
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range pods {
			if p.GetMetadata().GetDeletionTimestamp() != nil {
				if _, err := f.st.Delete(f.ctx, objects.Pods, "a", p.GetMetadata().GetName(), 0); err != nil && !errors.Is(err, raftstore.ErrNotFound) {
					t.Fatal(err)
				}
			}
		}
		return len(pods) == 0
	})
	f.waitFor("the Deployment and its ReplicaSet go", func() bool {
		return f.get(objects.ReplicaSets, "a", "web-1") == nil && f.get(objects.Deployments, "a", "web") == nil
	})
}

// TestStaleIndexKeepsLiveOwnersDependent: an index behind the store — it
// still holds an owner deleted and made again with a new uid, and the
// dependent's reference to the old one — makes the collector look at the
// dependent, never delete it: the dependent and its owner are read
// afresh, and the dependent names the live owner.
func TestStaleIndexKeepsLiveOwnersDependent(t *testing.T) {
	f := newFixture(t)
	old := f.create(objects.ConfigMaps, "a", "owner")
	f.create(objects.Secrets, "a", "dep", ref(objects.ConfigMaps, old, true))
	x, _, _, err := f.c.rebuild(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Behind the index's back: the owner is made again, and the
	// dependent now names the new one.
	delRev, err := f.st.Delete(f.ctx, objects.ConfigMaps, "a", "owner", 0)
	if err != nil {
		t.Fatal(err)
	}
	live := objects.ConfigMaps.New()
	md := objects.Meta(live)
	md.Namespace, md.Name, md.Uid = "a", "owner", "uid-owner-2"
	if _, err := f.st.Create(f.ctx, live); err != nil {
		t.Fatal(err)
	}
	dep := f.get(objects.Secrets, "a", "dep")
	dep.GetMetadata().OwnerReferences = []*corev1.OwnerReference{ref(objects.ConfigMaps, live, true)}
	if _, err := f.st.Update(f.ctx, dep); err != nil {
		t.Fatal(err)
	}
	// The index learns only of the old owner's deletion: its dependent, as
	// the index holds it, is to be synced.
	keys := x.apply(kindTab(), raftstore.WatchEvent{Type: raftstore.EventDelete, KV: &raftstore.KV{Key: objects.ConfigMaps.Key("a", "owner")}, Revision: delRev})
	if !slices.Contains(keys, objects.Secrets.Key("a", "dep")) {
		t.Fatalf("the old owner's deletion queued %v, want its dependent", keys)
	}
	for _, k := range keys {
		if err := f.c.Sync(f.ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	got := f.get(objects.Secrets, "a", "dep")
	if got == nil || got.GetMetadata().GetDeletionTimestamp() != nil || len(got.GetMetadata().GetOwnerReferences()) != 1 {
		t.Fatalf("the live owner's dependent: %v", got)
	}
}

// TestIndexEntry: the index keeps of an object its uid, owner
// references, deletion and collector finalizers, decoded from the
// metadata alone.
func TestIndexEntry(t *testing.T) {
	f := newFixture(t)
	rs := f.create(objects.ReplicaSets, "a", "web")
	p := f.create(objects.Pods, "a", "web-1", ref(objects.ReplicaSets, rs, true))
	f.mark(objects.Pods, p, stage.FinalizerForeground)
	kv, err := f.kv.Get(f.ctx, objects.Pods.Key("a", "web-1"))
	if err != nil {
		t.Fatal(err)
	}
	x := newIndex()
	ki, _ := kindTab().kindOfKey(kv.Key)
	e, err := x.parse(kv, ki)
	if err != nil {
		t.Fatal(err)
	}
	want := []ownerRef{{apiVersion: "apps/v1", kind: "ReplicaSet", name: "web", uid: "uid-ReplicaSet-web", block: true}}
	if e.uid != "uid-Pod-web-1" || !slices.Equal(e.refs, want) || e.flags != deleting|foregroundFin || e.rev != kv.ModRevision || e.namespace() != "a" {
		t.Fatalf("entry %+v", e)
	}
}

// TestKindRegisteredAfterList: the objects of a custom resource kind the
// process registers after the index was listed (its catalog starts
// beside the collector) are listed in once the kind is there, so that a
// dependent of a deleted custom resource is collected.
func TestKindRegisteredAfterList(t *testing.T) {
	gk := objects.GenericKind{Group: "late.example.com", Version: "v1", Kind: "Gadget", Resource: "gadgets",
		Namespaced: true, Prefix: objects.CustomResourcePrefix("late.example.com", "gadgets")}
	crKind, err := objects.Replace(gk)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { objects.Unregister("late.example.com", "Gadget") })
	f := newFixture(t)
	cr := f.create(crKind, "a", "g")
	f.create(objects.ConfigMaps, "a", "of-gadget", ref(crKind, cr, false))
	objects.Unregister("late.example.com", "Gadget")
	f.start()
	if _, err := objects.Replace(gk); err != nil {
		t.Fatal(err)
	}
	f.create(objects.ConfigMaps, "a", "trigger") // a write: the collector looks at the registry
	f.waitFor("the custom resource is in the index", func() bool {
		x := f.c.idx.Load()
		x.mu.RLock()
		defer x.mu.RUnlock()
		return x.byKey[crKind.Key("a", "g")] != nil
	})
	if _, err := f.st.Delete(f.ctx, crKind, "a", "g", 0); err != nil {
		t.Fatal(err)
	}
	f.waitFor("the custom resource's dependent is collected", func() bool { return f.get(objects.ConfigMaps, "a", "of-gadget") == nil })
}

// TestWatchExceptLeavesOutOnlyWhatIsNotRead: the collector's watch leaves
// out Events, NodeAllocations and podflow's own records, and never a
// prefix under which a kind it reads is stored.
func TestWatchExceptLeavesOutOnlyWhatIsNotRead(t *testing.T) {
	t.Parallel()
	tab := kindTab()
	except := watchExcept(tab)
	for _, want := range []string{objects.Events.Prefix(""), objects.NodeAllocations.Prefix(""), recordsPrefix} {
		if !slices.Contains(except, want) {
			t.Errorf("watchExcept = %q, want it to leave out %s", except, want)
		}
	}
	for _, ki := range tab.all {
		for _, p := range except {
			if ki.scanned && strings.HasPrefix(ki.prefix, p) {
				t.Errorf("watchExcept leaves out %s, where %s (read by the collector) is stored", p, ki.kind.Qualified())
			}
		}
	}
}
