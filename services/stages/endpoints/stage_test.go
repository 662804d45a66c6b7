package endpoints

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/eventsv1"
	"github.com/podflow/podflow/proto/podrules"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/objects/objectstest"
	"github.com/podflow/podflow/services/stage"
	"github.com/podflow/podflow/services/stage/stagetest"
)

type fixture struct {
	s   *Stage
	env stage.Env
	pub *stagetest.Publisher
	kv  *objectstest.KV
}

// newFixture stores objs and starts an endpoints stage over the fakes.
func newFixture(t *testing.T, objs ...objects.Object) *fixture {
	t.Helper()
	env, pub, kv := stagetest.NewEnv("endpoints")
	ctx := context.Background()
	for _, o := range objs {
		if _, err := env.Store.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	s, err := NewStage(env)
	if err != nil {
		t.Fatal(err)
	}
	stagetest.Start(t, s.Start)
	return &fixture{s: s, env: env, pub: pub, kv: kv}
}

// reported marks pod's status as applied up to seq, as the status stage
// does when it writes a node's report.
func reported(p *corev1.Pod, seq int64) *corev1.Pod {
	podrules.SetAppliedSeq(p, seq)
	return p
}

// setPod rewrites the stored pod ns/name with change, as the status stage
// writes a node's report (reported: the report's seq applied).
func setPod(t *testing.T, f *fixture, name string, change func(*corev1.Pod)) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	p, err := objects.Get[*corev1.Pod](ctx, f.env.Store, "default", name)
	if err != nil {
		t.Fatal(err)
	}
	change(p)
	if _, err := f.env.Store.Update(ctx, p); err != nil {
		t.Fatal(err)
	}
	return p
}

func setReady(ready bool, seq int64) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Status.Conditions[0].Status = map[bool]string{true: "True", false: "False"}[ready]
		reported(p, seq)
	}
}

// eventually waits for ok: liveness, not speed (the pod watch's event
// reaches the worker, whose sync writes the slice).
func eventually(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !ok(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("never: %s", what)
		}
	}
}

func slice(t *testing.T, f *fixture) *corev1.EndpointSlice {
	t.Helper()
	sl, err := objects.Get[*corev1.EndpointSlice](context.Background(), f.env.Store, "default", SliceName("web"))
	if err != nil {
		t.Fatalf("slice: %v", err)
	}
	return sl
}

