package apiserver_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"k8s.io/kube-openapi/pkg/validation/spec"
)

// get returns the body and headers of a GET with the given request
// headers.
func get(t *testing.T, c *http.Client, url string, hdr ...string) (int, []byte, http.Header) {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b, resp.Header
}

// TestOpenAPIV2: /openapi/v2 is a Swagger 2.0 document that kube-openapi's
// spec parses, with a definition for every kind the v3 documents declare
// (found by its x-kubernetes-group-version-kind, as kubectl explain's v2
// path finds it) whose references resolve; client-go reads its protobuf
// form; other media types are 406 and an unchanged document 304.
func TestOpenAPIV2(t *testing.T) {
	t.Parallel()
	s := startSystem(t, options{})
	admin := s.client(t, adminToken)
	code, b, hdr := get(t, admin, s.url+"/openapi/v2", "Accept", "application/json")
	if code != 200 || hdr.Get("Content-Type") != "application/json" {
		t.Fatalf("/openapi/v2: %d %s %.200s", code, hdr.Get("Content-Type"), b)
	}
	var sw spec.Swagger
	if err := sw.UnmarshalJSON(b); err != nil {
		t.Fatalf("/openapi/v2 does not parse as a Swagger document: %v", err)
	}
	if sw.Swagger != "2.0" || len(sw.Paths.Paths) == 0 {
		t.Fatalf("swagger %q with %d paths", sw.Swagger, len(sw.Paths.Paths))
	}
	byGVK := map[string]string{}
	for name, d := range sw.Definitions {
		l, _ := d.Extensions["x-kubernetes-group-version-kind"].([]any)
		for _, g := range l {
			m := g.(map[string]any)
			byGVK[fmt.Sprintf("%s/%s/%s", m["group"], m["version"], m["kind"])] = name
		}
		// Every reference points at a definition of the document.
		var refs func(s spec.Schema)
		refs = func(s spec.Schema) {
			if p := s.Ref.String(); p != "" {
				if _, ok := sw.Definitions[strings.TrimPrefix(p, "#/definitions/")]; !ok || !strings.HasPrefix(p, "#/definitions/") {
					t.Errorf("%s refers to %s, not a definition", name, p)
				}
			}
			for _, x := range s.AllOf {
				refs(x)
			}
			for _, x := range s.Properties {
				refs(x)
			}
			if s.Items != nil && s.Items.Schema != nil {
				refs(*s.Items.Schema)
			}
			if s.AdditionalProperties != nil && s.AdditionalProperties.Schema != nil {
				refs(*s.AdditionalProperties.Schema)
			}
		}
		refs(d)
	}

	// Every kind a v3 document has a schema for is defined in v2.
	_, root, _ := do(t, admin, "GET", s.url+"/openapi/v3", "", "")
	n := 0
	for _, ref := range root["paths"].(map[string]any) {
		_, doc, _ := do(t, admin, "GET", s.url+ref.(map[string]any)["serverRelativeURL"].(string), "", "")
		for name, sch := range path(doc, "components.schemas").(map[string]any) {
			l, _ := sch.(map[string]any)["x-kubernetes-group-version-kind"].([]any)
			for _, g := range l {
				m := g.(map[string]any)
				gvk := fmt.Sprintf("%s/%s/%s", m["group"], m["version"], m["kind"])
				if byGVK[gvk] != name {
					t.Errorf("v3 defines %s as %s; v2 as %q", gvk, name, byGVK[gvk])
				}
				n++
			}
		}
	}
	if n < 10 {
		t.Fatalf("only %d kinds in the v3 documents", n)
	}
	pod := sw.Definitions[byGVK["/v1/Pod"]]
	containers := sw.Definitions["io.k8s.api.core.v1.PodSpec"].Properties["containers"]
	// A reference is a $ref, not v3's allOf wrapper: kubectl explain's v2
	// path follows only the former.
	if pod.Properties["spec"].Description == "" || containers.Items == nil || containers.Items.Schema.Ref.String() != "#/definitions/io.k8s.api.core.v1.Container" {
		t.Errorf("Pod's spec.containers is not documented Containers: %+v", containers)
	}
	// Shared definitions are Kubernetes' documented ones, whichever
	// group version also generates them.
	if sw.Definitions["io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"].Properties["name"].Description == "" {
		t.Errorf("ObjectMeta is not Kubernetes' documented definition")
	}
	if _, ok := sw.Definitions["io.k8s.api.rbac.v1.Role"].Properties["rules"]; !ok {
		t.Errorf("Role has no rules")
	}

	// client-go asks for the gnostic protobuf, as kubectl does.
	dc, err := discovery.NewDiscoveryClientForConfig(&rest.Config{Host: s.url, BearerToken: adminToken, TLSClientConfig: rest.TLSClientConfig{CAData: s.ca.CertPEM}})
	if err != nil {
		t.Fatal(err)
	}
	pdoc, err := dc.OpenAPISchema()
	if err != nil {
		t.Fatalf("client-go OpenAPISchema (protobuf): %v", err)
	}
	if got := len(pdoc.GetDefinitions().GetAdditionalProperties()); got != len(sw.Definitions) {
		t.Errorf("protobuf document: %d definitions, JSON %d", got, len(sw.Definitions))
	}

	for _, c := range []struct {
		accept, ctype string
		code          int
	}{
		{"application/com.github.proto-openapi.spec.v2.v1.0+protobuf", "application/com.github.proto-openapi.spec.v2.v1.0+protobuf", 200},
		{"application/json;q=0.5, application/com.github.proto-openapi.spec.v2@v1.0+protobuf", "application/com.github.proto-openapi.spec.v2.v1.0+protobuf", 200},
		{"application/com.github.proto-openapi.spec.v2@v1.0+protobuf;q=0.1, */*", "application/json", 200},
		{"text/html", "application/json", 406}, // the Status is JSON
		{"application/json;q=0", "application/json", 406},
	} {
		code, _, hdr := get(t, admin, s.url+"/openapi/v2", "Accept", c.accept)
		if code != c.code || hdr.Get("Content-Type") != c.ctype {
			t.Errorf("Accept %s: %d %s (want %d %s)", c.accept, code, hdr.Get("Content-Type"), c.code, c.ctype)
		}
	}
	if code, _, _ := get(t, admin, s.url+"/openapi/v2", "If-None-Match", hdr.Get("Etag")); code != http.StatusNotModified || hdr.Get("Etag") == "" {
		t.Errorf("revalidating with ETag %s: %d", hdr.Get("Etag"), code)
	}
}
