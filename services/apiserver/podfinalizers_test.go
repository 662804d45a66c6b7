package apiserver_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/stage"
)

// TestPodFinalizersUpdate: a pod's finalizers may be removed by an
// update; one held for its finalizers after its node finished it
// (deletionGracePeriodSeconds 0) is deleted when its last finalizer goes,
// as kube-apiserver does; a pod being deleted may not gain a finalizer
// (422, kube's message).
func TestPodFinalizersUpdate(t *testing.T) {
	t.Parallel()
	s := startSystem(t, options{})
	admin := s.client(t, adminToken)
	ctx := context.Background()
	code, body, _ := do(t, admin, "POST", s.url+"/api/v1/namespaces/default/pods", "application/json",
		`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"held","finalizers":["example.com/a","example.com/b"]},"spec":{"containers":[{"name":"c","image":"nginx"}]}}`)
	if code != 201 {
		t.Fatalf("create: %d %v", code, body)
	}
	// Deleted, and its node done: held for its finalizers.
	if _, err := objects.Mutate(ctx, s.store, "default", "held", func(p *corev1.Pod) error {
		p.Metadata.DeletionTimestamp = timestamppb.Now()
		stage.HoldForFinalizers(p)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	url := s.url + "/api/v1/namespaces/default/pods/held"
	patch := "application/merge-patch+json"
	code, body, _ = do(t, admin, "PATCH", url, patch, `{"metadata":{"finalizers":["example.com/a","example.com/b","example.com/c"]}}`)
	if code != 422 || !strings.Contains(path(body, "message").(string), `no new finalizers can be added if the object is being deleted, found new finalizers []string{"example.com/c"}`) {
		t.Errorf("adding a finalizer to a pod being deleted: %d %v", code, body)
	}
	if code, body, _ = do(t, admin, "PATCH", url, patch, `{"metadata":{"finalizers":["example.com/b"]}}`); code != 200 {
		t.Fatalf("removing one finalizer: %d %v", code, body)
	}
	got, err := objects.Get[*corev1.Pod](ctx, s.store, "default", "held")
	if err != nil || len(got.GetMetadata().GetFinalizers()) != 1 {
		t.Fatalf("after removing one finalizer: %v %v, want the pod with example.com/b", got.GetMetadata().GetFinalizers(), err)
	}
	if code, body, _ = do(t, admin, "PATCH", url, patch, `{"metadata":{"finalizers":null}}`); code != 200 {
		t.Fatalf("removing the last finalizer: %d %v", code, body)
	}
	if _, err := objects.Get[*corev1.Pod](ctx, s.store, "default", "held"); !errors.Is(err, raftstore.ErrNotFound) {
		t.Errorf("the held pod after its last finalizer went: %v, want it deleted", err)
	}
}

// TestPodOwnerReferencesPatch: a pod's ownerReferences change with an
// update, as any object's do in kube-apiserver: a strategic merge patch
// adds a reference beside the ones the pod has (merged by uid), a merge
// patch replaces them (the garbage collector's conformance tests make
// pods owned by each other, or by a second ReplicationController, so).
func TestPodOwnerReferencesPatch(t *testing.T) {
	t.Parallel()
	s := startSystem(t, options{})
	admin := s.client(t, adminToken)
	ctx := context.Background()
	code, body, _ := do(t, admin, "POST", s.url+"/api/v1/namespaces/default/pods", "application/json",
		`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"owned","ownerReferences":[{"apiVersion":"v1","kind":"ReplicationController","name":"rc1","uid":"u1","controller":true}]},"spec":{"containers":[{"name":"c","image":"nginx"}]}}`)
	if code != 201 {
		t.Fatalf("create: %d %v", code, body)
	}
	url := s.url + "/api/v1/namespaces/default/pods/owned"
	refs := func() []string {
		t.Helper()
		got, err := objects.Get[*corev1.Pod](ctx, s.store, "default", "owned")
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, r := range got.GetMetadata().GetOwnerReferences() {
			out = append(out, r.GetName()+"/"+r.GetUid())
		}
		return out
	}
	code, body, _ = do(t, admin, "PATCH", url, "application/strategic-merge-patch+json",
		`{"metadata":{"ownerReferences":[{"apiVersion":"v1","kind":"ReplicationController","name":"rc2","uid":"u2"}]}}`)
	if code != 200 {
		t.Fatalf("strategic merge patch: %d %v", code, body)
	}
	if got := strings.Join(refs(), ","); got != "rc2/u2,rc1/u1" && got != "rc1/u1,rc2/u2" {
		t.Fatalf("ownerReferences after the strategic merge patch: %s, want rc1/u1 and rc2/u2", got)
	}
	code, body, _ = do(t, admin, "PATCH", url, "application/merge-patch+json",
		`{"metadata":{"ownerReferences":[{"apiVersion":"v1","kind":"Pod","name":"other","uid":"u3","blockOwnerDeletion":true}]}}`)
	if code != 200 {
		t.Fatalf("merge patch: %d %v", code, body)
	}
	if got := strings.Join(refs(), ","); got != "other/u3" {
		t.Fatalf("ownerReferences after the merge patch: %s, want other/u3", got)
	}
}
