package apiserver

// Custom resources: the objects of CustomResourceDefinitions, served from
// the process's crd.Catalog (Config.CustomResources) beside the built-in
// kinds, as kube-apiserver's apiextensions-apiserver serves them behind
// its built-in resources: a definition's objects from the moment its
// names are accepted, in discovery and OpenAPI once it is established.

import (
	"context"
	"crypto/sha512"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	"k8s.io/apiextensions-apiserver/pkg/controller/openapi/builder"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/version"
	"k8s.io/kube-openapi/pkg/spec3"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/crd"
	"github.com/podflow/podflow/services/manifest"
	"github.com/podflow/podflow/services/stage"
)

// crSurface is what the custom resources add to the API at one
// generation of the catalog.
type crSurface struct {
	gen uint64
	// served are the resources of every served version of every
	// servable definition, by group version and plural.
	served map[string]map[string]*resource
	// discovered are those of established definitions, by group version:
	// what discovery and OpenAPI list.
	discovered map[string]map[string]*resource
	// versions are each discovered group's versions, preferred first.
	versions map[string][]string
	groups   []string // the discovered groups, sorted
	// openAPI caches the group versions' OpenAPI v3 documents and the
	// v2 document, built on first use.
	openAPIV3 atomic.Pointer[map[string]openAPIV3Doc]
	openAPIV2 atomic.Pointer[openAPIV2Served]
}

type openAPIV3Doc struct {
	body []byte
	hash string
	err  error
}

// crudVerbsTerminating are a terminating definition's verbs: its objects
// may be read and deleted, not created or changed.
var crudVerbsTerminating = []string{"delete", "deletecollection", "get", "list", "watch"}

// customResources is the surface of the catalog's current generation
// (nil without a catalog).
func (s *Server) customResources() *crSurface {
	cat := s.cfg.CustomResources
	if cat == nil {
		return nil
	}
	gen := cat.Generation()
	if cur := s.crs.Load(); cur != nil && cur.gen == gen {
		return cur
	}
	next := &crSurface{gen: gen, served: map[string]map[string]*resource{}, discovered: map[string]map[string]*resource{},
		versions: map[string][]string{}}
	for _, d := range cat.Servable() {
		names := d.Names()
		verbs := crudVerbs
		if d.Terminating() {
			verbs = crudVerbsTerminating
		}
		for _, v := range d.Served() {
			r := &resource{group: d.Group(), version: v.Name, name: names.Plural, kind: names.Kind, namespaced: d.Namespaced(),
				shortNames: names.ShortNames, categories: names.Categories, verbs: verbs, store: d.Kind, cr: v}
			gv := r.groupVersion()
			if next.served[gv] == nil {
				next.served[gv] = map[string]*resource{}
			}
			next.served[gv][r.name] = r
			if !d.Established() {
				continue
			}
			if next.discovered[gv] == nil {
				next.discovered[gv] = map[string]*resource{}
			}
			next.discovered[gv][r.name] = r
			if !slices.Contains(next.versions[r.group], v.Name) {
				next.versions[r.group] = append(next.versions[r.group], v.Name)
			}
		}
	}
	for g, vs := range next.versions {
		if _, builtin := groupVersions[g]; builtin {
			delete(next.versions, g) // a built-in group is served by its built-in kinds alone
			continue
		}
		sort.SliceStable(vs, func(i, j int) bool { return version.CompareKubeAwareVersionStrings(vs[i], vs[j]) > 0 })
		next.groups = append(next.groups, g)
	}
	sort.Strings(next.groups)
	s.crs.Store(next)
	return next
}

// lookupCustomResource finds a custom resource by group version and
// plural; on a miss it brings the catalog up to the store first (another
// replica may have just accepted its names).
func (s *Server) lookupCustomResource(ctx context.Context, gv, name string) *resource {
	crs := s.customResources()
	if crs == nil {
		return nil
	}
	if r := crs.served[gv][name]; r != nil {
		return r
	}
	s.syncCustomResources(ctx)
	return s.customResources().served[gv][name]
}

