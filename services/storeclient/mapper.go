package storeclient

import (
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/podflow/podflow/services/objects"
)

// RESTMapper maps the stored kinds (objects.Kinds) between kinds and
// resources, each at the one version it is served at; it follows kinds
// registered later (custom resources). Safe for concurrent use.
type RESTMapper struct {
	mu  sync.Mutex
	gen uint64
	m   *meta.DefaultRESTMapper
}

var (
	_ meta.RESTMapper           = (*RESTMapper)(nil)
	_ meta.ResettableRESTMapper = (*RESTMapper)(nil)
)

// NewRESTMapper returns the RESTMapper of the stored kinds.
func NewRESTMapper() *RESTMapper { return &RESTMapper{} }

func (r *RESTMapper) current() *meta.DefaultRESTMapper {
	r.mu.Lock()
	defer r.mu.Unlock()
	if g := objects.Generation(); r.m == nil || g != r.gen {
		m := meta.NewDefaultRESTMapper(nil)
		for _, k := range objects.Kinds() {
			if k.Name == objects.NodeAllocations.Name {
				continue // podflow's accounting, not an API
			}
			scope := meta.RESTScopeRoot
			if k.Namespaced {
				scope = meta.RESTScopeNamespace
			}
			gvk := schema.GroupVersionKind{Group: k.APIGroup, Version: k.Version, Kind: k.Name}
			m.AddSpecific(gvk, gvk.GroupVersion().WithResource(k.Resource), gvk.GroupVersion().WithResource(strings.ToLower(k.Name)), scope)
		}
		r.m, r.gen = m, g
	}
	return r.m
}

// Reset implements meta.ResettableRESTMapper: the next call maps the
// kinds stored then.
func (r *RESTMapper) Reset() {
	r.mu.Lock()
	r.m = nil
	r.mu.Unlock()
}

func (r *RESTMapper) KindFor(resource schema.GroupVersionResource) (schema.GroupVersionKind, error) {
	return r.current().KindFor(resource)
}

func (r *RESTMapper) KindsFor(resource schema.GroupVersionResource) ([]schema.GroupVersionKind, error) {
	return r.current().KindsFor(resource)
}

func (r *RESTMapper) ResourceFor(input schema.GroupVersionResource) (schema.GroupVersionResource, error) {
	return r.current().ResourceFor(input)
}

func (r *RESTMapper) ResourcesFor(input schema.GroupVersionResource) ([]schema.GroupVersionResource, error) {
	return r.current().ResourcesFor(input)
}

func (r *RESTMapper) RESTMapping(gk schema.GroupKind, versions ...string) (*meta.RESTMapping, error) {
	return r.current().RESTMapping(gk, versions...)
}

func (r *RESTMapper) RESTMappings(gk schema.GroupKind, versions ...string) ([]*meta.RESTMapping, error) {
	return r.current().RESTMappings(gk, versions...)
}

func (r *RESTMapper) ResourceSingularizer(resource string) (string, error) {
	return r.current().ResourceSingularizer(resource)
}
