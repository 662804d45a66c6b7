package persistence_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/eventsv1"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/objects/objectstest"
	"github.com/podflow/podflow/services/stage"
	"github.com/podflow/podflow/services/stage/stagetest"
	"github.com/podflow/podflow/services/stages/persistence"
)

const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// uidOf is the uid the api stage would have assigned to request reqID's
// pod (any server-chosen value will do).
func uidOf(reqID string) string { return "uid-of-" + reqID }

// admitted is the PodAdmitted of request reqID for ns/name, with the uid
// the api stage assigned.
func admitted(env stage.Env, reqID, ns, name string) *bus.Delivery {
	return stagetest.Deliver(env, &eventsv1.Envelope{
		PodUid:    uidOf(reqID),
		RequestId: reqID, Namespace: ns, PodName: name, Traceparent: traceparent,
		Payload: &eventsv1.Envelope_PodAdmitted{PodAdmitted: &eventsv1.PodAdmitted{
			Pod:     &corev1.Pod{Metadata: &corev1.ObjectMeta{Namespace: ns, Name: name, ResourceVersion: "77"}, Spec: &corev1.PodSpec{}},
			ReplyTo: "_INBOX." + reqID,
		}},
	})
}

// TestCreate: an admitted pod is stored as Kubernetes would create it
// (uid from the request, generation 1, Pending, the request's trace on
// it), PodPersisted carries the stored revision, and the requester gets
// 201 with the pod.
func TestCreate(t *testing.T) {
	env, pub, _ := stagetest.NewEnv("persistence")
	s := persistence.New(env)
	ctx := context.Background()
	d := admitted(env, "r1", "ns", "web")
	if err := s.Handle(ctx, d); err != nil {
		t.Fatal(err)
	}
	pod, err := objects.Get[*corev1.Pod](ctx, env.Store, "ns", "web")
	if err != nil {
		t.Fatal(err)
	}
	md := pod.GetMetadata()
	if md.GetUid() != uidOf("r1") || md.GetGeneration() != 1 || pod.GetStatus().GetPhase() != "Pending" {
		t.Errorf("stored uid %q generation %d phase %q, want %q, 1, Pending", md.GetUid(), md.GetGeneration(), pod.GetStatus().GetPhase(), uidOf("r1"))
	}
	if !proto.Equal(md.GetCreationTimestamp(), d.Envelope.GetTime()) {
		t.Errorf("creationTimestamp %v, want the request's time %v", md.GetCreationTimestamp(), d.Envelope.GetTime())
	}
	if a := md.GetAnnotations(); a[stage.AnnotationRequestID] != "r1" || a[stage.AnnotationTraceparent] != traceparent {
		t.Errorf("annotations %v, want the request id and traceparent", a)
	}
	evs := pub.Events()
	if len(evs) != 1 || evs[0].GetPodPersisted() == nil {
		t.Fatalf("published %v, want one PodPersisted", pub.Types())
	}
	pp := evs[0]
	if pp.GetPodPersisted().GetRevision() != objects.Revision(pod) || pp.GetPodUid() != md.GetUid() || pp.GetGeneration() != 1 || pp.GetCausedBy() != d.Envelope.GetId() {
		t.Errorf("PodPersisted revision %d uid %q generation %d causedBy %q; want %d, %q, 1, %q",
			pp.GetPodPersisted().GetRevision(), pp.GetPodUid(), pp.GetGeneration(), pp.GetCausedBy(), objects.Revision(pod), md.GetUid(), d.Envelope.GetId())
	}
	r := pub.Replies()
	if len(r) != 1 || r[0].Subject != "_INBOX.r1" || r[0].Response.GetStatus().GetCode() != 201 || r[0].Response.GetKind() != "Pod" {
		t.Fatalf("replies %v, want one 201 with the Pod to _INBOX.r1", r)
	}
	replied := &corev1.Pod{}
	if err := proto.Unmarshal(r[0].Response.GetObject(), replied); err != nil || replied.GetMetadata().GetResourceVersion() != md.GetResourceVersion() {
		t.Errorf("replied pod at resourceVersion %q (%v), want the stored %q", replied.GetMetadata().GetResourceVersion(), err, md.GetResourceVersion())
	}
}

