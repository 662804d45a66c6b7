package apiserver_test

import (
	"fmt"
	"testing"
)

// TestLimitRangeAppliedAtOnce: a pod created right after a LimitRange (no
// pause, on a fresh namespace) gets its defaults, end to end over HTTPS.
// (A cache in the same process is usually quick enough here too;
// admission's TestLimitRangeFromTheStore holds its caches back and proves
// the LimitRanges are read from the store.)
func TestLimitRangeAppliedAtOnce(t *testing.T) {
	t.Parallel()
	s := startSystem(t, options{})
	admin := s.client(t, adminToken)
	for i := range 5 {
		ns := fmt.Sprintf("lr-%d", i)
		base := s.url + "/api/v1/namespaces/" + ns
		if code, b, _ := do(t, admin, "POST", s.url+"/api/v1/namespaces", "application/json", fmt.Sprintf(`{"metadata":{"name":%q}}`, ns)); code != 201 {
			t.Fatalf("namespace: %d %v", code, b)
		}
		if code, b, _ := do(t, admin, "POST", base+"/serviceaccounts", "application/json", `{"metadata":{"name":"default"}}`); code != 201 {
			t.Fatalf("serviceaccount: %d %v", code, b)
		}
		if code, b, _ := do(t, admin, "POST", base+"/limitranges", "application/json",
			`{"metadata":{"name":"defaults"},"spec":{"limits":[{"type":"Container","default":{"cpu":"300m","memory":"64Mi"},"defaultRequest":{"cpu":"100m"}}]}}`); code != 201 {
			t.Fatalf("limitrange: %d %v", code, b)
		}
		code, b, _ := do(t, admin, "POST", base+"/pods", "application/json", podJSON("p", ""))
		if code != 201 {
			t.Fatalf("pod: %d %v", code, b)
		}
		c0 := path(b, "spec.containers").([]any)[0].(map[string]any)
		if path(c0, "resources.limits.cpu") != "300m" || path(c0, "resources.requests.cpu") != "100m" || path(c0, "resources.limits.memory") != "64Mi" {
			t.Errorf("pod %s created right after the LimitRange: resources %v", ns, c0["resources"])
		}
	}
}

// TestEventValidation: an Event must be in the namespace of the object it
// is about (kube-apiserver's ValidateEventCreate for v1), on both the
// create and the update.
func TestEventValidation(t *testing.T) {
	t.Parallel()
	s := startSystem(t, options{})
	admin := s.client(t, adminToken)
	events := s.url + "/api/v1/namespaces/default/events"
	code, b, _ := do(t, admin, "POST", events, "application/json",
		`{"metadata":{"name":"e1"},"involvedObject":{"kind":"Pod","namespace":"kube-system","name":"p"},"reason":"R","type":"Normal"}`)
	if want := `Event "e1" is invalid: involvedObject.namespace: Invalid value: "kube-system": does not match event.namespace`; code != 422 || b["message"] != want {
		t.Errorf("an Event about another namespace's pod: %d %v, want 422 %q", code, b, want)
	}
	if code, b, _ = do(t, admin, "POST", events, "application/json",
		`{"metadata":{"name":"e2"},"involvedObject":{"kind":"Node","name":"n1"},"reason":"R","type":"Normal"}`); code != 201 {
		t.Fatalf("an Event about a node, in default: %d %v", code, b)
	}
	code, b, _ = do(t, admin, "PATCH", events+"/e2", "application/merge-patch+json", `{"involvedObject":{"namespace":"kube-system"}}`)
	if code != 422 {
		t.Errorf("an update moving the Event's object to another namespace: %d %v", code, b)
	}
}
