package apiserver_test

import (
	"fmt"
	"strings"
	"testing"
)

// TestOpenAPISchemas: every group version's OpenAPI v3 document has a
// schema for each kind served, found by its group, version and kind as
// kubectl explain finds it.
func TestOpenAPISchemas(t *testing.T) {
	s := startSystem(t, options{})
	admin := s.client(t, adminToken)
	code, root, _ := do(t, admin, "GET", s.url+"/openapi/v3", "", "")
	if code != 200 {
		t.Fatalf("/openapi/v3: %d %v", code, root)
	}
	for _, c := range []struct {
		gv, kind, schema, field string
	}{
		{"api/v1", "Pod", "io.k8s.api.core.v1.Pod", "spec"},
		{"api/v1", "Node", "io.k8s.api.core.v1.Node", "status"},
		{"apis/discovery.k8s.io/v1", "EndpointSlice", "io.k8s.api.discovery.v1.EndpointSlice", "endpoints"},
		{"apis/rbac.authorization.k8s.io/v1", "Role", "io.k8s.api.rbac.v1.Role", "rules"},
		{"apis/events.k8s.io/v1", "Event", "io.k8s.api.events.v1.Event", "regarding"},
		{"apis/authorization.k8s.io/v1", "SelfSubjectAccessReview", "io.k8s.api.authorization.v1.SelfSubjectAccessReview", "spec"},
		{"apis/podflow.io/v1alpha1", "SidecarPolicy", "podflow.io.v1alpha1.SidecarPolicy", ""},
	} {
		t.Run(c.kind, func(t *testing.T) {
			paths := root["paths"].(map[string]any)
			ref, ok := paths[c.gv].(map[string]any)
			if !ok {
				t.Fatalf("the root lists no %s: %v", c.gv, paths)
			}
			code, doc, _ := do(t, admin, "GET", s.url+ref["serverRelativeURL"].(string), "", "")
			if code != 200 {
				t.Fatalf("%s: %d", c.gv, code)
			}
			schemas, _ := path(doc, "components.schemas").(map[string]any)
			sch, _ := schemas[c.schema].(map[string]any)
			if sch == nil {
				t.Fatalf("%s has no schema %s", c.gv, c.schema)
			}
			if gvk := fmt.Sprint(sch["x-kubernetes-group-version-kind"]); !strings.Contains(gvk, "kind:"+c.kind) {
				t.Errorf("%s: x-kubernetes-group-version-kind %s", c.schema, gvk)
			}
			if c.field != "" && path(sch, "properties."+c.field) == nil {
				t.Errorf("%s has no property %s: %v", c.schema, c.field, sch["properties"])
			}
			if c.kind != "Event" && !strings.Contains(fmt.Sprint(doc["paths"]), "fieldValidation") { // events.k8s.io is read-only
				t.Errorf("%s declares no fieldValidation parameter", c.gv)
			}
		})
	}
}