// TestRedeliveryCompletesTheSameWay: a PodAdmitted handled again (the
// runner redelivers when the ack was lost) finds its own pod, writes
// nothing, and publishes and replies exactly as the first time.
func TestRedeliveryCompletesTheSameWay(t *testing.T) {
	env, pub, kv := stagetest.NewEnv("persistence")
	s := persistence.New(env)
	ctx := context.Background()
	d := admitted(env, "r1", "ns", "web")
	if err := s.Handle(ctx, d); err != nil {
		t.Fatal(err)
	}
	rev := kv.Revision()
	d.NumDelivered = 2
	if err := s.Handle(ctx, d); err != nil {
		t.Fatalf("redelivery: %v", err)
	}
	if kv.Revision() != rev {
		t.Errorf("the redelivery wrote (revision %d, was %d)", kv.Revision(), rev)
	}
	evs := pub.Events()
	if len(evs) != 2 || evs[0].GetId() != evs[1].GetId() || evs[1].GetPodPersisted().GetRevision() != rev {
		t.Errorf("published %v; want PodPersisted twice with one id (deduplicated by the stream) at revision %d", evs, rev)
	}
	if r := pub.Replies(); len(r) != 2 || r[1].Response.GetStatus().GetCode() != 201 {
		t.Errorf("replies %v, want 201 both times", r)
	}
}

// TestAlreadyExists: another request for a stored name ends as
// PodRejected with Kubernetes' 409 AlreadyExists, and the stored pod is
// left alone.
func TestAlreadyExists(t *testing.T) {
	env, pub, kv := stagetest.NewEnv("persistence")
	s := persistence.New(env)
	ctx := context.Background()
	if err := s.Handle(ctx, admitted(env, "r1", "ns", "web")); err != nil {
		t.Fatal(err)
	}
	rev := kv.Revision()
	pub.Reset()
	if err := s.Handle(ctx, admitted(env, "r2", "ns", "web")); err != nil {
		t.Fatal(err)
	}
	if kv.Revision() != rev {
		t.Error("the second request wrote")
	}
	if got := pub.Types(); !slices.Equal(got, []eventsv1.Type{"PodRejected"}) {
		t.Fatalf("published %v, want PodRejected", got)
	}
	st := pub.Events()[0].GetPodRejected().GetStatus()
	if st.GetCode() != 409 || st.GetReason() != eventsv1.ReasonAlreadyExists || st.GetName() != "web" {
		t.Errorf("rejection %v, want 409 AlreadyExists for web", st)
	}
	if r := pub.Replies(); len(r) != 1 || r[0].Subject != "_INBOX.r2" || !proto.Equal(r[0].Response.GetStatus(), st) {
		t.Errorf("replies %v, want the rejection to _INBOX.r2", r)
	}
	pod, _ := objects.Get[*corev1.Pod](ctx, env.Store, "ns", "web")
	if pod.GetMetadata().GetUid() != uidOf("r1") {
		t.Error("the stored pod is not the first request's")
	}
}

// TestUIDIsTheServers: the stored uid is the envelope's (the api stage's),
// never one the client wrote into the pod.
func TestUIDIsTheServers(t *testing.T) {
	env, _, _ := stagetest.NewEnv("persistence")
	ctx := context.Background()
	d := admitted(env, "r1", "ns", "web")
	d.Envelope.GetPodAdmitted().GetPod().GetMetadata().Uid = "victim-uid"
	if err := persistence.New(env).Handle(ctx, d); err != nil {
		t.Fatal(err)
	}
	pod, _ := objects.Get[*corev1.Pod](ctx, env.Store, "ns", "web")
	if pod.GetMetadata().GetUid() != uidOf("r1") {
		t.Errorf("stored uid %q, want the server's %q", pod.GetMetadata().GetUid(), uidOf("r1"))
	}
}

