package api

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/proto/apiv1"
	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/eventsv1"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/auth"
	"github.com/podflow/podflow/services/nslifecycle"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/objects/objectstest"
	"github.com/podflow/podflow/services/stage"
	"github.com/podflow/podflow/services/stage/stagetest"
)

const (
	aliceToken = "alice-token-0123456789"
	bobToken   = "bob-token-0123456789"
	saToken    = "builder-token-0123456789"
	// mallory and erin appear in TestEscalation only.
	malloryToken = "mallory-token-0123456789"
	erinToken    = "erin-token-0123456789"
)

// fixture is an api stage over the fakes: alice may create and delete pods
// and manage configmaps in namespace team (a Role and a RoleBinding in
// the store), bob is authenticated but bound to nothing, and the
// ServiceAccount team/builder (a token Secret in the store) may create
// pods in team.
type fixture struct {
	s   *Stage
	env stage.Env
	pub *stagetest.Publisher
	kv  *objectstest.KV
}

func newFixture(t *testing.T, extra ...objects.Object) *fixture {
	t.Helper()
	env, pub, kv := stagetest.NewEnv("api")
	ctx := context.Background()
	seed := []objects.Object{
		testNamespace("team"), testNamespace("dev"),
		&corev1.Role{Metadata: &corev1.ObjectMeta{Namespace: "team", Name: "dev"}, Rules: []*corev1.PolicyRule{
			{Verbs: []string{"create", "delete"}, ApiGroups: []string{""}, Resources: []string{"pods"}},
			{Verbs: []string{"create", "update", "delete"}, ApiGroups: []string{""}, Resources: []string{"configmaps"}},
		}},
		&corev1.RoleBinding{Metadata: &corev1.ObjectMeta{Namespace: "team", Name: "dev"},
			Subjects: []*corev1.Subject{{Kind: "User", ApiGroup: "rbac.authorization.k8s.io", Name: "alice"}},
			RoleRef:  &corev1.RoleRef{ApiGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "dev"}},
		&corev1.Role{Metadata: &corev1.ObjectMeta{Namespace: "team", Name: "builder"}, Rules: []*corev1.PolicyRule{
			{Verbs: []string{"create"}, ApiGroups: []string{""}, Resources: []string{"pods"}},
		}},
		&corev1.RoleBinding{Metadata: &corev1.ObjectMeta{Namespace: "team", Name: "builder"},
			Subjects: []*corev1.Subject{{Kind: "ServiceAccount", Name: "builder", Namespace: "team"}},
			RoleRef:  &corev1.RoleRef{ApiGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "builder"}},
		&corev1.ServiceAccount{Metadata: &corev1.ObjectMeta{Namespace: "team", Name: "builder", Uid: "sa-uid"}},
		&corev1.Secret{Metadata: &corev1.ObjectMeta{Namespace: "team", Name: "builder-token", Annotations: map[string]string{
			auth.AnnotationServiceAccountName: "builder", auth.AnnotationServiceAccountUID: "sa-uid",
		}}, Type: auth.SecretTypeServiceAccountToken, Data: map[string][]byte{auth.SecretTokenKey: []byte(saToken)}},
	}
	for _, o := range append(seed, extra...) {
		if _, err := env.Store.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	tokens := filepath.Join(t.TempDir(), "tokens.csv")
	if err := os.WriteFile(tokens, []byte(aliceToken+",alice,uid-alice\n"+bobToken+",bob,uid-bob\n"+
		malloryToken+",mallory,uid-mallory\n"+erinToken+",erin,uid-erin\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.TokenFile = tokens
	s, err := New(env, cfg)
	if err != nil {
		t.Fatal(err)
	}
	stagetest.Start(t, s.startCaches)
	return &fixture{s: s, env: env, pub: pub, kv: kv}
}

// testNamespace is an active Namespace, as the api stage creates one.
func testNamespace(name string) *corev1.Namespace {
	ns := &corev1.Namespace{Metadata: &corev1.ObjectMeta{Name: name, Uid: "ns-" + name}}
	nslifecycle.PrepareForCreate(ns)
	return ns
}

func requested(f *fixture, token string, pod *corev1.Pod) *eventsv1.Envelope {
	return &eventsv1.Envelope{
		RequestId: "req-1", Namespace: pod.GetMetadata().GetNamespace(), PodName: pod.GetMetadata().GetName(),
		Payload: &eventsv1.Envelope_PodRequested{PodRequested: &eventsv1.PodRequested{Token: token, Pod: pod, ReplyTo: inboxOf(token) + ".req-1"}},
	}
}

// tokenUsers are the API users of the fixture's tokens.
var tokenUsers = map[string]string{
	aliceToken: "alice", bobToken: "bob", malloryToken: "mallory", erinToken: "erin",
	saToken: "system:serviceaccount:team:builder",
}

// inboxOf is the inbox prefix of the bus identity of token's user (any
// inbox for a token that authenticates nobody).
func inboxOf(token string) string {
	if u, ok := tokenUsers[token]; ok {
		return bus.UserInbox(u)
	}
	return "_INBOX.nobody"
}

// TestHandlePodRequested: a pod creation continues as PodAuthorized only
// for an authenticated user RBAC lets create pods in the pod's namespace;
// otherwise it ends as PodRejected with 401 or 403, answered to the
// requester.
func TestHandlePodRequested(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	pod := func(ns, name string) *corev1.Pod {
		return &corev1.Pod{Metadata: &corev1.ObjectMeta{Namespace: ns, Name: name}, Spec: &corev1.PodSpec{}}
	}
	tests := []struct {
		name     string
		token    string
		pod      *corev1.Pod
		wantCode int32  // 0: authorized
		wantUser string // when authorized
		wantNS   string
	}{
		{"no token", "", pod("team", "web"), 401, "", "team"},
		{"unknown token", "nobody-0123456789", pod("team", "web"), 401, "", "team"},
		{"authenticated, no binding", bobToken, pod("team", "web"), 403, "", "team"},
		{"bound in another namespace", aliceToken, pod("other", "web"), 403, "", "other"},
		{"no namespace is default, where alice has no role", aliceToken, pod("", "web"), 403, "", "default"},
		{"bound user", aliceToken, pod("team", "web"), 0, "alice", "team"},
		{"ServiceAccount token", saToken, pod("team", "web"), 0, "system:serviceaccount:team:builder", "team"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f.pub.Reset()
			if err := f.s.Handle(ctx, stagetest.Deliver(f.env, requested(f, tt.token, tt.pod))); err != nil {
				t.Fatal(err)
			}
			evs := f.pub.Events()
			if len(evs) != 1 {
				t.Fatalf("published %v, want one event", f.pub.Types())
			}
			e := evs[0]
			if e.GetNamespace() != tt.wantNS || e.GetPodName() != "web" {
				t.Errorf("event for %s/%s, want %s/web", e.GetNamespace(), e.GetPodName(), tt.wantNS)
			}
			if tt.wantCode == 0 {
				a := e.GetPodAuthorized()
				if a == nil {
					t.Fatalf("published %s %v, want PodAuthorized", e.Type(), e.GetPodRejected().GetStatus())
				}
				if a.GetUser().GetUsername() != tt.wantUser || a.GetReplyTo() != inboxOf(tt.token)+".req-1" || a.GetPod().GetMetadata().GetNamespace() != tt.wantNS {
					t.Errorf("PodAuthorized user %q replyTo %q namespace %q", a.GetUser().GetUsername(), a.GetReplyTo(), a.GetPod().GetMetadata().GetNamespace())
				}
				if len(f.pub.Replies()) != 0 {
					t.Error("an authorized request was answered already")
				}
				return
			}
			st := e.GetPodRejected().GetStatus()
			if st.GetCode() != tt.wantCode || st.GetKind() != "pods" || st.GetName() != "web" {
				t.Errorf("rejected with %v, want code %d for pods web", st, tt.wantCode)
			}
			r := f.pub.Replies()
			if len(r) != 1 || r[0].Subject != inboxOf(tt.token)+".req-1" || !proto.Equal(r[0].Response.GetStatus(), st) {
				t.Errorf("replies %v, want the rejection to _INBOX.req-1", r)
			}
		})
	}
}

// TestGenerateName: a generated name derives from the request id, so a
// redelivery names the pod alike and another request does not.
func TestGenerateName(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	gen := func(reqID string) string {
		e := requested(f, aliceToken, &corev1.Pod{Metadata: &corev1.ObjectMeta{Namespace: "team", GenerateName: "web-"}})
		e.RequestId = reqID
		if err := f.s.Handle(ctx, stagetest.Deliver(f.env, e)); err != nil {
			t.Fatal(err)
		}
		evs := f.pub.Events()
		last := evs[len(evs)-1]
		if got := last.GetPodAuthorized().GetPod().GetMetadata().GetName(); got != last.GetPodName() {
			t.Errorf("pod named %q, envelope names %q", got, last.GetPodName())
		}
		return last.GetPodName()
	}
	a, again, b := gen("r1"), gen("r1"), gen("r2")
	if len(a) != len("web-")+5 || a[:4] != "web-" {
		t.Errorf("generated name %q, want web- and 5 characters", a)
	}
	if a != again || a == b {
		t.Errorf("names %q, %q (same request), %q (another): want the same request named alike only", a, again, b)
	}
}

// TestOnCreatePod: a request-reply creation enters the stream as
// PodRequested answering to the request's inbox, with any asserted user
// dropped; a request that does not decode is answered 400.
func TestOnCreatePod(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	b, _ := proto.Marshal(&eventsv1.PodRequested{
		Token: aliceToken, User: &corev1.UserInfo{Username: "system:admin"},
		Pod: &corev1.Pod{Metadata: &corev1.ObjectMeta{Namespace: "team", Name: "web"}},
	})
	reply := bus.UserInbox("alice") + ".x"
	f.s.onCreatePod(ctx, &nats.Msg{Data: b, Reply: reply})
	evs := f.pub.Events()
	if len(evs) != 1 || evs[0].GetPodRequested() == nil {
		t.Fatalf("published %v, want PodRequested", f.pub.Types())
	}
	req := evs[0].GetPodRequested()
	if req.GetUser() != nil || req.GetReplyTo() != reply || evs[0].GetRequestId() == "" || evs[0].GetPodName() != "web" {
		t.Errorf("PodRequested user %v replyTo %q request %q pod %q; want no user, alice's inbox, an id, web",
			req.GetUser(), req.GetReplyTo(), evs[0].GetRequestId(), evs[0].GetPodName())
	}
	f.s.onCreatePod(ctx, &nats.Msg{Data: []byte{0xff, 0xff}, Reply: "_INBOX.y"})
	if r := f.pub.Replies(); len(r) != 1 || r[0].Response.GetStatus().GetCode() != 400 {
		t.Errorf("replies %v, want a 400 for the undecodable request", r)
	}
}

func objectReq(token, verb, kind, ns string, obj proto.Message) *apiv1.ObjectRequest {
	req := &apiv1.ObjectRequest{Token: token, Verb: verb, Kind: kind, Namespace: ns}
	if obj != nil {
		req.Object, _ = proto.Marshal(obj)
		req.Name = obj.(objects.Object).GetMetadata().GetName()
	}
	return req
}

// TestObject: apply creates then updates (uid kept, generation counted),
// create of an existing object is 409, delete then 404, each only as RBAC
// allows; bad requests get Kubernetes' codes.
func TestObject(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	cm := func(v string) *corev1.ConfigMap {
		return &corev1.ConfigMap{Metadata: &corev1.ObjectMeta{Name: "settings"}, Data: map[string]string{"v": v}}
	}
	steps := []struct {
		name     string
		req      *apiv1.ObjectRequest
		wantCode int32
		check    func(t *testing.T, obj proto.Message)
	}{
		{"bad token", objectReq("x", "apply", "configmaps", "team", cm("1")), 401, nil},
		{"unbound user", objectReq(bobToken, "apply", "configmaps", "team", cm("1")), 403, nil},
		{"unknown kind", objectReq(aliceToken, "apply", "widgets", "team", nil), 404, nil},
		{"pods are created through the pipeline", objectReq(aliceToken, "apply", "pods", "team",
			&corev1.Pod{Metadata: &corev1.ObjectMeta{Name: "p"}}), 400, nil},
		{"no name", objectReq(aliceToken, "apply", "configmaps", "team", &corev1.ConfigMap{Metadata: &corev1.ObjectMeta{}}), 422, nil},
		{"unsupported verb", objectReq(aliceToken, "patch", "configmaps", "team", cm("1")), 405, nil},
		{"apply creates", objectReq(aliceToken, "apply", "cm", "team", cm("1")), 201, func(t *testing.T, obj proto.Message) {
			md := obj.(*corev1.ConfigMap).GetMetadata()
			if md.GetUid() == "" || md.GetGeneration() != 1 || md.GetNamespace() != "team" || md.GetResourceVersion() == "" {
				t.Errorf("created %v, want a uid, generation 1, namespace team, a resourceVersion", md)
			}
		}},
		{"apply updates", objectReq(aliceToken, "apply", "configmaps", "team", cm("2")), 200, func(t *testing.T, obj proto.Message) {
			first, _, _ := objects.List[*corev1.ConfigMap](ctx, f.env.Store, "team")
			md := obj.(*corev1.ConfigMap).GetMetadata()
			if md.GetGeneration() != 2 || len(first) != 1 || md.GetUid() != first[0].GetMetadata().GetUid() || first[0].GetData()["v"] != "2" {
				t.Errorf("updated %v, stored %v; want generation 2, the same uid, v=2", md, first)
			}
		}},
		{"create of an existing object", objectReq(aliceToken, "create", "configmaps", "team", cm("3")), 409, nil},
		{"delete", objectReq(aliceToken, "delete", "configmaps", "team", cm("")), 200, func(t *testing.T, _ proto.Message) {
			if _, err := objects.Get[*corev1.ConfigMap](ctx, f.env.Store, "team", "settings"); !errorsIsNotFound(err) {
				t.Errorf("after delete: %v, want ErrNotFound", err)
			}
		}},
		{"delete again", objectReq(aliceToken, "delete", "configmaps", "team", cm("")), 404, nil},
		{"delete without the verb", objectReq(saToken, "delete", "configmaps", "team", cm("")), 403, nil},
	}
	for _, tt := range steps {
		t.Run(tt.name, func(t *testing.T) {
			st, obj := f.s.object(ctx, tt.req)
			if st.GetCode() != tt.wantCode {
				t.Fatalf("status %v, want code %d", st, tt.wantCode)
			}
			if tt.check != nil {
				tt.check(t, obj)
			}
		})
	}
}

// TestObjectConflict: a concurrent writer between the read and the write
// of an apply is a 409 Conflict, and its write stands.
func TestObjectConflict(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	cm := &corev1.ConfigMap{Metadata: &corev1.ObjectMeta{Namespace: "team", Name: "c"}, Data: map[string]string{"v": "theirs"}}
	if _, err := f.env.Store.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	raced := false
	f.kv.Hook(func(method, _ string) error {
		if method == "Update" && !raced {
			raced = true
			cm.Data["v"] = "racer"
			_, err := f.env.Store.Update(ctx, cm)
			return err
		}
		return nil
	})
	st, _ := f.s.object(ctx, objectReq(aliceToken, "apply", "configmaps", "team",
		&corev1.ConfigMap{Metadata: &corev1.ObjectMeta{Name: "c"}, Data: map[string]string{"v": "mine"}}))
	if st.GetCode() != 409 || st.GetReason() != eventsv1.ReasonConflict {
		t.Errorf("status %v, want 409 Conflict", st)
	}
	got, _ := objects.Get[*corev1.ConfigMap](ctx, f.env.Store, "team", "c")
	if got.GetData()["v"] != "racer" {
		t.Errorf("stored v=%q, want the racing writer's", got.GetData()["v"])
	}
}

// TestUpdateOfDeletedObject: an update whose object is deleted before the
// stage reads it, or between that read and the write, is a 404 and
// creates nothing (found by podflow chaos's linearizability checker: a
// PUT with the resourceVersion of a deleted ConfigMap re-created it).
func TestUpdateOfDeletedObject(t *testing.T) {
	for _, hookOn := range []string{"Get", "Update"} {
		t.Run("deleted before "+hookOn, func(t *testing.T) {
			f := newFixture(t)
			ctx := context.Background()
			cm := &corev1.ConfigMap{Metadata: &corev1.ObjectMeta{Namespace: "team", Name: "c"}, Data: map[string]string{"v": "1"}}
			rev, err := f.env.Store.Create(ctx, cm)
			if err != nil {
				t.Fatal(err)
			}
			raced := false
			f.kv.Hook(func(method, _ string) error {
				if method == hookOn && !raced {
					raced = true
					_, err := f.env.Store.Delete(ctx, objects.ConfigMaps, "team", "c", 0)
					return err
				}
				return nil
			})
			st, _ := f.s.object(ctx, objectReq(aliceToken, "update", "configmaps", "team",
				&corev1.ConfigMap{Metadata: &corev1.ObjectMeta{Name: "c", ResourceVersion: fmt.Sprint(rev)}, Data: map[string]string{"v": "2"}}))
			if !raced || st.GetCode() != 404 {
				t.Errorf("raced %v, status %v; want 404 NotFound", raced, st)
			}
			if got, err := objects.Get[*corev1.ConfigMap](ctx, f.env.Store, "team", "c"); !errorsIsNotFound(err) {
				t.Errorf("after the update: %v, %v; want it still deleted", got, err)
			}
		})
	}
}

// TestDeletePod: deleting an unbound pod removes it and publishes
// PodDeleted; a bound pod is marked terminating with its grace period and
// handed to its node (PodDeleteRequested); deleting it again changes
// nothing in the store and hands it over again.
func TestDeletePod(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	for _, p := range []*corev1.Pod{
		{Metadata: &corev1.ObjectMeta{Namespace: "team", Name: "pending", Uid: "u1"}, Spec: &corev1.PodSpec{}},
		{Metadata: &corev1.ObjectMeta{Namespace: "team", Name: "running", Uid: "u2"}, Spec: &corev1.PodSpec{NodeName: "n1"}},
	} {
		if _, err := f.env.Store.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	del := func(name string, grace *int64) *corev1.Status {
		req := objectReq(aliceToken, "delete", "pods", "team", nil)
		req.Name, req.GracePeriodSeconds = name, grace
		st, _ := f.s.object(ctx, req)
		return st
	}
	if st := del("pending", nil); st.GetCode() != 200 {
		t.Fatalf("delete pending: %v", st)
	}
	if _, err := objects.Get[*corev1.Pod](ctx, f.env.Store, "team", "pending"); !errorsIsNotFound(err) {
		t.Errorf("unbound pod after delete: %v, want ErrNotFound", err)
	}
	if got := f.pub.Types(); !slices.Equal(got, []eventsv1.Type{"PodDeleted"}) {
		t.Errorf("published %v, want PodDeleted", got)
	}

	f.pub.Reset()
	if st := del("running", proto.Int64(5)); st.GetCode() != 200 {
		t.Fatalf("delete running: %v", st)
	}
	pod, err := objects.Get[*corev1.Pod](ctx, f.env.Store, "team", "running")
	if err != nil || pod.GetMetadata().GetDeletionTimestamp() == nil || pod.GetMetadata().GetDeletionGracePeriodSeconds() != 5 {
		t.Fatalf("bound pod after delete: %v, %v; want it terminating with grace 5", pod.GetMetadata(), err)
	}
	evs := f.pub.Events()
	if len(evs) != 1 || evs[0].GetPodDeleteRequested().GetGracePeriodSeconds() != 5 || evs[0].GetNodeName() != "n1" || evs[0].GetPodUid() != "u2" {
		t.Fatalf("published %v, want PodDeleteRequested to n1 with grace 5", evs)
	}
	rev := f.kv.Revision()
	if st := del("running", proto.Int64(1)); st.GetCode() != 200 {
		t.Fatalf("second delete: %v", st)
	}
	if f.kv.Revision() != rev {
		t.Error("the second delete of a terminating pod wrote")
	}
	if evs := f.pub.Events(); len(evs) != 2 || evs[1].GetPodDeleteRequested().GetGracePeriodSeconds() != 5 {
		t.Errorf("second hand-over %v, want the first grace period again", evs)
	}
	if st := del("missing", nil); st.GetCode() != 404 {
		t.Errorf("delete of a missing pod: %v, want 404", st)
	}
	req := objectReq(bobToken, "delete", "pods", "team", nil)
	req.Name = "running"
	if st, _ := f.s.object(ctx, req); st.GetCode() != 403 {
		t.Errorf("bob's delete: %v, want 403", st)
	}
}

func errorsIsNotFound(err error) bool { return errors.Is(err, raftstore.ErrNotFound) }

// TestPodUID: the api stage gives the pod a uid of the server's — the
// client's metadata.uid is dropped — carried on the envelope from
// PodAuthorized on. Two messages with one request id (another stream
// sequence) get different uids; a redelivery of one message the same.
func TestPodUID(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	uid := func(seq uint64) string {
		pod := &corev1.Pod{Metadata: &corev1.ObjectMeta{Namespace: "team", Name: "web", Uid: "victim-uid"}, Spec: &corev1.PodSpec{}}
		d := stagetest.Deliver(f.env, requested(f, aliceToken, pod))
		d.StreamSeq = seq
		if err := f.s.Handle(ctx, d); err != nil {
			t.Fatal(err)
		}
		evs := f.pub.Events()
		e := evs[len(evs)-1]
		if got := e.GetPodAuthorized().GetPod().GetMetadata().GetUid(); got != e.GetPodUid() || got == "" {
			t.Fatalf("PodAuthorized pod uid %q, envelope %q; want one server uid", got, e.GetPodUid())
		}
		return e.GetPodUid()
	}
	a, again, b := uid(7), uid(7), uid(8)
	if a == "victim-uid" || a != again || a == b {
		t.Errorf("uids %q, %q (redelivery), %q (same request id, another message): want the server's, alike for the redelivery only", a, again, b)
	}
}