// TestReadyPodWatched: a pod that becomes Ready — its status written to
// the store, no bus event published to the stage — joins its Service's
// slice, announced (EndpointsUpdated) as the pod's, caused by the
// PodReady its node's report carried; becoming NotReady takes it out
// again.
func TestReadyPodWatched(t *testing.T) {
	app := map[string]string{"app": "web"}
	http := &corev1.ContainerPort{Name: "http", ContainerPort: 8080}
	port := &corev1.ServicePort{Port: 80, TargetPort: &corev1.IntOrString{Value: &corev1.IntOrString_StrVal{StrVal: "http"}}}
	a := reported(pod("a", "10.0.0.1", app, false, http), 1)
	a.Metadata.Annotations[stage.AnnotationRequestID] = "req-a"
	b := reported(pod("b", "10.0.0.2", app, false, http), 1)
	c := reported(pod("c", "10.0.0.3", map[string]string{"app": "db"}, true, http), 1)
	f := newFixture(t, svc(app, port), a, b, c)
	ctx := context.Background()
	if err := f.s.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if !sliceEmpty(ctx, f) {
		t.Fatalf("slice %v before any pod is Ready, want empty", sliceAddrs(ctx, f))
	}

	setPod(t, f, "a", setReady(true, 3))
	eventually(t, "a Ready pod joins the slice", func() bool { return slices.Equal(sliceAddrs(ctx, f), []string{"10.0.0.1"}) })
	sl := slice(t, f)
	if len(sl.GetPorts()) != 1 || sl.GetPorts()[0].GetPort() != 8080 {
		t.Errorf("slice ports %v, want the named targetPort resolved to 8080", sl.GetPorts())
	}
	if sl.GetMetadata().GetLabels()[LabelServiceName] != "web" || sl.GetMetadata().GetLabels()[LabelManagedBy] != ManagedBy {
		t.Errorf("slice labels %v", sl.GetMetadata().GetLabels())
	}
	eventually(t, "the join announced", func() bool { return len(f.pub.Events()) == 1 })
	e := f.pub.Events()[0]
	if u := e.GetEndpointsUpdated(); !u.GetAdded() || u.GetReadyEndpoints() != 1 || u.GetService() != "web" || e.GetPodUid() != "a-uid" ||
		e.GetPodName() != "a" || e.GetRequestId() != "req-a" || e.GetStage() != "endpoints" {
		t.Fatalf("published %v, want EndpointsUpdated of pod a: added, 1 ready", e)
	}
	if e.GetGeneration() != sl.GetMetadata().GetGeneration() {
		t.Errorf("EndpointsUpdated generation %d, want the slice's %d", e.GetGeneration(), sl.GetMetadata().GetGeneration())
	}
	ready := &eventsv1.Envelope{PodUid: "a-uid", Generation: 3, Attempt: 1, Payload: &eventsv1.Envelope_PodReady{PodReady: &eventsv1.PodReady{}}}
	if e.GetCausedBy() != eventsv1.EventID(ready) || e.GetHandledStart() == nil || e.GetHandledEnd() == nil {
		t.Errorf("caused by %q (handled %v..%v), want the report's PodReady %q", e.GetCausedBy(), e.GetHandledStart(), e.GetHandledEnd(), eventsv1.EventID(ready))
	}

	setPod(t, f, "a", setReady(false, 4))
	eventually(t, "a NotReady pod leaves the slice", func() bool { return sliceEmpty(ctx, f) })
	after := slice(t, f)
	if after.GetMetadata().GetGeneration() != sl.GetMetadata().GetGeneration()+1 || after.GetMetadata().GetUid() != sl.GetMetadata().GetUid() {
		t.Errorf("updated slice generation %d uid %q, want %d and the same uid", after.GetMetadata().GetGeneration(), after.GetMetadata().GetUid(), sl.GetMetadata().GetGeneration()+1)
	}
	eventually(t, "the leave announced", func() bool { return len(f.pub.Events()) == 2 })
	left := f.pub.Events()[1]
	notReady := &eventsv1.Envelope{PodUid: "a-uid", Generation: 4, Attempt: 1, Payload: &eventsv1.Envelope_PodNotReady{PodNotReady: &eventsv1.PodNotReady{}}}
	if left.GetEndpointsUpdated().GetAdded() || left.GetPodUid() != "a-uid" || left.GetCausedBy() != eventsv1.EventID(notReady) {
		t.Errorf("published %v, want a second EndpointsUpdated removing a, caused by its PodNotReady", left)
	}
	for _, typ := range f.pub.Types() {
		if typ != "EndpointsUpdated" {
			t.Errorf("published %s; the stage publishes only EndpointsUpdated", typ)
		}
	}
}

// TestDeletedPodWatched: a pod being deleted (deletionTimestamp) leaves
// the slice; a pod deleted from the store while still listed leaves it
// too, both announced as the pod's.
func TestDeletedPodWatched(t *testing.T) {
	app := map[string]string{"app": "web"}
	a := reported(pod("a", "10.0.0.1", app, true, nil), 2)
	b := reported(pod("b", "10.0.0.2", app, true, nil), 2)
	f := newFixture(t, svc(app, &corev1.ServicePort{Port: 80}), a, b)
	ctx := context.Background()
	if err := f.s.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if got := sliceAddrs(ctx, f); !slices.Equal(got, []string{"10.0.0.1", "10.0.0.2"}) {
		t.Fatalf("slice %v, want a and b", got)
	}
	setPod(t, f, "a", func(p *corev1.Pod) { p.Metadata.DeletionTimestamp = timestamppb.Now() })
	eventually(t, "a terminating pod leaves", func() bool { return slices.Equal(sliceAddrs(ctx, f), []string{"10.0.0.2"}) })
	if _, err := f.env.Store.Delete(ctx, objects.Pods, "default", "b", 0); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a deleted pod leaves", func() bool { return sliceEmpty(ctx, f) })
	eventually(t, "both announced", func() bool { return len(f.pub.Events()) == 2 })
	for i, uid := range []string{"a-uid", "b-uid"} {
		if e := f.pub.Events()[i]; e.GetEndpointsUpdated().GetAdded() || e.GetPodUid() != uid || e.GetCausedBy() != "" {
			t.Errorf("announcement %d: %v, want %s leaving, caused by no readiness event", i, e, uid)
		}
	}
}