// TestReusedRequestID: a request id another pod holds is refused with 409
// Conflict naming that pod — for another name and another namespace (the
// request id's key, created with the first pod, is taken) and for the same
// name with another uid (a replay after the stream's duplicate window) —
// while a redelivery of the first request still completes, and writes
// nothing.
func TestReusedRequestID(t *testing.T) {
	env, pub, kv := stagetest.NewEnv("persistence")
	ctx := context.Background()
	first := admitted(env, "r1", "ns", "web")
	if err := persistence.New(env).Handle(ctx, first); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Get(ctx, persistence.RequestIDKey("r1")); err != nil {
		t.Fatalf("the request id's key was not created with the pod: %v", err)
	}
	s := persistence.New(env) // another replica: it has seen nothing
	other := func(ns, name string) *bus.Delivery {
		d := admitted(env, "r1", ns, name)
		d.Envelope.PodUid = "another-uid"
		return d
	}
	tests := []struct {
		name string
		d    *bus.Delivery
	}{
		{"another name", other("ns", "copy")},
		{"another namespace", other("prod", "web")},
		{"the same name, another uid", other("ns", "web")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rev := kv.Revision()
			pub.Reset()
			if err := s.Handle(ctx, tt.d); err != nil {
				t.Fatal(err)
			}
			if kv.Revision() != rev {
				t.Error("the reused request wrote")
			}
			evs := pub.Events()
			if len(evs) != 1 || evs[0].GetPodRejected() == nil {
				t.Fatalf("published %v, want PodRejected", pub.Types())
			}
			st := evs[0].GetPodRejected().GetStatus()
			if st.GetCode() != 409 || st.GetReason() != eventsv1.ReasonConflict || !strings.Contains(st.GetMessage(), `request id "r1" is already used by pod ns/web`) {
				t.Errorf("rejection %v, want 409 Conflict naming ns/web", st)
			}
			if r := pub.Replies(); len(r) != 1 || r[0].Response.GetStatus().GetCode() != 409 {
				t.Errorf("replies %v, want the 409", r)
			}
		})
	}
	pub.Reset()
	rev := kv.Revision()
	first.NumDelivered = 2
	if err := s.Handle(ctx, first); err != nil {
		t.Fatal(err)
	}
	if got := pub.Types(); !slices.Equal(got, []eventsv1.Type{"PodPersisted"}) {
		t.Errorf("redelivery of the first request published %v, want PodPersisted", got)
	}
	if kv.Revision() != rev {
		t.Error("the redelivery wrote")
	}
}

