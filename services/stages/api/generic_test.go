package api

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/objects"
)

// fakeRegistry stands in for services/registry (whose own tests run the
// real strategies): it records what it is asked and leaves its mark on
// the object.
type fakeRegistry struct {
	calls []string
	fail  *corev1.Status
}

func (r *fakeRegistry) PrepareCreate(_ context.Context, user *corev1.UserInfo, sub string, obj *corev1.Unstructured) ([]string, *corev1.Status) {
	r.calls = append(r.calls, "create "+user.GetUsername()+" "+sub+" "+obj.GetMetadata().GetName())
	if r.fail != nil {
		return nil, r.fail
	}
	obj.Metadata.Uid, obj.Metadata.Generation = "registry-uid", 1
	obj.Content = []byte(`{"spec":{"defaulted":true}}`)
	return []string{"a warning"}, nil
}

func (r *fakeRegistry) PrepareUpdate(_ context.Context, user *corev1.UserInfo, sub string, obj, old *corev1.Unstructured) ([]string, *corev1.Status) {
	r.calls = append(r.calls, "update "+user.GetUsername()+" "+sub+" "+obj.GetMetadata().GetName()+" old "+old.GetMetadata().GetUid())
	if r.fail != nil {
		return nil, r.fail
	}
	obj.Metadata.Uid, obj.Metadata.Generation = old.GetMetadata().GetUid(), 5
	return nil, nil
}

func deployment(name string) *corev1.Unstructured {
	d := objects.Deployments.New().(*corev1.Unstructured)
	d.Metadata = &corev1.ObjectMeta{Name: name}
	d.Content = []byte(`{"spec":{}}`)
	return d
}

// TestGenericWrites: a generic kind's writes go through the registry, and
// what it leaves is stored as it left it (uid and generation are its
// own); its warnings reach the client; its refusal stores nothing.
func TestGenericWrites(t *testing.T) {
	f := newFixture(t)
	reg := &fakeRegistry{}
	f.s.cfg.Registry = reg
	ctx := context.Background()

	st, out := f.s.objectAs(ctx, masters, objectReq("", "create", "deployments.apps", "team", deployment("web")))
	if st.GetCode() != 201 || len(st.GetWarnings()) != 1 || st.GetWarnings()[0] != "a warning" {
		t.Fatalf("create: %v", st)
	}
	stored, err := f.env.Store.GetKind(ctx, objects.Deployments, "team", "web")
	if err != nil {
		t.Fatal(err)
	}
	u := stored.(*corev1.Unstructured)
	if u.GetMetadata().GetUid() != "registry-uid" || u.GetMetadata().GetGeneration() != 1 || string(u.GetContent()) != `{"spec":{"defaulted":true}}` ||
		u.GetMetadata().GetCreationTimestamp() != nil {
		t.Fatalf("stored %v", u)
	}
	if !proto.Equal(out, stored) {
		t.Fatalf("answered %v, stored %v", out, stored)
	}

	st, _ = f.s.objectAs(ctx, masters, objectReq("", "update", "deployments.apps", "team", deployment("web")))
	if st.GetCode() != 200 {
		t.Fatalf("update: %v", st)
	}
	stored, _ = f.env.Store.GetKind(ctx, objects.Deployments, "team", "web")
	if g := stored.GetMetadata().GetGeneration(); g != 5 {
		t.Fatalf("generation %d, want the registry's 5 (the api stage must not count it)", g)
	}
	req := objectReq("", "update", "deployments.apps", "team", deployment("web"))
	req.Subresource = "status"
	if st, _ := f.s.objectAs(ctx, masters, req); st.GetCode() != 200 {
		t.Fatalf("status update: %v", st)
	}
	want := []string{"create admin  web", "update admin  web old registry-uid", "update admin status web old registry-uid"}
	if strings.Join(reg.calls, "|") != strings.Join(want, "|") {
		t.Fatalf("registry calls %q, want %q", reg.calls, want)
	}

	reg.fail = &corev1.Status{Status: "Failure", Code: 422, Reason: "Invalid", Message: "Deployment.apps \"db\" is invalid"}
	if st, _ := f.s.objectAs(ctx, masters, objectReq("", "create", "deployments.apps", "team", deployment("db"))); st.GetCode() != 422 {
		t.Fatalf("refused create: %v", st)
	}
	if _, err := f.env.Store.GetKind(ctx, objects.Deployments, "team", "db"); err == nil {
		t.Fatal("a refused create was stored")
	}
}

