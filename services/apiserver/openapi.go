package apiserver

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	k8scorev1 "k8s.io/api/core/v1"
	k8seventsv1 "k8s.io/api/events/v1"
	k8sschedulingv1 "k8s.io/api/scheduling/v1"
	"k8s.io/kube-openapi/pkg/builder3"
	"k8s.io/kube-openapi/pkg/common"
	"k8s.io/kube-openapi/pkg/validation/spec"
	metricsv1beta1 "k8s.io/metrics/pkg/apis/metrics/v1beta1"

	"github.com/podflow/podflow/services/apiserver/openapigen"
	"github.com/podflow/podflow/services/stage"
)

// openAPIHash versions the OpenAPI documents (clients cache by it); bump it
// when the served resources change.
const openAPIHash = "podflow-5"

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

// openAPIDoc is the OpenAPI v3 document of one group version: the
// schemas of its kinds (openAPISchemas) and its operations, with their
// x-kubernetes-group-version-kind and the fieldValidation parameter, which
// is what kubectl reads to choose server-side field validation (the server
// then rejects unknown fields itself, naming their path).
func openAPIDoc(gv string) (map[string]any, error) {
	schemas, err := openAPISchemas(gv)
	if err != nil {
		return nil, err
	}
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
		"components": map[string]any{"schemas": schemas}}, nil
}

// openAPIKinds maps each served kind's OpenAPI definition name (its Go
// type's OpenAPIModelName, "io.k8s.api.core.v1.Pod") to the group
// version kinds served with it, and each group version to the
// definitions its document starts from (its kinds and their lists).
type openAPIKindIndex struct {
	gvks  map[string][]any
	names map[string][]string
}

var openAPIKinds = sync.OnceValue(func() openAPIKindIndex {
	defs := openapigen.GetOpenAPIDefinitions(func(string) spec.Ref { return spec.Ref{} })
	ix := openAPIKindIndex{gvks: map[string][]any{}, names: map[string][]string{}}
	for gv, rs := range resources {
		for _, r := range rs {
			obj, ok := goType(r).(interface{ OpenAPIModelName() string })
			if !ok {
				continue
			}
			for _, kind := range []string{r.kind, r.kind + "List"} {
				name := obj.OpenAPIModelName()
				if kind != r.kind {
					name += "List"
				}
				if _, ok := defs[name]; !ok {
					continue
				}
				ix.gvks[name] = append(ix.gvks[name], map[string]any{"group": r.group, "version": r.version, "kind": kind})
				ix.names[gv] = append(ix.names[gv], name)
			}
		}
	}
	for _, l := range ix.gvks {
		sort.Slice(l, func(i, j int) bool { return fmt.Sprint(l[i]) < fmt.Sprint(l[j]) })
	}
	for _, l := range ix.names {
		sort.Strings(l)
	}
	return ix
})

// openAPIDefinitionName names a definition as kube-apiserver does: the
// generated definitions are keyed by their REST-friendly model names
// already; a served kind's carries its x-kubernetes-group-version-kind,
// which kubectl explain looks kinds up by.
func openAPIDefinitionName(name string) (string, spec.Extensions) {
	if gvks := openAPIKinds().gvks[name]; len(gvks) > 0 {
		return name, spec.Extensions{"x-kubernetes-group-version-kind": gvks}
	}
	return name, nil
}

var openAPIInfo = &spec.Info{InfoProps: spec.InfoProps{Title: "Kubernetes", Version: versionInfo.GitVersion}}

// openAPISchemas are the component schemas of a group version's
// document: kube-openapi's builder over the definitions openapi-gen
// generated from the Go types podflow serves (openapigen), with their
// descriptions and list-type/map-keys extensions, and every definition
// they refer to; podflow's own kinds, which have no Go type, are any
// object of their kind.
func openAPISchemas(gv string) (map[string]any, error) {
	defs, err := builder3.BuildOpenAPIDefinitionsForResources(&common.OpenAPIV3Config{Info: openAPIInfo,
		GetDefinitions: openapigen.GetOpenAPIDefinitions, GetDefinitionName: openAPIDefinitionName}, openAPIKinds().names[gv]...)
	if err != nil {
		return nil, fmt.Errorf("apiserver: the OpenAPI v3 schemas of %s: %w", gv, err)
	}
	out := make(map[string]any, len(defs))
	for name, s := range defs {
		out[name] = s
	}
	for name, s := range ownKindSchemas(gv) {
		out[name] = s
	}
	return out, nil
}