// TestRequestIDFreedWithItsPod: once the pod holding a request id is
// deleted, the id may be used again — the create that meets the stale key
// deletes it and stores its pod — and Reconcile deletes the keys of
// deleted pods, leaving those of stored pods; a late redelivery of the
// deleted pod's request does not bring it back.
func TestRequestIDFreedWithItsPod(t *testing.T) {
	env, pub, kv := stagetest.NewEnv("persistence")
	ctx := context.Background()
	s := persistence.New(env)
	first := admitted(env, "r1", "ns", "web")
	for _, d := range []*bus.Delivery{first, admitted(env, "r2", "ns", "db")} {
		if err := s.Handle(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := env.Store.Delete(ctx, objects.Pods, "ns", "web", 0); err != nil {
		t.Fatal(err)
	}
	pub.Reset()
	first.NumDelivered = 2
	if err := s.Handle(ctx, first); err != nil {
		t.Fatal(err)
	}
	if _, err := objects.Get[*corev1.Pod](ctx, env.Store, "ns", "web"); !errors.Is(err, raftstore.ErrNotFound) || len(pub.Events()) != 0 {
		t.Errorf("a late redelivery of a deleted pod's request: get %v, published %v; want the pod left deleted and nothing published", err, pub.Types())
	}

	again := admitted(env, "r1", "ns", "again")
	again.Envelope.PodUid = "uid-again"
	if err := s.Handle(ctx, again); err != nil {
		t.Fatal(err)
	}
	if got := pub.Types(); !slices.Equal(got, []eventsv1.Type{"PodPersisted"}) {
		t.Fatalf("reusing the request id of a deleted pod published %v, want PodPersisted", got)
	}

	if _, err := env.Store.Delete(ctx, objects.Pods, "ns", "again", 0); err != nil {
		t.Fatal(err)
	}
	if err := s.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Get(ctx, persistence.RequestIDKey("r1")); !errors.Is(err, raftstore.ErrNotFound) {
		t.Errorf("the key of a deleted pod's request id survived Reconcile: %v", err)
	}
	if _, err := kv.Get(ctx, persistence.RequestIDKey("r2")); err != nil {
		t.Errorf("Reconcile deleted the key of a stored pod: %v", err)
	}
}

// TestRequestIDSweepAtMostEveryPeriod: Reconcile sweeps the keys of
// deleted pods at its first call and then only once Config.RequestIDSweep
// has passed since the last sweep, so that a resync every few seconds
// does not read every stored pod each time.
func TestRequestIDSweepAtMostEveryPeriod(t *testing.T) {
	env, _, kv := stagetest.NewEnv("persistence")
	ctx := context.Background()
	now := time.Unix(1_700_000_000, 0)
	s := persistence.NewWithConfig(env, persistence.Config{RequestIDSweep: 5 * time.Minute, Now: func() time.Time { return now }})
	store := func(reqID, name string) {
		t.Helper()
		if err := s.Handle(ctx, admitted(env, reqID, "ns", name)); err != nil {
			t.Fatal(err)
		}
		if _, err := env.Store.Delete(ctx, objects.Pods, "ns", name, 0); err != nil {
			t.Fatal(err)
		}
	}
	gone := func(reqID string) bool {
		_, err := kv.Get(ctx, persistence.RequestIDKey(reqID))
		return errors.Is(err, raftstore.ErrNotFound)
	}

	store("r1", "web")
	if err := s.Reconcile(ctx); err != nil || !gone("r1") {
		t.Fatalf("the first Reconcile: err %v, key of the deleted pod gone %v; want it swept", err, gone("r1"))
	}
	store("r2", "db")
	now = now.Add(time.Minute)
	if err := s.Reconcile(ctx); err != nil || gone("r2") {
		t.Fatalf("a Reconcile a minute after the sweep: err %v, key swept %v; want no sweep before 5 minutes", err, gone("r2"))
	}
	now = now.Add(4 * time.Minute)
	if err := s.Reconcile(ctx); err != nil || !gone("r2") {
		t.Fatalf("a Reconcile 5 minutes after the sweep: err %v, key swept %v; want it swept", err, gone("r2"))
	}
}

// TestFailures: what cannot succeed is permanent; a store or bus outage
// is retried (an error, not permanent) and nothing is answered before the
// event is out.
func TestFailures(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name      string
		setup     func(*stagetest.Publisher, *objectstest.KV)
		delivery  func(stage.Env) *bus.Delivery
		permanent bool
	}{
		{"not a PodAdmitted", nil, func(env stage.Env) *bus.Delivery {
			return stagetest.Deliver(env, &eventsv1.Envelope{RequestId: "r", Payload: &eventsv1.Envelope_PodPersisted{PodPersisted: &eventsv1.PodPersisted{}}})
		}, true},
		{"no request id", nil, func(env stage.Env) *bus.Delivery {
			d := admitted(env, "r", "ns", "web")
			d.Envelope.RequestId = ""
			return d
		}, true},
		{"no pod uid", nil, func(env stage.Env) *bus.Delivery {
			d := admitted(env, "r", "ns", "web")
			d.Envelope.PodUid = ""
			return d
		}, true},
		{"store unavailable", func(_ *stagetest.Publisher, kv *objectstest.KV) {
			kv.Hook(func(string, string) error { return raftstore.ErrUnavailable })
		}, func(env stage.Env) *bus.Delivery { return admitted(env, "r", "ns", "web") }, false},
		{"stream unavailable", func(pub *stagetest.Publisher, _ *objectstest.KV) { pub.Fail(bus.ErrStreamUnavailable) }, func(env stage.Env) *bus.Delivery { return admitted(env, "r", "ns", "web") }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env, pub, kv := stagetest.NewEnv("persistence")
			if tt.setup != nil {
				tt.setup(pub, kv)
			}
			err := persistence.New(env).Handle(ctx, tt.delivery(env))
			if err == nil || bus.IsPermanent(err) != tt.permanent {
				t.Errorf("Handle = %v, want an error, permanent %v", err, tt.permanent)
			}
			if !tt.permanent && errors.Is(err, bus.ErrPermanent) {
				t.Error("a transient failure was made permanent")
			}
			if len(pub.Replies()) != 0 {
				t.Errorf("replied %v before the outcome was recorded", pub.Replies())
			}
		})
	}
}
