package apiserver_test

import (
	"fmt"
	"strings"
	"testing"
)

// TestServiceStatusSubresource: services/status, as kube-apiserver's
// service StatusREST (the conformance test "should complete a service
// status lifecycle"): GET serves the Service; a merge patch writes the
// load balancer status and an annotation and keeps the spec; an update
// adds a condition; a status kube's ValidateServiceStatusUpdate refuses
// is 422; a plain update keeps the status; it needs its own permission.
func TestServiceStatusSubresource(t *testing.T) {
	t.Parallel()
	s := startSystem(t, options{})
	admin, alice := s.client(t, adminToken), s.client(t, aliceToken)
	svcs := s.url + "/api/v1/namespaces/default/services"
	if code, b, _ := do(t, admin, "POST", svcs, "application/json",
		`{"metadata":{"name":"lb"},"spec":{"type":"LoadBalancer","loadBalancerClass":"example.com/internal-vip","ports":[{"name":"http","port":80}]},"status":{"loadBalancer":{"ingress":[{"ip":"198.51.100.9"}]}}}`); code != 201 {
		t.Fatalf("create: %d %v", code, b)
	} else if path(b, "status.loadBalancer.ingress") != nil {
		t.Errorf("a create set the status: %v", path(b, "status"))
	}
	code, b, _ := do(t, admin, "GET", svcs+"/lb/status", "", "")
	if code != 200 || path(b, "kind") != "Service" || path(b, "spec.type") != "LoadBalancer" {
		t.Fatalf("get status: %d %v", code, b)
	}
	clusterIP := path(b, "spec.clusterIP")

	code, b, _ = do(t, admin, "PATCH", svcs+"/lb/status", "application/merge-patch+json",
		`{"metadata":{"annotations":{"patchedstatus":"true"}},"spec":{"type":"ClusterIP"},"status":{"loadBalancer":{"ingress":[{"ip":"203.0.113.1"}]}}}`)
	if code != 200 || fmt.Sprint(path(b, "status.loadBalancer.ingress")) != "[map[ip:203.0.113.1 ipMode:VIP]]" ||
		path(b, "metadata.annotations.patchedstatus") != "true" || path(b, "spec.type") != "LoadBalancer" || path(b, "spec.clusterIP") != clusterIP {
		t.Fatalf("patch status: %d %v", code, b)
	}

	rv := path(b, "metadata.resourceVersion")
	code, b, _ = do(t, admin, "PUT", svcs+"/lb/status", "application/json", fmt.Sprintf(
		`{"apiVersion":"v1","kind":"Service","metadata":{"name":"lb","resourceVersion":%q,"annotations":{"patchedstatus":"true"}},"spec":{"type":"LoadBalancer","ports":[{"name":"http","port":80}]},"status":{"loadBalancer":{"ingress":[{"ip":"203.0.113.1"}]},"conditions":[{"type":"StatusUpdate","status":"True","reason":"E2E","message":"Set from e2e test"}]}}`, rv))
	if code != 200 || !strings.Contains(fmt.Sprint(path(b, "status.conditions")), "StatusUpdate") {
		t.Fatalf("update status: %d %v", code, b)
	}

	code, b, _ = do(t, admin, "PATCH", svcs+"/lb/status", "application/merge-patch+json",
		`{"status":{"loadBalancer":{"ingress":[{"ip":"not-an-ip"}]}}}`)
	if msg, _ := b["message"].(string); code != 422 || !strings.Contains(msg, `status.loadBalancer.ingress[0].ip: Invalid value: "not-an-ip"`) {
		t.Errorf("invalid ingress IP: %d %v, want 422 naming status.loadBalancer.ingress[0].ip", code, b)
	}

	// A plain update (labels) keeps the status written through status.
	code, b, _ = do(t, admin, "PATCH", svcs+"/lb", "application/strategic-merge-patch+json",
		`{"metadata":{"labels":{"test-service":"patched"}},"status":{"loadBalancer":{}}}`)
	if code != 200 || path(b, "metadata.labels.test-service") != "patched" || fmt.Sprint(path(b, "status.loadBalancer.ingress")) != "[map[ip:203.0.113.1 ipMode:VIP]]" {
		t.Fatalf("patch the service: %d %v", code, b)
	}

	if code, b, _ := do(t, alice, "PATCH", svcs+"/lb/status", "application/merge-patch+json", `{"status":{}}`); code != 403 {
		t.Errorf("alice without patch on services/status: %d %v", code, b)
	}
}