// ownKindSchemas are the schemas of podflow's own kinds of a group
// version (no Go type: any object, marked with its kind).
func ownKindSchemas(gv string) map[string]any {
	out := map[string]any{}
	for _, r := range resources[gv] {
		if goType(r) != nil {
			continue
		}
		out[r.group+"."+r.version+"."+r.kind] = map[string]any{"type": "object", "x-kubernetes-preserve-unknown-fields": true,
			"x-kubernetes-group-version-kind": []any{map[string]any{"group": r.group, "version": r.version, "kind": r.kind}}}
	}
	return out
}

// goType is a new value of the Go type of r's Kubernetes form; nil for
// podflow's own kinds.
func goType(r *resource) any {
	switch r.groupVersion() + "/" + r.kind {
	case "events.k8s.io/v1/Event":
		return &k8seventsv1.Event{}
	case "authorization.k8s.io/v1/SelfSubjectAccessReview":
		return &authorizationv1.SelfSubjectAccessReview{}
	case "authorization.k8s.io/v1/SubjectAccessReview":
		return &authorizationv1.SubjectAccessReview{}
	case "authorization.k8s.io/v1/LocalSubjectAccessReview":
		return &authorizationv1.LocalSubjectAccessReview{}
	case "authentication.k8s.io/v1/TokenReview":
		return &authenticationv1.TokenReview{}
	case "authorization.k8s.io/v1/SelfSubjectRulesReview":
		return &authorizationv1.SelfSubjectRulesReview{}
	case "authentication.k8s.io/v1/SelfSubjectReview":
		return &authenticationv1.SelfSubjectReview{}
	case "v1/Endpoints":
		return &k8scorev1.Endpoints{}
	case "scheduling.k8s.io/v1/PriorityClass":
		return &k8sschedulingv1.PriorityClass{}
	case "metrics.k8s.io/v1beta1/PodMetrics":
		return &metricsv1beta1.PodMetrics{}
	case "metrics.k8s.io/v1beta1/NodeMetrics":
		return &metricsv1beta1.NodeMetrics{}
	}
	if f := kubeType(r); f != nil {
		return f()
	}
	return nil
}

// openAPIV3Served are the group versions' documents, encoded once (an
// error when the generated definitions lack one a kind refers to).
var openAPIV3Served = sync.OnceValues(func() (map[string][]byte, error) {
	out := make(map[string][]byte, len(resources))
	for gv := range resources {
		doc, err := openAPIDoc(gv)
		if err != nil {
			return nil, err
		}
		if out[gv], err = json.Marshal(doc); err != nil {
			return nil, err
		}
	}
	return out, nil
})

// serveOpenAPI answers /openapi/v2 (openapi_v2.go), /openapi/v3 and
// /openapi/v3/<gv path>: the built-in kinds' documents and those of the
// established custom resources' group versions.
func (s *Server) serveOpenAPI(w http.ResponseWriter, r *http.Request, path string) bool {
	if path == "/openapi/v2" {
		s.serveOpenAPIV2(w, r)
		return true
	}
	rest, ok := strings.CutPrefix(path, "/openapi/v3")
	if !ok {
		return false
	}
	crs := s.customResources()
	if rest == "" {
		root := openAPIRoot()
		if crs != nil {
			paths := root["paths"].(map[string]any)
			for gv := range crs.discovered {
				if _, builtin := resources[gv]; builtin {
					continue
				}
				doc := crs.crOpenAPIV3(gv)
				paths[gvPath(gv)] = map[string]string{"serverRelativeURL": "/openapi/v3/" + gvPath(gv) + "?hash=" + doc.hash}
			}
		}
		writeJSON(w, http.StatusOK, root)
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
		if crs == nil || crs.discovered[gv] == nil {
			writeStatus(w, notFoundPath(r.URL.Path))
			return true
		}
		doc := crs.crOpenAPIV3(gv)
		if doc.err != nil {
			writeStatus(w, stage.Internal(doc.err))
			return true
		}
		if r.URL.Query().Get("hash") == doc.hash {
			w.Header().Set("Cache-Control", "public, immutable")
		} else {
			w.Header().Set("Cache-Control", "no-cache, private")
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Etag", fmt.Sprintf("%q", doc.hash))
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(doc.body)
		return true
	}
	docs, err := openAPIV3Served()
	if err != nil {
		writeStatus(w, stage.Internal(err))
		return true
	}
	w.Header().Set("Cache-Control", "public, immutable")
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(docs[gv])
	return true
}
