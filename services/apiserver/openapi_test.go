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
	t.Parallel()
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

	// Every Kubernetes kind served has its generated schema: only
	// podflow's own kinds are any object.
	for gv, ref := range root["paths"].(map[string]any) {
		_, doc, _ := do(t, admin, "GET", s.url+ref.(map[string]any)["serverRelativeURL"].(string), "", "")
		for name, sch := range path(doc, "components.schemas").(map[string]any) {
			sch := sch.(map[string]any)
			if sch["x-kubernetes-group-version-kind"] != nil && !strings.HasPrefix(gv, "apis/podflow.io/") && (sch["properties"] == nil || sch["x-kubernetes-preserve-unknown-fields"] != nil) {
				t.Errorf("%s: %s is not a generated schema: %v", gv, name, sch)
			}
		}
	}

	// The list semantics of the Go types' markers, which client-side
	// apply's strategic merge and structured-merge-diff read.
	_, doc, _ := do(t, admin, "GET", s.url+"/openapi/v3/api/v1", "", "")
	containers, _ := path(doc, "components.schemas").(map[string]any)["io.k8s.api.core.v1.PodSpec"].(map[string]any)["properties"].(map[string]any)["containers"].(map[string]any)
	if got := fmt.Sprintf("%v %v %v %v", containers["x-kubernetes-list-type"], containers["x-kubernetes-list-map-keys"], containers["x-kubernetes-patch-merge-key"],
		containers["x-kubernetes-patch-strategy"]); got != "map [name] name merge" {
		t.Errorf("PodSpec.containers: list-type, map keys, patch merge key and strategy %s", got)
	}
}

// TestOpenAPIExplainKubectl: the stock kubectl explains fields of the
// types podflow serves, with Kubernetes' documentation, from the v3
// documents (its default) and from /openapi/v2 (--output plaintext-openapiv2):
// a sidecar's restartPolicy, which older embedded schemas lack, included.
func TestOpenAPIExplainKubectl(t *testing.T) {
	t.Parallel()
	s := startSystem(t, options{})
	k := newStockKubectl(t, s)
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"explain", "pod.spec.initContainers.restartPolicy"},
			[]string{"FIELD: restartPolicy <string>", "RestartPolicy defines the restart behavior of individual containers", "sidecar"}},
		{[]string{"explain", "pod.spec.initContainers.restartPolicy", "--output", "plaintext-openapiv2"},
			[]string{"FIELD:    restartPolicy <string>", "RestartPolicy defines the restart behavior of individual containers"}},
		{[]string{"explain", "pod.spec.containers"},
			[]string{"FIELD: containers <[]Container>", "List of containers belonging to the pod.", "resizePolicy\t<[]ContainerResizePolicy>", "restartPolicy\t<string>"}},
		{[]string{"explain", "roles.rules.verbs"},
			[]string{"GROUP:      rbac.authorization.k8s.io", "FIELD: verbs <[]string>", "verbs is a list of Verbs that apply to ALL the ResourceKinds"}},
		{[]string{"explain", "podmetrics.containers.usage"},
			[]string{"GROUP:      metrics.k8s.io", "FIELD: usage <map[string]Quantity>", "The memory usage is the memory working set."}},
	} {
		out := k.must("", c.args...)
		for _, w := range c.want {
			if !strings.Contains(out, w) {
				t.Errorf("kubectl %s: no %q in\n%s", strings.Join(c.args, " "), w, out)
			}
		}
	}
}