// TestSyncRetriesConflicts: a concurrent writer of the slice between the
// read and the write makes the sync reread and write on top of it.
func TestSyncRetriesConflicts(t *testing.T) {
	app := map[string]string{"app": "web"}
	a := reported(pod("a", "10.0.0.1", app, true, nil), 1)
	f := newFixture(t, svc(app, &corev1.ServicePort{Port: 80}), a)
	ctx := context.Background()
	var raced atomic.Int32
	f.kv.Hook(func(method, key string) error {
		if method == "Create" && key == objects.EndpointSlices.Key("default", "web") && raced.Add(1) == 1 {
			_, err := f.env.Store.Create(ctx, &corev1.EndpointSlice{Metadata: &corev1.ObjectMeta{Namespace: "default", Name: "web", Uid: "racer"}})
			return err
		}
		return nil
	})
	if err := f.s.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	sl := slice(t, f)
	if got := addrs(sl); !slices.Equal(got, []string{"10.0.0.1"}) || sl.GetMetadata().GetUid() != "racer" {
		t.Errorf("slice %v uid %q, want a's address written over the racer's slice", got, sl.GetMetadata().GetUid())
	}
}

// TestReconcileRemovesOrphans: Reconcile writes every Service's slice and
// deletes the managed slices of Services that are gone, leaving
// hand-made slices alone.
func TestReconcileRemovesOrphans(t *testing.T) {
	app := map[string]string{"app": "web"}
	managed := map[string]string{LabelManagedBy: ManagedBy, LabelServiceName: "gone"}
	f := newFixture(t, svc(app, &corev1.ServicePort{Port: 80}), reported(pod("a", "10.0.0.1", app, true, nil), 1),
		&corev1.EndpointSlice{Metadata: &corev1.ObjectMeta{Namespace: "default", Name: "gone", Labels: managed}},
		&corev1.EndpointSlice{Metadata: &corev1.ObjectMeta{Namespace: "default", Name: "by-hand", Labels: map[string]string{LabelServiceName: "gone"}}},
		&corev1.EndpointSlice{Metadata: &corev1.ObjectMeta{Namespace: "default", Name: "legacy",
			Labels: map[string]string{LabelManagedBy: LegacyManagedBy, LabelServiceName: "also-gone"}}},
	)
	ctx := context.Background()
	if err := f.s.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if got := addrs(slice(t, f)); !slices.Equal(got, []string{"10.0.0.1"}) {
		t.Errorf("web's slice %v, want a", got)
	}
	if _, err := objects.Get[*corev1.EndpointSlice](ctx, f.env.Store, "default", "gone"); !errors.Is(err, raftstore.ErrNotFound) {
		t.Errorf("orphaned managed slice: %v, want it deleted", err)
	}
	if _, err := objects.Get[*corev1.EndpointSlice](ctx, f.env.Store, "default", "legacy"); !errors.Is(err, raftstore.ErrNotFound) {
		t.Errorf("orphaned slice under podflow's former manager label: %v, want it deleted", err)
	}
	if _, err := objects.Get[*corev1.EndpointSlice](ctx, f.env.Store, "default", "by-hand"); err != nil {
		t.Errorf("hand-made slice: %v, want it kept", err)
	}
	if len(f.pub.Events()) != 0 {
		t.Errorf("Reconcile announced %v; only events announce", f.pub.Types())
	}
}

// TestNoSliceWithoutSelector: a Service without a selector, or of type
// ExternalName, gets no slice from the stage (kube's EndpointSlice
// controller leaves them to their owner), and a slice made for it by
// hand is left as it is.
func TestNoSliceWithoutSelector(t *testing.T) {
	app := map[string]string{"app": "web"}
	bare := svc(nil, &corev1.ServicePort{Port: 80})
	ext := svc(app)
	ext.Metadata.Name, ext.Spec.Type, ext.Spec.ExternalName = "ext", "ExternalName", "db.example.com"
	own := &corev1.EndpointSlice{Metadata: &corev1.ObjectMeta{Namespace: "default", Name: "web-custom",
		Labels: map[string]string{LabelServiceName: "web", LabelManagedBy: "someone"}}, AddressType: "IPv4",
		Endpoints: []*corev1.Endpoint{{Addresses: []string{"10.0.0.7"}}}}
	f := newFixture(t, bare, ext, own, reported(pod("a", "10.0.0.1", app, true, nil), 1))
	ctx := context.Background()
	if err := f.s.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"web", "ext"} {
		if _, err := objects.Get[*corev1.EndpointSlice](ctx, f.env.Store, "default", SliceName(name)); !errors.Is(err, raftstore.ErrNotFound) {
			t.Errorf("slice %s: %v, want none", name, err)
		}
	}
	got, err := objects.Get[*corev1.EndpointSlice](ctx, f.env.Store, "default", "web-custom")
	if err != nil || !slices.Equal(addrs(got), []string{"10.0.0.7"}) {
		t.Errorf("the owner's slice: %v %v, want it untouched", got, err)
	}
}

