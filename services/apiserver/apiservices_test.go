package apiserver_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/podflow/podflow/bus/bustest"
	"github.com/podflow/podflow/services/apiserver"
)

// TestAPIServices: apiregistration.k8s.io/v1 is served as kube-apiserver's
// aggregator serves it. Discovery lists apiservices with its status
// subresource; every built-in group version podflow serves has its Local
// APIService, with kube-apiserver's priorities, the automanaged label and
// Available=True (reason Local); a user's local APIService is made
// Available too, one naming a Service is stored but not made Available
// (podflow proxies to no extension server); kube-aggregator's validation
// refuses a bad one; status is written through /status only.
func TestAPIServices(t *testing.T) {
	t.Parallel()
	s := startSystem(t, options{})
	admin := s.client(t, adminToken)
	base := s.url + "/apis/apiregistration.k8s.io/v1/apiservices"

	code, body, _ := do(t, admin, "GET", s.url+"/apis/apiregistration.k8s.io/v1", "", "")
	if code != 200 || !strings.Contains(fmt.Sprint(body["resources"]), "name:apiservices ") ||
		!strings.Contains(fmt.Sprint(body["resources"]), "name:apiservices/status ") {
		t.Fatalf("discovery of apiregistration.k8s.io/v1: %d %v", code, body)
	}

	code, body, _ = do(t, admin, "GET", s.url+"/openapi/v3/apis/apiregistration.k8s.io/v1", "", "")
	if schemas, _ := path(body, "components.schemas").(map[string]any); code != 200 || schemas["io.k8s.kube-aggregator.pkg.apis.apiregistration.v1.APIService"] == nil {
		t.Errorf("OpenAPI v3 of apiregistration.k8s.io/v1: %d, no APIService schema", code)
	}

	names := apiserver.LocalAPIServiceNames()
	for _, want := range []string{"v1.", "v1.apps", "v1.apiextensions.k8s.io", "v1.rbac.authorization.k8s.io", "v1.flowcontrol.apiserver.k8s.io"} {
		if !slices.Contains(names, want) {
			t.Errorf("local APIServices %v lack %s", names, want)
		}
	}
	if slices.Contains(names, "v1beta1.metrics.k8s.io") || slices.Contains(names, "v1.apiregistration.k8s.io") {
		t.Errorf("local APIServices %v: kube-apiserver registers none for metrics.k8s.io or apiregistration.k8s.io", names)
	}
	available := func(obj map[string]any) bool {
		conds, _ := path(obj, "status.conditions").([]any)
		for _, c := range conds {
			c := c.(map[string]any)
			if c["type"] == "Available" {
				return c["status"] == "True" && c["reason"] == "Local" && c["message"] == "Local APIServices are always available"
			}
		}
		return false
	}
	bustest.Eventually(t, "every built-in group version's APIService, Available", func() bool {
		code, list, _ := do(t, admin, "GET", base, "", "")
		if code != 200 {
			return false
		}
		items, _ := list["items"].([]any)
		got := map[string]map[string]any{}
		for _, it := range items {
			obj := it.(map[string]any)
			got[path(obj, "metadata.name").(string)] = obj
		}
		for _, n := range names {
			if !available(got[n]) {
				return false
			}
		}
		return true
	})
	code, core, _ := do(t, admin, "GET", base+"/v1.", "", "")
	if code != 200 || path(core, "spec.group") != nil || path(core, "spec.version") != "v1" || path(core, "spec.groupPriorityMinimum") != float64(18000) ||
		path(core, "spec.versionPriority") != float64(1) {
		t.Fatalf("v1.: %d %v", code, core)
	}
	if l, _ := path(core, "metadata.labels").(map[string]any); l[apiserver.AutomanagedLabel] != "onstart" {
		t.Errorf("v1. labels %v, want %s=onstart", l, apiserver.AutomanagedLabel)
	}
	if code, apps, _ := do(t, admin, "GET", base+"/v1.apps", "", ""); code != 200 || path(apps, "spec.group") != "apps" ||
		path(apps, "spec.groupPriorityMinimum") != float64(17800) || path(apps, "spec.versionPriority") != float64(15) {
		t.Errorf("v1.apps: %d %v", code, apps)
	}

	// A user's local APIService.
	code, body, _ = do(t, admin, "POST", base, "application/json",
		`{"apiVersion":"apiregistration.k8s.io/v1","kind":"APIService","metadata":{"name":"v1alpha1.example.com"},`+
			`"spec":{"group":"example.com","version":"v1alpha1","groupPriorityMinimum":1000,"versionPriority":15},`+
			`"status":{"conditions":[{"type":"Available","status":"False","reason":"Mine"}]}}`)
	if code != 201 || !available(body) {
		t.Fatalf("create a local APIService (the status asked for dropped, Available at once, as kube's strategy): %d %v", code, body)
	}
	// A status write that says otherwise is undone by the availability pass.
	code, body, _ = do(t, admin, "PUT", base+"/v1alpha1.example.com/status", "application/json",
		fmt.Sprintf(`{"apiVersion":"apiregistration.k8s.io/v1","kind":"APIService","metadata":{"name":"v1alpha1.example.com","resourceVersion":%q},`+
			`"spec":{"group":"example.com","version":"v1alpha1","groupPriorityMinimum":1000,"versionPriority":15},`+
			`"status":{"conditions":[{"type":"Available","status":"False","reason":"Mine","lastTransitionTime":"2026-01-01T00:00:00Z"}]}}`,
			path(body, "metadata.resourceVersion")))
	if code != 200 || available(body) {
		t.Fatalf("status update of the local APIService: %d %v", code, body)
	}
	bustest.Eventually(t, "the user's local APIService Available again", func() bool {
		code, obj, _ := do(t, admin, "GET", base+"/v1alpha1.example.com", "", "")
		return code == 200 && available(obj)
	})

	// One naming a Service: stored, never made Available here.
	code, body, _ = do(t, admin, "POST", base, "application/json",
		`{"apiVersion":"apiregistration.k8s.io/v1","kind":"APIService","metadata":{"name":"v1alpha1.wardle.example.com"},`+
			`"spec":{"group":"wardle.example.com","version":"v1alpha1","groupPriorityMinimum":2000,"versionPriority":200,`+
			`"service":{"namespace":"default","name":"sample-api","port":7443},"insecureSkipTLSVerify":true}}`)
	if code != 201 || path(body, "spec.service.name") != "sample-api" {
		t.Fatalf("create an APIService naming a Service: %d %v", code, body)
	}

	// kube-aggregator's validation.
	for _, c := range []struct{ name, spec, want string }{
		{"v1alpha1.example.org", `{"group":"example.org","version":"v1alpha1","groupPriorityMinimum":0,"versionPriority":15}`,
			"spec.groupPriorityMinimum: Invalid value: 0: must be positive and less than 20000"},
		{"v2.example.org", `{"group":"example.org","version":"v1","groupPriorityMinimum":10,"versionPriority":15}`,
			"metadata.name: Invalid value: \"v2.example.org\": must be `spec.version+\".\"+spec.group`: \"v1.example.org\""},
		{"v1.example.net", `{"group":"example.net","version":"v1","groupPriorityMinimum":10,"versionPriority":15,"caBundle":"YWJj"}`,
			"spec.caBundle: Invalid value: \"3 bytes\": local APIServices may not have a caBundle"},
	} {
		code, body, _ := do(t, admin, "POST", base, "application/json",
			fmt.Sprintf(`{"apiVersion":"apiregistration.k8s.io/v1","kind":"APIService","metadata":{"name":%q},"spec":%s}`, c.name, c.spec))
		if code != 422 || !strings.Contains(fmt.Sprint(body["message"]), c.want) {
			t.Errorf("create %s: %d %v, want 422 %q", c.name, code, body, c.want)
		}
	}

	// Status through /status; the spec there is ignored.
	_, cur, _ := do(t, admin, "GET", base+"/v1alpha1.wardle.example.com", "", "")
	code, body, _ = do(t, admin, "PUT", base+"/v1alpha1.wardle.example.com/status", "application/json",
		fmt.Sprintf(`{"apiVersion":"apiregistration.k8s.io/v1","kind":"APIService","metadata":{"name":"v1alpha1.wardle.example.com","resourceVersion":%q},`+
			`"spec":{"group":"wardle.example.com","version":"v1alpha1","groupPriorityMinimum":3000,"versionPriority":200,"service":{"namespace":"default","name":"sample-api","port":7443},"insecureSkipTLSVerify":true},`+
			`"status":{"conditions":[{"type":"Available","status":"False","reason":"FailedDiscoveryCheck","message":"no route","lastTransitionTime":"2026-01-01T00:00:00Z"}]}}`,
			path(cur, "metadata.resourceVersion")))
	if code != 200 || path(body, "spec.groupPriorityMinimum") != float64(2000) || path(body, "status.conditions") == nil {
		t.Fatalf("status update: %d %v", code, body)
	}

	if code, body, _ := do(t, admin, "DELETE", base+"/v1alpha1.wardle.example.com", "", ""); code != 200 {
		t.Errorf("delete: %d %v", code, body)
	}
	if code, _, _ := do(t, admin, "GET", base+"/v1alpha1.wardle.example.com", "", ""); code != 404 {
		t.Errorf("after delete: %d", code)
	}
}
