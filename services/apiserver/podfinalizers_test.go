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
