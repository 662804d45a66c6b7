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

	"github.com/podflow/podflow/bus"
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

func podEvent(env stage.Env, typ eventsv1.Type, p *corev1.Pod, gen int64) *eventsv1.Envelope {
	e := &eventsv1.Envelope{
		PodUid: p.GetMetadata().GetUid(), Namespace: p.GetMetadata().GetNamespace(), PodName: p.GetMetadata().GetName(),
		NodeName: p.GetSpec().GetNodeName(), Generation: gen,
	}
	switch typ {
	case "PodReady":
		e.Payload = &eventsv1.Envelope_PodReady{PodReady: &eventsv1.PodReady{}}
	case "PodNotReady":
		e.Payload = &eventsv1.Envelope_PodNotReady{PodNotReady: &eventsv1.PodNotReady{}}
	case "PodDeleted":
		e.Payload = &eventsv1.Envelope_PodDeleted{PodDeleted: &eventsv1.PodDeleted{}}
	}
	return e
}

func slice(t *testing.T, f *fixture) *corev1.EndpointSlice {
	t.Helper()
	sl, err := objects.Get[*corev1.EndpointSlice](context.Background(), f.env.Store, "default", SliceName("web"))
	if err != nil {
		t.Fatalf("slice: %v", err)
	}
	return sl
}

// TestHandleReadyPods: a PodReady puts the Service's slice in the store
// with the Ready pods its selector matches, and announces the pod joining
// it; a PodNotReady takes it out again; a redelivery changes nothing.
func TestHandleReadyPods(t *testing.T) {
	app := map[string]string{"app": "web"}
	http := &corev1.ContainerPort{Name: "http", ContainerPort: 8080}
	port := &corev1.ServicePort{Port: 80, TargetPort: &corev1.IntOrString{Value: &corev1.IntOrString_StrVal{StrVal: "http"}}}
	a := reported(pod("a", "10.0.0.1", app, true, http), 3)
	b := reported(pod("b", "10.0.0.2", app, false, http), 1)
	c := reported(pod("c", "10.0.0.3", map[string]string{"app": "db"}, true, http), 1)
	f := newFixture(t, svc(app, port), a, b, c)
	ctx := context.Background()

	ready := stagetest.Deliver(f.env, podEvent(f.env, "PodReady", a, 3))
	if err := f.s.Handle(ctx, ready); err != nil {
		t.Fatal(err)
	}
	sl := slice(t, f)
	if got := addrs(sl); !slices.Equal(got, []string{"10.0.0.1"}) {
		t.Errorf("slice addresses %v, want only the Ready, selected pod a", got)
	}
	if len(sl.GetPorts()) != 1 || sl.GetPorts()[0].GetPort() != 8080 {
		t.Errorf("slice ports %v, want the named targetPort resolved to 8080", sl.GetPorts())
	}
	if sl.GetMetadata().GetLabels()[LabelServiceName] != "web" || sl.GetMetadata().GetLabels()[LabelManagedBy] != ManagedBy {
		t.Errorf("slice labels %v", sl.GetMetadata().GetLabels())
	}
	evs := f.pub.Events()
	if len(evs) != 1 || !evs[0].GetEndpointsUpdated().GetAdded() || evs[0].GetEndpointsUpdated().GetReadyEndpoints() != 1 || evs[0].GetPodUid() != "a-uid" {
		t.Fatalf("published %v, want EndpointsUpdated: a added, 1 ready", evs)
	}
	if evs[0].GetGeneration() != sl.GetMetadata().GetGeneration() {
		t.Errorf("EndpointsUpdated generation %d, want the slice's %d", evs[0].GetGeneration(), sl.GetMetadata().GetGeneration())
	}

	rev := f.kv.Revision()
	if err := f.s.Handle(ctx, ready); err != nil {
		t.Fatal(err)
	}
	if f.kv.Revision() != rev || len(f.pub.Events()) != 1 {
		t.Error("a redelivered PodReady wrote or announced again")
	}

	// a turns NotReady.
	stored, _ := objects.Get[*corev1.Pod](ctx, f.env.Store, "default", "a")
	stored.Status.Conditions[0].Status = "False"
	reported(stored, 4)
	if _, err := f.env.Store.Update(ctx, stored); err != nil {
		t.Fatal(err)
	}
	if err := f.s.Handle(ctx, stagetest.Deliver(f.env, podEvent(f.env, "PodNotReady", a, 4))); err != nil {
		t.Fatal(err)
	}
	after := slice(t, f)
	if got := addrs(after); len(got) != 0 {
		t.Errorf("slice addresses %v after a is NotReady, want none", got)
	}
	if after.GetMetadata().GetGeneration() != sl.GetMetadata().GetGeneration()+1 || after.GetMetadata().GetUid() != sl.GetMetadata().GetUid() {
		t.Errorf("updated slice generation %d uid %q, want %d and the same uid", after.GetMetadata().GetGeneration(), after.GetMetadata().GetUid(), sl.GetMetadata().GetGeneration()+1)
	}
	if evs := f.pub.Events(); len(evs) != 2 || evs[1].GetEndpointsUpdated().GetAdded() {
		t.Errorf("published %v, want a second EndpointsUpdated removing a", f.pub.Types())
	}
}

