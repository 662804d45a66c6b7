package apiserver_test

import (
	"testing"
)

// TestSchedulingGatesRemovedNotAdded: an update may remove a pod's
// scheduling gates (the scheduler then takes it), never add one.
func TestSchedulingGatesRemovedNotAdded(t *testing.T) {
	t.Parallel()
	s := startSystem(t, options{})
	admin := s.client(t, adminToken)
	pods := s.url + "/api/v1/namespaces/default/pods"
	code, body, _ := do(t, admin, "POST", pods, "application/json",
		`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"gated"},"spec":{"schedulingGates":[{"name":"a"},{"name":"b"}],"containers":[{"name":"c","image":"nginx"}]}}`)
	if code != 201 {
		t.Fatalf("create: %d %v", code, body)
	}
	code, body, _ = do(t, admin, "PATCH", pods+"/gated", "application/json-patch+json", `[{"op":"remove","path":"/spec/schedulingGates/0"}]`)
	if code != 200 {
		t.Fatalf("remove a gate: %d %v", code, body)
	}
	if gates, _ := path(body, "spec.schedulingGates").([]any); len(gates) != 1 || path(gates[0].(map[string]any), "name") != "b" {
		t.Fatalf("gates after removing a: %v", path(body, "spec.schedulingGates"))
	}
	code, body, _ = do(t, admin, "PATCH", pods+"/gated", "application/json-patch+json", `[{"op":"add","path":"/spec/schedulingGates/-","value":{"name":"c"}}]`)
	if code != 422 {
		t.Fatalf("add a gate: %d %v, want 422", code, body)
	}
	code, body, _ = do(t, admin, "PATCH", pods+"/gated", "application/merge-patch+json", `{"spec":{"schedulingGates":null}}`)
	if code != 200 || path(body, "spec.schedulingGates") != nil {
		t.Fatalf("remove the last gate: %d %v", code, path(body, "spec.schedulingGates"))
	}
}