// syncCustomResources brings the catalog up to the store (bounded: a
// store that does not answer leaves the catalog as it is).
func (s *Server) syncCustomResources(ctx context.Context) {
	if s.cfg.CustomResources == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := s.cfg.CustomResources.Sync(ctx); err != nil && ctx.Err() == nil {
		s.log.Warn("custom resource definitions: sync with the store", "err", err)
	}
}

// customGroup is the discovery document of a custom resources' group.
func (crs *crSurface) customGroup(group string) (metav1.APIGroup, bool) {
	vs, ok := crs.versions[group]
	if !ok || len(vs) == 0 {
		return metav1.APIGroup{}, false
	}
	g := metav1.APIGroup{TypeMeta: metav1.TypeMeta{Kind: "APIGroup", APIVersion: "v1"}, Name: group}
	for _, v := range vs {
		g.Versions = append(g.Versions, metav1.GroupVersionForDiscovery{GroupVersion: group + "/" + v, Version: v})
	}
	g.PreferredVersion = g.Versions[0]
	return g, true
}

// customResourceList is the discovery document of a custom resources'
// group version (nil when no established definition serves it).
func (crs *crSurface) customResourceList(gv string) *metav1.APIResourceList {
	rs := crs.discovered[gv]
	if len(rs) == 0 {
		return nil
	}
	l := &metav1.APIResourceList{TypeMeta: metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"}, GroupVersion: gv}
	names := make([]string, 0, len(rs))
	for n := range rs {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		r := rs[n]
		l.APIResources = append(l.APIResources, metav1.APIResource{Name: r.name, SingularName: r.cr.Definition().Names().Singular,
			Namespaced: r.namespaced, Kind: r.kind, Verbs: r.verbs, ShortNames: r.shortNames, Categories: r.categories})
		l.APIResources = append(l.APIResources, r.subresources()...)
	}
	return l
}

// customAggregated is the aggregated discovery of the custom resources'
// groups, every version of each (preferred first).
func (crs *crSurface) customAggregated() []apidiscoveryv2.APIGroupDiscovery {
	var out []apidiscoveryv2.APIGroupDiscovery
	for _, g := range crs.groups {
		gd := apidiscoveryv2.APIGroupDiscovery{ObjectMeta: metav1.ObjectMeta{Name: g}}
		for _, v := range crs.versions[g] {
			gd.Versions = append(gd.Versions, versionDiscovery(g, v, crs.customResourceList(g+"/"+v)))
		}
		out = append(out, gd)
	}
	return out
}

// crSubresources are a custom resource version's subresources, as
// apiextensions-apiserver's discovery lists them.
func (r *resource) crSubresources() []metav1.APIResource {
	var out []metav1.APIResource
	if r.cr.HasStatus() {
		out = append(out, metav1.APIResource{Name: r.name + "/status", Namespaced: r.namespaced, Kind: r.kind, Verbs: subresourceVerbs})
	}
	if r.cr.HasScale() {
		out = append(out, metav1.APIResource{Name: r.name + "/scale", Namespaced: r.namespaced, Group: "autoscaling", Version: "v1",
			Kind: "Scale", Verbs: subresourceVerbs})
	}
	return out
}

// crToKube is a stored custom resource as r's version serves it
// (crd.Version.FromStorage: converted, pruned and defaulted).
func (r *resource) crToKube(m objectMessage) (runtime.Object, error) {
	u, err := storedUnstructured(m)
	if err != nil {
		return nil, err
	}
	return r.cr.FromStorage(u)
}

// objectMessage is a stored object as the handlers pass it around.
type objectMessage = interface{ GetMetadata() *corev1.ObjectMeta }

// storedUnstructured is a stored custom resource (a *corev1.Unstructured)
// as an Unstructured of its stored version.
func storedUnstructured(m objectMessage) (*unstructured.Unstructured, error) {
	pu, ok := m.(*corev1.Unstructured)
	if !ok {
		return nil, fmt.Errorf("apiserver: a custom resource stored as %T", m)
	}
	k, err := manifest.ToKube(pu)
	if err != nil {
		return nil, err
	}
	u, ok := k.(*unstructured.Unstructured)
	if !ok {
		return nil, fmt.Errorf("apiserver: %s converted to %T", pu.GetKind(), k)
	}
	return u, nil
}

// decodeCustomResource decodes a request body holding an object of r's
// version (crd.Version.Decode: pruned, coerced and defaulted by its
// schema). Under fieldValidation Strict an unknown or duplicate field is
// 400 naming it; under Warn each is a warning.
func decodeCustomResource(body []byte, r *resource, validation string) (*corev1.Unstructured, []string, *corev1.Status) {
	u, strictErrs, err := r.cr.Decode(body, validation != validationIgnore)
	if err != nil {
		return nil, nil, badRequest("%s in version %q cannot be handled as a %s: %v", r.kind, r.version, r.kind, err)
	}
	if u.GetAPIVersion() != r.groupVersion() || u.GetKind() != r.kind {
		return nil, nil, badRequest("the object in the request body is %s %s; %s %s expected", u.GetAPIVersion(), u.GetKind(), r.groupVersion(), r.kind)
	}
	var warnings []string
	if len(strictErrs) > 0 {
		if validation == validationStrict {
			return nil, nil, badRequest("%s in version %q cannot be handled as a %s: %v", r.kind, r.version, r.kind, crd.StrictError(strictErrs))
		}
		for _, e := range strictErrs {
			warnings = append(warnings, e.Error())
		}
	}
	m, err := manifest.FromKube(u)
	if err != nil {
		return nil, nil, badRequest("%s in version %q cannot be handled as a %s: %v", r.kind, r.version, r.kind, err)
	}
	pu, ok := m.(*corev1.Unstructured)
	if !ok {
		return nil, nil, stage.Internal(fmt.Errorf("apiserver: %s decoded as %T", r.kind, m))
	}
	return pu, warnings, nil
}

// crPatchTypes are the patch media types of custom resources:
// kube-apiserver's, strategic merge patches excepted.
var crPatchTypes = []string{patchJSON, patchMerge, patchApply}

// unsupportedPatch is kube-apiserver's 415 for a patch type a resource
// does not take (a strategic merge patch of a custom resource).
func unsupportedPatch(accepted []string) *corev1.Status {
	return &corev1.Status{Status: "Failure", Code: http.StatusUnsupportedMediaType, Reason: "UnsupportedMediaType",
		Message: "the body of the request was in an unknown format - accepted media types include: " + strings.Join(accepted, ", ")}
}

// crOpenAPIV3 is the OpenAPI v3 document of a custom resources' group
// version: every established definition serving it, merged
// (apiextensions-apiserver's builder.MergeSpecsV3), and its hash.
func (crs *crSurface) crOpenAPIV3(gv string) openAPIV3Doc {
	if docs := crs.openAPIV3.Load(); docs != nil {
		if d, ok := (*docs)[gv]; ok {
			return d
		}
	}
	var specs []*spec3.OpenAPI
	names := make([]string, 0, len(crs.discovered[gv]))
	for n := range crs.discovered[gv] {
		names = append(names, n)
	}
	sort.Strings(names)
	var doc openAPIV3Doc
	for _, n := range names {
		r := crs.discovered[gv][n]
		s, err := r.cr.Definition().OpenAPIV3(r.version)
		if err != nil {
			doc.err = err
			break
		}
		if s != nil {
			specs = append(specs, s)
		}
	}
	if doc.err == nil {
		merged, err := builder.MergeSpecsV3(specs...)
		if err == nil {
			doc.body, err = json.Marshal(merged)
		}
		doc.err = err
		doc.hash = fmt.Sprintf("%X", sha512.Sum512(doc.body))
	}
	for {
		old := crs.openAPIV3.Load()
		next := map[string]openAPIV3Doc{}
		if old != nil {
			for k, v := range *old {
				next[k] = v
			}
		}
		next[gv] = doc
		if crs.openAPIV3.CompareAndSwap(old, &next) {
			return doc
		}
	}
}

// customGroup is the discovery document of a custom resources' group,
// read from the store first when the catalog does not know it.
func (s *Server) customGroup(ctx context.Context, group string) (metav1.APIGroup, bool) {
	crs := s.customResources()
	if crs == nil {
		return metav1.APIGroup{}, false
	}
	if g, ok := crs.customGroup(group); ok {
		return g, true
	}
	s.syncCustomResources(ctx)
	return s.customResources().customGroup(group)
}

// customResourceList is the discovery document of a custom resources'
// group version, read from the store first when the catalog does not
// know it (nil: none).
func (s *Server) customResourceList(ctx context.Context, gv string) *metav1.APIResourceList {
	crs := s.customResources()
	if crs == nil {
		return nil
	}
	if l := crs.customResourceList(gv); l != nil {
		return l
	}
	s.syncCustomResources(ctx)
	return s.customResources().customResourceList(gv)
}

// apiGroupList is /apis: the built-in groups, then the custom
// resources'.
func (s *Server) apiGroupList() *metav1.APIGroupList {
	l := apiGroupList()
	if crs := s.customResources(); crs != nil {
		for _, g := range crs.groups {
			if doc, ok := crs.customGroup(g); ok {
				l.Groups = append(l.Groups, doc)
			}
		}
	}
	return l
}

// builtinOpenAPIV2 is the built-in kinds' /openapi/v2 document as data,
// decoded once, for merging the custom resources' into.
var builtinOpenAPIV2 = sync.OnceValues(func() (map[string]any, error) {
	doc := openAPIV2()
	if doc.err != nil {
		return nil, doc.err
	}
	var m map[string]any
	return m, json.Unmarshal(doc.json, &m)
})

// crOpenAPIV2 is /openapi/v2 with the established custom resources: the
// built-in document, then each definition's paths and the definitions
// it adds (kube-apiserver's builder.MergeSpecs: the built-in ones win).
func (crs *crSurface) crOpenAPIV2() openAPIV2Served {
	if doc := crs.openAPIV2.Load(); doc != nil {
		return *doc
	}
	doc := func() openAPIV2Served {
		base, err := builtinOpenAPIV2()
		if err != nil {
			return openAPIV2Served{err: err}
		}
		defs, paths := map[string]any{}, map[string]any{}
		for k, v := range base["definitions"].(map[string]any) {
			defs[k] = v
		}
		for k, v := range base["paths"].(map[string]any) {
			paths[k] = v
		}
		seen := map[*crd.Definition]bool{}
		for _, rs := range crs.discovered {
			for _, r := range rs {
				d := r.cr.Definition()
				if seen[d] {
					continue
				}
				seen[d] = true
				sw, err := d.OpenAPIV2()
				if err != nil {
					return openAPIV2Served{err: err}
				}
				b, err := json.Marshal(sw)
				if err != nil {
					return openAPIV2Served{err: err}
				}
				var m map[string]any
				if err := json.Unmarshal(b, &m); err != nil {
					return openAPIV2Served{err: err}
				}
				if ds, ok := m["definitions"].(map[string]any); ok {
					for k, v := range ds {
						if _, builtin := defs[k]; !builtin {
							defs[k] = v
						}
					}
				}
				if ps, ok := m["paths"].(map[string]any); ok {
					for k, v := range ps {
						if _, builtin := paths[k]; !builtin {
							paths[k] = v
						}
					}
				}
			}
		}
		out := map[string]any{}
		for k, v := range base {
			out[k] = v
		}
		out["definitions"], out["paths"] = defs, paths
		return encodeOpenAPIV2(out)
	}()
	crs.openAPIV2.Store(&doc)
	return doc
}

// customResourceFields checks a field selector on a custom resource as
// kube-apiserver's custom resource converter does (ConvertFieldLabel):
// metadata.name, metadata.namespace of a namespaced kind and the
// version's selectableFields, anything else 400 "field label not
// supported". The selector is then evaluated on the strategy's
// selectable fields (crd.Version.Attrs).
func (sel *selector) customResourceFields(r *resource) *corev1.Status {
	_, err := sel.fields.Transform(func(label, value string) (string, string, error) {
		switch {
		case label == "metadata.name", r.namespaced && label == "metadata.namespace", slices.Contains(r.cr.SelectableFields(), label):
			return label, value, nil
		}
		return "", "", fmt.Errorf("field label not supported: %s", label)
	})
	if err != nil {
		return badRequest("%v", err)
	}
	sel.cr = r.cr
	return nil
}