// TestHandleStoreBehind: an event about a state the store does not show
// yet is retried (ErrStoreBehind), leaving the slice alone. (The pod is
// being deleted: a PodDeleted for a pod nobody deleted is refused, see
// TestNodeRestriction.)
func TestHandleStoreBehind(t *testing.T) {
	app := map[string]string{"app": "web"}
	a := reported(pod("a", "10.0.0.1", app, true, nil), 2)
	a.Metadata.DeletionTimestamp = timestamppb.Now()
	f := newFixture(t, svc(app, &corev1.ServicePort{Port: 80}), a)
	ctx := context.Background()
	tests := []struct {
		name string
		ev   *eventsv1.Envelope
	}{
		{"PodReady newer than the applied status", podEvent(f.env, "PodReady", a, 3)},
		{"PodDeleted of a pod still stored", podEvent(f.env, "PodDeleted", a, 3)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := f.s.Handle(ctx, stagetest.Deliver(f.env, tt.ev)); !errors.Is(err, ErrStoreBehind) {
				t.Errorf("Handle = %v, want ErrStoreBehind", err)
			}
			if _, err := objects.Get[*corev1.EndpointSlice](ctx, f.env.Store, "default", "web"); !errors.Is(err, raftstore.ErrNotFound) {
				t.Errorf("a slice was written: %v", err)
			}
		})
	}
}

