package apiserver_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/podflow/podflow/bus/bustest"
)

// TestNamespaceSubresources: namespaces/status changes the status and
// keeps the spec, with kube-apiserver's phase rule; namespaces/finalize
// (PUT only) changes spec.finalizers and keeps the status, with its
// finalizer name rule; emptying a terminating namespace's finalizers
// through finalize lets the namespace controller remove it (how a stuck
// namespace is released); each needs update on its subresource.
func TestNamespaceSubresources(t *testing.T) {
	t.Parallel()
	s := startSystem(t, options{})
	admin, alice := s.client(t, adminToken), s.client(t, aliceToken)
	ns := s.url + "/api/v1/namespaces"
	if code, b, _ := do(t, admin, "POST", ns, "application/json", `{"metadata":{"name":"team"}}`); code != 201 {
		t.Fatalf("create: %d %v", code, b)
	}
	code, b, _ := do(t, admin, "GET", ns+"/team/status", "", "")
	if code != 200 || path(b, "status.phase") != "Active" || fmt.Sprint(path(b, "spec.finalizers")) != "[kubernetes]" {
		t.Fatalf("get status: %d %v", code, b)
	}

	// status: a condition is written, the spec (finalizers) is not.
	code, b, _ = do(t, admin, "PATCH", ns+"/team/status", "application/merge-patch+json",
		`{"spec":{"finalizers":[]},"status":{"conditions":[{"type":"Audited","status":"True","reason":"ByTest"}]}}`)
	if code != 200 || fmt.Sprint(path(b, "spec.finalizers")) != "[kubernetes]" || !strings.Contains(fmt.Sprint(path(b, "status.conditions")), "Audited") {
		t.Fatalf("patch status: %d %v", code, b)
	}
	code, b, _ = do(t, admin, "PATCH", ns+"/team/status", "application/merge-patch+json", `{"status":{"phase":"Terminating"}}`)
	if want := "Namespace \"team\" is invalid: status.Phase: Invalid value: \"Terminating\": may only be 'Active' if `deletionTimestamp` is empty"; code != 422 || b["message"] != want {
		t.Errorf("status phase Terminating without deletionTimestamp: %d %v, want 422 %q", code, b, want)
	}
	// The plain update keeps the status, the status update keeps the spec.
	code, b, _ = do(t, admin, "GET", ns+"/team", "", "")
	if !strings.Contains(fmt.Sprint(path(b, "status.conditions")), "Audited") {
		t.Errorf("the condition written through status is gone: %v", b)
	}

	// finalize: PUT only; finalizer names are checked; status kept.
	code, b, _ = do(t, admin, "PATCH", ns+"/team/finalize", "application/merge-patch+json", `{"spec":{"finalizers":[]}}`)
	if code != 405 {
		t.Errorf("PATCH finalize: %d %v, want 405", code, b)
	}
	code, b, _ = do(t, admin, "PUT", ns+"/team/finalize", "application/json",
		`{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"team"},"spec":{"finalizers":["kubernetes","mine"]}}`)
	if want := `Namespace "team" is invalid: spec.finalizers[1]: Invalid value: "mine": name is neither a standard finalizer name nor is it fully qualified`; code != 422 || b["message"] != want {
		t.Errorf("finalize with an unqualified name: %d %v, want 422 %q", code, b, want)
	}
	code, b, _ = do(t, admin, "PUT", ns+"/team/finalize", "application/json",
		`{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"team"},"spec":{"finalizers":["kubernetes","example.com/hold"]},"status":{"phase":"Terminating"}}`)
	if code != 200 || fmt.Sprint(path(b, "spec.finalizers")) != "[kubernetes example.com/hold]" || path(b, "status.phase") != "Active" {
		t.Fatalf("finalize: %d %v", code, b)
	}
	if code, b, _ := do(t, alice, "PUT", ns+"/team/finalize", "application/json", `{"metadata":{"name":"team"},"spec":{}}`); code != 403 {
		t.Errorf("alice without update on namespaces/finalize: %d %v", code, b)
	}
	if code, b, _ := do(t, alice, "GET", ns+"/team/status", "", ""); code != 403 {
		t.Errorf("alice without get on namespaces/status: %d %v", code, b)
	}

	// Deleted, the namespace waits for example.com/hold; finalizing it
	// away lets the controller remove the namespace.
	if code, b, _ := do(t, admin, "DELETE", ns+"/team", "", ""); code != 200 {
		t.Fatalf("delete: %d %v", code, b)
	}
	bustest.Eventually(t, "the namespace controller done with its finalizer", func() bool {
		_, b, _ := do(t, admin, "GET", ns+"/team", "", "")
		return fmt.Sprint(path(b, "spec.finalizers")) == "[example.com/hold]"
	})
	code, b, _ = do(t, admin, "PUT", ns+"/team/finalize", "application/json", `{"metadata":{"name":"team"},"spec":{"finalizers":[]}}`)
	if code != 200 {
		t.Fatalf("finalize to none: %d %v", code, b)
	}
	bustest.Eventually(t, "the namespace removed", func() bool {
		code, _, _ := do(t, admin, "GET", ns+"/team", "", "")
		return code == 404
	})
}