// TestServicesWatched: a Service created, changed or deleted after start
// (or a pod relabelled) gets its slice written, rewritten or removed
// within a second, without Reconcile and without an event (the issue's
// "watched, not polled").
func TestServicesWatched(t *testing.T) {
	web, db := map[string]string{"app": "web"}, map[string]string{"app": "db"}
	f := newFixture(t, reported(pod("a", "10.0.0.1", web, true, nil), 1), reported(pod("b", "10.0.0.2", db, true, nil), 1))
	ctx := context.Background()
	within := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			if ok() {
				return
			}
		}
		t.Fatalf("within a second: %s", what)
	}
	s := svc(web, &corev1.ServicePort{Port: 80})
	if _, err := f.env.Store.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
	within("a new Service's slice lists a", func() bool { return slices.Equal(sliceAddrs(ctx, f), []string{"10.0.0.1"}) })

	stored, err := objects.Get[*corev1.Service](ctx, f.env.Store, "default", "web")
	if err != nil {
		t.Fatal(err)
	}
	stored.Spec.Selector = db
	if _, err := f.env.Store.Update(ctx, stored); err != nil {
		t.Fatal(err)
	}
	within("a changed selector's slice lists b", func() bool { return slices.Equal(sliceAddrs(ctx, f), []string{"10.0.0.2"}) })
	// The sync writes the slices, then the Endpoints: its last write is in
	// once they list b too, and only then is the revision Reconcile's to
	// keep.
	within("the changed selector's Endpoints list b", func() bool {
		ep, err := objects.Get[*corev1.Endpoints](ctx, f.env.Store, "default", "web")
		if err != nil || len(ep.GetSubsets()) != 1 {
			return false
		}
		a := ep.GetSubsets()[0].GetAddresses()
		return len(a) == 1 && a[0].GetIp() == "10.0.0.2"
	})
	rev := f.kv.Revision()
	if err := f.s.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if f.kv.Revision() != rev {
		t.Error("Reconcile after the watched sync wrote again; want it idempotent")
	}

	// b's labels change (no pod event): it leaves the slice at once.
	b, err := objects.Get[*corev1.Pod](ctx, f.env.Store, "default", "b")
	if err != nil {
		t.Fatal(err)
	}
	b.Metadata.Labels = map[string]string{"app": "elsewhere"}
	if _, err := f.env.Store.Update(ctx, b); err != nil {
		t.Fatal(err)
	}
	within("a relabelled pod leaves the slice", func() bool { return sliceEmpty(ctx, f) })

	if _, err := f.env.Store.Delete(ctx, objects.Services, "default", "web", 0); err != nil {
		t.Fatal(err)
	}
	within("a deleted Service's slice is gone", func() bool {
		_, err := objects.Get[*corev1.EndpointSlice](ctx, f.env.Store, "default", SliceName("web"))
		return errors.Is(err, raftstore.ErrNotFound)
	})
	// Only the pod's own change is announced: b leaving when relabelled.
	if evs := f.pub.Events(); len(evs) != 1 || evs[0].GetPodUid() != "b-uid" || evs[0].GetEndpointsUpdated().GetAdded() {
		t.Errorf("watched syncs announced %v, want only b leaving", evs)
	}
}

// sliceEmpty reports whether web's slice exists and lists nobody.
func sliceEmpty(ctx context.Context, f *fixture) bool {
	sl, err := objects.Get[*corev1.EndpointSlice](ctx, f.env.Store, "default", SliceName("web"))
	return err == nil && len(sl.GetEndpoints()) == 0
}