// TestSyncRetriesConflicts: a concurrent writer of the slice between the
// read and the write makes the sync reread and write on top of it.
func TestSyncRetriesConflicts(t *testing.T) {
	app := map[string]string{"app": "web"}
	a := reported(pod("a", "10.0.0.1", app, true, nil), 1)
	f := newFixture(t, svc(app, &corev1.ServicePort{Port: 80}), a)
	ctx := context.Background()
	raced := 0
	f.kv.Hook(func(method, key string) error {
		if method == "Create" && key == objects.EndpointSlices.Key("default", "web") && raced == 0 {
			raced++
			_, err := f.env.Store.Create(ctx, &corev1.EndpointSlice{Metadata: &corev1.ObjectMeta{Namespace: "default", Name: "web", Uid: "racer"}})
			return err
		}
		return nil
	})
	if err := f.s.Handle(ctx, stagetest.Deliver(f.env, podEvent(f.env, "PodReady", a, 1))); err != nil {
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

// TestNodeRestriction: the endpoints stage refuses, permanently and with
// a reason, a pod event from another node than the pod's, a deletion of a
// pod nobody deleted, and an envelope that disagrees with its subject;
// the slice is left alone.
func TestNodeRestriction(t *testing.T) {
	app := map[string]string{"app": "web"}
	a := reported(pod("a", "10.0.0.1", app, true, nil), 2) // bound to n1
	f := newFixture(t, svc(app, &corev1.ServicePort{Port: 80}), a)
	ctx := context.Background()
	fromN2 := func(typ eventsv1.Type) *eventsv1.Envelope {
		e := podEvent(f.env, typ, a, 3)
		e.NodeName = "n2"
		return e
	}
	tests := []struct {
		name   string
		d      func() *bus.Delivery
		reason string
	}{
		{"PodReady from another node", func() *bus.Delivery { return stagetest.Deliver(f.env, fromN2("PodReady")) }, stage.RefusedNotBoundToNode},
		{"PodDeleted from another node", func() *bus.Delivery { return stagetest.Deliver(f.env, fromN2("PodDeleted")) }, stage.RefusedNotBoundToNode},
		{"PodDeleted of a pod not being deleted", func() *bus.Delivery {
			return stagetest.Deliver(f.env, podEvent(f.env, "PodDeleted", a, 3))
		}, stage.RefusedNotTerminating},
		{"envelope names n1, published on n2's subject", func() *bus.Delivery {
			e := podEvent(f.env, "PodReady", a, 2)
			return stagetest.DeliverOn(f.env, e, bus.Subject(fromN2("PodReady")))
		}, stage.RefusedSubjectMismatch},
		{"envelope names another pod than its subject", func() *bus.Delivery {
			e := podEvent(f.env, "PodReady", a, 2)
			other := podEvent(f.env, "PodReady", a, 2)
			other.PodName = "b"
			return stagetest.DeliverOn(f.env, e, bus.Subject(other))
		}, stage.RefusedSubjectMismatch},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := f.s.Handle(ctx, tt.d())
			if !bus.IsPermanent(err) || stage.RefusalReason(err) != tt.reason {
				t.Errorf("Handle = %v, want a permanent refusal %s", err, tt.reason)
			}
			if _, err := objects.Get[*corev1.EndpointSlice](ctx, f.env.Store, "default", SliceName("web")); !errors.Is(err, raftstore.ErrNotFound) {
				t.Errorf("a slice was written: %v", err)
			}
		})
	}
	// The pod's own node is heard.
	if err := f.s.Handle(ctx, stagetest.Deliver(f.env, podEvent(f.env, "PodReady", a, 2))); err != nil {
		t.Fatalf("PodReady from n1: %v", err)
	}
	if got := addrs(slice(t, f)); !slices.Equal(got, []string{"10.0.0.1"}) {
		t.Errorf("slice %v, want a's address", got)
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
	if len(f.pub.Events()) != 0 {
		t.Errorf("watched syncs announced %v; only pod events announce", f.pub.Types())
	}
}

// sliceEmpty reports whether web's slice exists and lists nobody.
func sliceEmpty(ctx context.Context, f *fixture) bool {
	sl, err := objects.Get[*corev1.EndpointSlice](ctx, f.env.Store, "default", SliceName("web"))
	return err == nil && len(sl.GetEndpoints()) == 0
}

// TestSelectorlessServiceLeftAlone: a Service without a selector (the api
// replicas' default/kubernetes) has its slice kept by its owner: a pod
// event in its namespace reads nothing (a store behind the event is no
// reason to retry) and writes nothing, and a sync leaves the owner's slice
// as it is.
func TestSelectorlessServiceLeftAlone(t *testing.T) {
	kube := svc(nil, &corev1.ServicePort{Name: "https", Port: 443})
	owned := &corev1.EndpointSlice{Metadata: &corev1.ObjectMeta{Name: "web", Namespace: "default",
		Labels: map[string]string{LabelServiceName: "web"}}, AddressType: "IPv4",
		Endpoints: []*corev1.Endpoint{{Addresses: []string{"10.244.1.1"}}}}
	a := reported(pod("a", "10.0.0.1", map[string]string{"app": "web"}, true, nil), 1)
	f := newFixture(t, kube, owned, a)
	ctx := context.Background()
	reads := 0
	f.kv.Hook(func(method, key string) error {
		if method == "Get" || method == "List" {
			reads++
		}
		return nil
	})
	// An event the store has not caught up with yet: no retry either.
	if err := f.s.Handle(ctx, stagetest.Deliver(f.env, podEvent(f.env, "PodReady", a, 5))); err != nil {
		t.Fatalf("Handle = %v", err)
	}
	if reads != 0 {
		t.Errorf("%d store reads for a namespace whose only Service has no selector", reads)
	}
	f.kv.Hook(nil)
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
