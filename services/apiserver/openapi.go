package apiserver

import (
	"net/http"
	"strings"
	"sync"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	k8scorev1 "k8s.io/api/core/v1"
	k8seventsv1 "k8s.io/api/events/v1"
	"k8s.io/client-go/openapi/openapitest"
	metricsv1beta1 "k8s.io/metrics/pkg/apis/metrics/v1beta1"
)

// openAPIHash versions the OpenAPI documents (clients cache by it); bump it
// when the served resources change.
const openAPIHash = "podflow-3"

// openAPIRoot is /openapi/v3: one document per group version.
func openAPIRoot() map[string]any {
	paths := map[string]any{}
	for gv := range resources {
		p := gvPath(gv)
		paths[p] = map[string]string{"serverRelativeURL": "/openapi/v3/" + p + "?hash=" + openAPIHash}
	}
	return map[string]any{"paths": paths}
}

func gvPath(gv string) string {
	if gv == "v1" {
		return "api/v1"
	}
	return "apis/" + gv
}

// openAPIDoc is the OpenAPI v3 document of one group version. It is not a
// schema of the objects: it declares the operations, their
// x-kubernetes-group-version-kind and the fieldValidation parameter, which
// is what kubectl reads to choose server-side field validation (the server
// then rejects unknown fields itself, naming their path).
func openAPIDoc(gv string) map[string]any {
	paths := map[string]any{}
	fv := map[string]any{"name": "fieldValidation", "in": "query", "schema": map[string]any{"type": "string", "uniqueItems": true},
		"description": "Strict, Warn or Ignore: how to treat unknown and duplicate fields."}
	dry := map[string]any{"name": "dryRun", "in": "query", "schema": map[string]any{"type": "string", "uniqueItems": true}}
	resp := map[string]any{"200": map[string]any{"description": "OK"}}
	for _, r := range resources[gv] {
		group, version, _ := strings.Cut(gv, "/")
		if version == "" {
			group, version = "", gv
		}
		gvk := map[string]string{"group": group, "version": version, "kind": r.kind}
		op := func(id string, params ...any) map[string]any {
			return map[string]any{"operationId": id + r.kind, "x-kubernetes-group-version-kind": gvk, "parameters": params, "responses": resp}
		}
		base := "/" + gvPath(gv) + "/"
		if r.namespaced {
			base += "namespaces/{namespace}/"
		}
		coll, item := base+r.name, base+r.name+"/{name}"
		if r.store.Name == "" || r.readOnly {
			if r.store.Name == "" && !r.metrics {
				paths[coll] = map[string]any{"post": op("create", fv, dry)}
			} else {
				paths[coll] = map[string]any{"get": op("list")}
				paths[item] = map[string]any{"get": op("read")}
			}
			continue
		}
		paths[coll] = map[string]any{"get": op("list"), "post": op("create", fv, dry)}
		paths[item] = map[string]any{"get": op("read"), "put": op("replace", fv, dry), "patch": op("patch", fv, dry), "delete": op("delete", dry)}
	}
	return map[string]any{"openapi": "3.0.0", "info": map[string]any{"title": "Kubernetes", "version": versionInfo.GitVersion}, "paths": paths,
		"components": map[string]any{"schemas": generatedSchemas(gv)}}
}

// generatedSchemas are the component schemas of a group version's kinds,
// generated from their Go types (openapi_schema.go).
func generatedSchemas(gv string) map[string]map[string]any {
	g := &schemaGen{schemas: map[string]map[string]any{}}
	group, version, _ := strings.Cut(gv, "/")
	if version == "" {
		group, version = "", gv
	}
	for _, r := range resources[gv] {
		if obj := goType(r); obj != nil {
			g.kind(obj, group, version, r.kind)
			continue
		}
		// podflow's own kinds have no Go type: any object of its kind.
		g.schemas[group+"."+version+"."+r.kind] = map[string]any{"type": "object", "x-kubernetes-preserve-unknown-fields": true,
			"x-kubernetes-group-version-kind": []any{map[string]any{"group": group, "version": version, "kind": r.kind}}}
	}
	return g.schemas
}

// goType is a new value of the Go type of r's Kubernetes form; nil for
// podflow's own kinds.
func goType(r *resource) any {
	switch r.groupVersion() + "/" + r.kind {
	case "events.k8s.io/v1/Event":
		return &k8seventsv1.Event{}
	case "authorization.k8s.io/v1/SelfSubjectAccessReview":
		return &authorizationv1.SelfSubjectAccessReview{}
	case "authorization.k8s.io/v1/SelfSubjectRulesReview":
		return &authorizationv1.SelfSubjectRulesReview{}
	case "authentication.k8s.io/v1/SelfSubjectReview":
		return &authenticationv1.SelfSubjectReview{}
	case "v1/Endpoints":
		return &k8scorev1.Endpoints{}
	case "metrics.k8s.io/v1beta1/PodMetrics":
		return &metricsv1beta1.PodMetrics{}
	case "metrics.k8s.io/v1beta1/NodeMetrics":
		return &metricsv1beta1.NodeMetrics{}
	}
	if f := kubeTypes[r.kind]; f != nil {
		return f()
	}
	return nil
}

// openAPIUpstream holds Kubernetes' own OpenAPI v3 documents of the group
// versions a Go module ships them for (client-go's openapitest: core/v1
// and discovery.k8s.io/v1, with every field's description), served as
// they are: kubectl explain shows their documentation.
var openAPIUpstream = sync.OnceValue(func() map[string][]byte {
	out := map[string][]byte{}
	paths, err := openapitest.NewEmbeddedFileClient().Paths()
	if err != nil {
		return out
	}
	for _, p := range []string{"api/v1", "apis/discovery.k8s.io/v1"} {
		if gv, ok := paths[p]; ok {
			if b, err := gv.Schema("application/json"); err == nil {
				out[p] = b
			}
		}
	}
	return out
})

// serveOpenAPI answers /openapi/v2 (openapi_v2.go), /openapi/v3 and
// /openapi/v3/<gv path>.
func serveOpenAPI(w http.ResponseWriter, r *http.Request, path string) bool {
	if path == "/openapi/v2" {
		serveOpenAPIV2(w, r)
		return true
	}
	rest, ok := strings.CutPrefix(path, "/openapi/v3")
	if !ok {
		return false
	}
	if rest == "" {
		writeJSON(w, http.StatusOK, openAPIRoot())
		return true
	}
	rest = strings.TrimPrefix(rest, "/")
	var gv string
	switch {
	case rest == "api/v1":
		gv = "v1"
	case strings.HasPrefix(rest, "apis/"):
		gv = strings.TrimPrefix(rest, "apis/")
	}
	if _, ok := resources[gv]; !ok {
		writeStatus(w, notFoundPath(r.URL.Path))
		return true
	}
	w.Header().Set("Cache-Control", "public, immutable")
	if b, ok := openAPIUpstream()[rest]; ok {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(b)
		return true
	}
	writeJSON(w, http.StatusOK, openAPIDoc(gv))
	return true
}