// TestSelectorlessServiceLeftAlone: a Service without a selector (the api
// replicas' default/kubernetes) has its slice kept by its owner: the stage
// watches no pod for it, and a sync leaves the owner's slice as it is.
func TestSelectorlessServiceLeftAlone(t *testing.T) {
	kube := svc(nil, &corev1.ServicePort{Name: "https", Port: 443})
	owned := &corev1.EndpointSlice{Metadata: &corev1.ObjectMeta{Name: "web", Namespace: "default",
		Labels: map[string]string{LabelServiceName: "web"}}, AddressType: "IPv4",
		Endpoints: []*corev1.Endpoint{{Addresses: []string{"10.244.1.1"}}}}
	a := reported(pod("a", "10.0.0.1", map[string]string{"app": "web"}, true, nil), 1)
	f := newFixture(t, kube, owned, a)
	ctx := context.Background()
	if f.s.podsLazy.Running() {
		t.Error("pods watched for a namespace whose only Service has no selector")
	}
	if err := f.s.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if sl := slice(t, f); len(sl.GetEndpoints()) != 1 || sl.GetEndpoints()[0].GetAddresses()[0] != "10.244.1.1" {
		t.Errorf("the owner's slice was rewritten: %v", sl)
	}
}

// TestSlicePerResolvedPorts: pods whose named targetPort resolves to
// different numbers get a slice each (and the Endpoints a subset each);
// a managed slice deleted by someone else is written again without
// Reconcile, as kube's controller does on the slice's deletion (the
// conformance test deletes them and waits); a group that empties has
// its slice removed.
func TestSlicePerResolvedPorts(t *testing.T) {
	app := map[string]string{"app": "web"}
	p1 := reported(pod("pod1", "10.0.0.1", app, true, &corev1.ContainerPort{Name: "example-name", ContainerPort: 3000}), 1)
	p2 := reported(pod("pod2", "10.0.0.2", app, true, &corev1.ContainerPort{Name: "example-name", ContainerPort: 3001}), 1)
	f := newFixture(t, svc(app, named("http", "example-name", 80)), p1, p2)
	ctx := context.Background()
	if err := f.s.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	managed := func() []*corev1.EndpointSlice {
		sls, err := f.s.managedSlices(ctx, "default", "web")
		if err != nil {
			t.Fatal(err)
		}
		return sls
	}
	sls := managed()
	if got, want := slicePorts(sls), map[string]string{"10.0.0.1": "http:3000", "10.0.0.2": "http:3001"}; len(sls) != 2 || !maps.Equal(got, want) {
		t.Fatalf("slices %v, want %v", got, want)
	}
	eps, err := objects.Get[*corev1.Endpoints](ctx, f.env.Store, "default", "web")
	if err != nil || len(eps.GetSubsets()) != 2 {
		t.Fatalf("Endpoints %v, %v: want two subsets", eps, err)
	}

	var other *corev1.EndpointSlice
	for _, sl := range sls {
		if sl.GetMetadata().GetName() != SliceName("web") {
			other = sl
		}
	}
	if _, err := f.env.Store.Delete(ctx, objects.EndpointSlices, "default", other.GetMetadata().GetName(), 0); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second) // liveness, not speed: the worker's sync after the informer's event
	for len(managed()) != 2 {
		if time.Now().After(deadline) {
			t.Fatal("the deleted slice was not written again")
		}
		time.Sleep(10 * time.Millisecond)
	}

	if _, err := f.env.Store.Delete(ctx, objects.Pods, "default", "pod2", 0); err != nil {
		t.Fatal(err)
	}
	if err := f.s.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if got := slicePorts(managed()); len(got) != 1 || got["10.0.0.1"] != "http:3000" {
		t.Fatalf("after pod2 left: slices %v", got)
	}
}

