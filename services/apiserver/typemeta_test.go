package apiserver_test

import (
	"bufio"
	"encoding/json"
	"net/http"
	"testing"
)

// TestTypeMetaDefaulted: a create or update body without apiVersion and
// kind (the Python client's objects) takes them from the URL, as
// kube-apiserver decodes with the URL's kind as the default; a body of
// another kind or version is refused with kube-apiserver's message.
func TestTypeMetaDefaulted(t *testing.T) {
	t.Parallel()
	s := startSystem(t, options{})
	admin := s.client(t, adminToken)
	cms := s.url + "/api/v1/namespaces/default/configmaps"

	code, body, _ := do(t, admin, "POST", cms, "application/json", `{"metadata":{"name":"bare"},"data":{"a":"1"}}`)
	if code != 201 || body["kind"] != "ConfigMap" || body["apiVersion"] != "v1" || path(body, "data.a") != "1" {
		t.Fatalf("create without apiVersion and kind: %d %v", code, body)
	}
	code, body, _ = do(t, admin, "POST", cms, "application/json", `{"kind":"","metadata":{"name":"empty-kind"}}`)
	if code != 201 || body["kind"] != "ConfigMap" {
		t.Fatalf("create with an empty kind: %d %v", code, body)
	}
	code, body, _ = do(t, admin, "POST", cms, "application/yaml", "metadata:\n  name: yaml-bare\ndata:\n  a: \"2\"\n")
	if code != 201 || path(body, "data.a") != "2" {
		t.Fatalf("YAML create without apiVersion and kind: %d %v", code, body)
	}
	code, body, _ = do(t, admin, "POST", s.url+"/apis/rbac.authorization.k8s.io/v1/clusterroles", "application/json",
		`{"metadata":{"name":"bare-role"},"rules":[{"apiGroups":[""],"resources":["pods"],"verbs":["get"]}]}`)
	if code != 201 || body["apiVersion"] != "rbac.authorization.k8s.io/v1" || body["kind"] != "ClusterRole" {
		t.Fatalf("ClusterRole without apiVersion and kind: %d %v", code, body)
	}
	code, body, _ = do(t, admin, "PUT", cms+"/bare", "application/json", `{"metadata":{"name":"bare"},"data":{"a":"3"}}`)
	if code != 200 || path(body, "data.a") != "3" {
		t.Fatalf("update without apiVersion and kind: %d %v", code, body)
	}

	for _, c := range []struct{ body, message string }{
		{`{"apiVersion":"v1","kind":"Secret","metadata":{"name":"x"}}`,
			`Secret in version "v1" cannot be handled as a ConfigMap: converting (v1.Secret) to (core.ConfigMap): unknown conversion`},
		{`{"kind":"Role","metadata":{"name":"x"}}`,
			`Role in version "v1" cannot be handled as a ConfigMap: converting (v1.Role) to (core.ConfigMap): unknown conversion`},
		{`{"apiVersion":"v2","metadata":{"name":"x"}}`,
			`ConfigMap in version "v2" cannot be handled as a ConfigMap: no kind "ConfigMap" is registered for version "v2" in scheme "pkg/api/legacyscheme/scheme.go:30"`},
	} {
		code, body, _ := do(t, admin, "POST", cms, "application/json", c.body)
		if code != 400 || body["message"] != c.message {
			t.Errorf("POST %s: %d %v, want 400 %q", c.body, code, body, c.message)
		}
	}
}

// TestWatchParameter: watch=True (the Python client), watch=1 and an
// empty value are watches, as kube-apiserver parses booleans; false and 0
// (any case) are lists.
func TestWatchParameter(t *testing.T) {
	t.Parallel()
	s := startSystem(t, options{})
	admin := s.client(t, adminToken)
	cms := s.url + "/api/v1/namespaces/default/configmaps"
	if code, b, _ := do(t, admin, "POST", cms, "application/json", `{"metadata":{"name":"w"}}`); code != 201 {
		t.Fatalf("create: %d %v", code, b)
	}
	for _, c := range []struct {
		value string
		watch bool
	}{{"True", true}, {"true", true}, {"1", true}, {"", true}, {"yes", true}, {"False", false}, {"0", false}, {"FALSE", false}} {
		resp, err := admin.Get(cms + "?timeoutSeconds=1&watch=" + c.value)
		if err != nil {
			t.Fatal(err)
		}
		var first map[string]any
		err = json.NewDecoder(bufio.NewReader(resp.Body)).Decode(&first)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("watch=%q: %d %v", c.value, resp.StatusCode, err)
		}
		isWatch := first["type"] == "ADDED" && path(first, "object.metadata.name") == "w"
		isList := first["kind"] == "ConfigMapList"
		if isWatch != c.watch || isList == c.watch {
			t.Errorf("watch=%q answered %v, want a watch: %v", c.value, first, c.watch)
		}
	}
}