// TestGenericRefusals: a generic object whose bytes name another kind
// than the request (authorized for one, it would be stored as the other),
// a subresource the kind does not have, a write through a subresource
// RBAC does not grant, and any generic write without a registry are
// refused, and nothing is stored.
func TestGenericRefusals(t *testing.T) {
	f := newFixture(t)
	f.s.cfg.Registry = &fakeRegistry{}
	ctx := context.Background()

	rc := objects.ReplicationControllers.New().(*corev1.Unstructured)
	rc.Metadata = &corev1.ObjectMeta{Name: "web"}
	if st, _ := f.s.objectAs(ctx, masters, objectReq("", "create", "deployments.apps", "team", rc)); st.GetCode() != 400 ||
		!strings.Contains(st.GetMessage(), "the object is v1 ReplicationController; apps/v1 Deployment expected") {
		t.Fatalf("kind mismatch: %v", st)
	}
	for _, k := range []objects.Kind{objects.Deployments, objects.ReplicationControllers} {
		if _, err := f.env.Store.GetKind(ctx, k, "team", "web"); err == nil {
			t.Fatalf("the mismatched object was stored as %s", k.Resource)
		}
	}

	req := objectReq("", "update", "configmaps", "team", &corev1.ConfigMap{Metadata: &corev1.ObjectMeta{Name: "x"}})
	req.Subresource = "status"
	if st, _ := f.s.objectAs(ctx, masters, req); st.GetCode() != 404 {
		t.Fatalf("configmaps/status: %v", st)
	}
	req = objectReq("", "update", "jobs.batch", "team", deployment("x"))
	req.Subresource = "scale"
	if st, _ := f.s.objectAs(ctx, masters, req); st.GetCode() != 404 {
		t.Fatalf("jobs/scale: %v", st)
	}

	for _, verb := range []string{"delete", "create"} {
		req := objectReq("", verb, "deployments.apps", "team", deployment("web"))
		req.Subresource = "status"
		if st, _ := f.s.objectAs(ctx, masters, req); st.GetCode() != 405 {
			t.Fatalf("%s through status: %v", verb, st)
		}
	}

	// alice may do nothing with deployments in team: not even their status.
	if st, _ := f.s.objectAs(ctx, masters, objectReq("", "create", "deployments.apps", "team", deployment("web"))); st.GetCode() != 201 {
		t.Fatal(st)
	}
	alice, _ := f.s.authn.AuthenticateToken(aliceToken)
	req = objectReq("", "update", "deployments.apps", "team", deployment("web"))
	req.Subresource = "status"
	if st, _ := f.s.objectAs(ctx, alice, req); st.GetCode() != 403 || !strings.Contains(st.GetMessage(), `"deployments/status"`) {
		t.Fatalf("alice's deployments/status: %v", st)
	}

	f.s.cfg.Registry = nil
	if st, _ := f.s.objectAs(ctx, masters, objectReq("", "create", "deployments.apps", "team", deployment("db"))); st.GetCode() != 500 {
		t.Fatalf("no registry: %v", st)
	}
	if _, err := f.env.Store.GetKind(ctx, objects.Deployments, "team", "db"); err == nil {
		t.Fatal("stored without a registry")
	}
}

var masters = &corev1.UserInfo{Username: "admin", Groups: []string{"system:masters"}}