// TestPodsWatchedOnlyWithSelectorServices: with no Service that selects
// pods (default/kubernetes has none) the stage holds no watch of every
// pod; the first Service with a selector starts it, and a pod relabelled
// after that Service's first sync still leaves its slice.
func TestPodsWatchedOnlyWithSelectorServices(t *testing.T) {
	web := map[string]string{"app": "web"}
	env, pub, kv := stagetest.NewEnv("endpoints")
	var podWatches atomic.Int64
	kv.Hook(func(method, key string) error {
		if method == "Watch" && key == objects.Pods.Prefix("") {
			podWatches.Add(1)
		}
		return nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := env.Store.Create(ctx, reported(pod("a", "10.0.0.1", web, true, nil), 1)); err != nil {
		t.Fatal(err)
	}
	st, err := NewStage(env)
	if err != nil {
		t.Fatal(err)
	}
	stagetest.Start(t, st.Start)
	f := &fixture{s: st, env: env, pub: pub, kv: kv}
	if err := f.s.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	selectorless := svc(nil, &corev1.ServicePort{Port: 443})
	selectorless.Metadata.Name = "plain"
	if _, err := f.env.Store.Create(ctx, selectorless); err != nil {
		t.Fatal(err)
	}
	for f.s.services.List("") == nil {
		if ctx.Err() != nil {
			t.Fatal("the Service never reached the informer")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := f.s.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if n := podWatches.Load(); n != 0 {
		t.Fatalf("%d watches of every pod with no Service that selects pods", n)
	}

	if _, err := f.env.Store.Create(ctx, svc(web, &corev1.ServicePort{Port: 80})); err != nil {
		t.Fatal(err)
	}
	for !slices.Equal(sliceAddrs(ctx, f), []string{"10.0.0.1"}) {
		if ctx.Err() != nil {
			t.Fatal("the selecting Service's slice never listed a")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if n := podWatches.Load(); n != 1 {
		t.Fatalf("%d watches of every pod with a Service that selects pods, want 1", n)
	}
	a, err := objects.Get[*corev1.Pod](ctx, f.env.Store, "default", "a")
	if err != nil {
		t.Fatal(err)
	}
	a.Metadata.Labels = map[string]string{"app": "elsewhere"}
	if _, err := f.env.Store.Update(ctx, a); err != nil {
		t.Fatal(err)
	}
	for !sliceEmpty(ctx, f) {
		if ctx.Err() != nil {
			t.Fatal("a pod relabelled after the first sync stayed in the slice")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func sliceAddrs(ctx context.Context, f *fixture) []string {
	sl, err := objects.Get[*corev1.EndpointSlice](ctx, f.env.Store, "default", SliceName("web"))
	if err != nil {
		return nil
	}
	return addrs(sl)
}

// TestPodChangedQueues: which Services a pod's change queues, as kube's
// getPodServiceMemberships: none for a change that makes no endpoint;
// those selecting it before or now for one that does (the pod the
// cause); only those it joined or left for a label change alone; none
// without a cause for a pod added.
func TestPodChangedQueues(t *testing.T) {
	web, db := svc(map[string]string{"tier": "web"}), svc(map[string]string{"app": "db"})
	db.Metadata.Name, db.Metadata.Uid = "db", "db-uid"
	both := svc(map[string]string{"app": "x"})
	both.Metadata.Name, both.Metadata.Uid = "both", "both-uid"
	// The stage's Services informer alone, and its queue without the
	// worker that would take from it.
	env, _, _ := stagetest.NewEnv("endpoints")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, o := range []objects.Object{web, db, both} {
		if _, err := env.Store.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	st, err := NewStage(env)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = st.services.Run(ctx)
	}()
	defer func() { cancel(); <-done }()
	if err := st.services.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
	st.queue.open()
	base := func() *corev1.Pod {
		return reported(pod("a", "10.0.0.1", map[string]string{"tier": "web", "app": "x"}, true, nil), 1)
	}
	tests := []struct {
		name   string
		old    *corev1.Pod
		change func(*corev1.Pod)
		want   []string
		caused bool
	}{
		{"an annotation", base(), func(p *corev1.Pod) { p.Metadata.Annotations["note"] = "x" }, nil, false},
		{"readiness", base(), func(p *corev1.Pod) { p.Status.Conditions[0].Status = "False" }, []string{"both", "web"}, true},
		{"labels alone", base(), func(p *corev1.Pod) { p.Metadata.Labels = map[string]string{"app": "x", "tier": "db"} }, []string{"web"}, true},
		{"labels and readiness", base(), func(p *corev1.Pod) {
			p.Metadata.Labels = map[string]string{"app": "db"}
			p.Status.Conditions[0].Status = "False"
		}, []string{"both", "db", "web"}, true},
		{"added", nil, func(*corev1.Pod) {}, []string{"both", "web"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := base()
			tt.change(p)
			st.podChanged(tt.old, p)
			var got []string
			caused := false
			if len(tt.want) > 0 {
				items, _ := st.queue.take(ctx)
				for _, it := range items {
					got = append(got, it.name)
					caused = caused || len(it.causes) > 0
				}
			}
			slices.Sort(got)
			if !slices.Equal(got, tt.want) || caused != tt.caused {
				t.Errorf("queued %v (caused %v), want %v (caused %v)", got, caused, tt.want, tt.caused)
			}
			st.queue.mu.Lock()
			left := st.queue.order
			st.queue.mu.Unlock()
			if len(left) != 0 {
				t.Errorf("left queued %v", left)
			}
		})
	}
}
