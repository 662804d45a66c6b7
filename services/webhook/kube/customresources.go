package kube

import (
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/kubernetes/pkg/api/legacyscheme"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/crd"
	"github.com/podflow/podflow/services/objects"
)

// CustomResources finds the definition of a custom resource kind
// (crd.Catalog): admission converts custom resources between its served
// versions with the definition's converter, as kube-apiserver's custom
// resource handler does.
type CustomResources interface {
	ForKind(group, kind string) (*crd.Definition, bool)
}

var _ CustomResources = (*crd.Catalog)(nil)

// customResource is the definition of r's kind when it is a custom
// resource of a definition a.cfg.CustomResources knows (nil otherwise).
func (a *Admission) customResource(k objects.Kind, objs ...objects.Object) *crd.Definition {
	if a.cfg.CustomResources == nil || !k.Replaceable() {
		return nil
	}
	for _, o := range objs {
		if _, ok := o.(*corev1.Unstructured); ok {
			d, ok := a.cfg.CustomResources.ForKind(k.APIGroup, k.Name)
			if !ok {
				return nil
			}
			return d
		}
	}
	return nil
}

// toVersion is u in version of d (u itself when it is in that version).
func toVersion(d *crd.Definition, u runtime.Object, version string) (runtime.Object, error) {
	uu, ok := u.(*unstructured.Unstructured)
	if !ok || uu.GroupVersionKind().Version == version {
		return u, nil
	}
	out, err := d.Convert(uu, version)
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	return out, nil
}

// crInterfaces are the admission ObjectInterfaces of a write of one
// custom resource kind, as kube-apiserver's custom resource handler gives
// them: objects of d's kind are *unstructured.Unstructured in any served
// version, converted by d's converter (conversion None rewrites the
// apiVersion; Webhook calls the definition's conversion webhook), and
// every served version of d's resource is equivalent (matchPolicy
// Equivalent). Anything else is legacyscheme's.
type crInterfaces struct {
	d     *crd.Definition
	equiv runtime.EquivalentResourceMapper
}

var (
	_ admission.ObjectInterfaces       = crInterfaces{}
	_ runtime.ObjectCreater            = crInterfaces{}
	_ runtime.ObjectConvertor          = crInterfaces{}
	_ runtime.EquivalentResourceMapper = crInterfaces{}
)

func (c crInterfaces) GetObjectCreater() runtime.ObjectCreater     { return c }
func (c crInterfaces) GetObjectTyper() runtime.ObjectTyper         { return legacyscheme.Scheme }
func (c crInterfaces) GetObjectDefaulter() runtime.ObjectDefaulter { return legacyscheme.Scheme }
func (c crInterfaces) GetObjectConvertor() runtime.ObjectConvertor { return c }
func (c crInterfaces) GetEquivalentResourceMapper() runtime.EquivalentResourceMapper {
	return c
}

func (c crInterfaces) mine(gk schema.GroupKind) bool {
	return gk.Group == c.d.Group() && gk.Kind == c.d.Names().Kind
}

// New implements runtime.ObjectCreater.
func (c crInterfaces) New(gvk schema.GroupVersionKind) (runtime.Object, error) {
	if !c.mine(gvk.GroupKind()) {
		return legacyscheme.Scheme.New(gvk)
	}
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(gvk)
	return u, nil
}

// Convert implements runtime.ObjectConvertor: an object of d's kind into
// an Unstructured, to that one's version.
func (c crInterfaces) Convert(in, out, context any) error {
	uin, okIn := in.(*unstructured.Unstructured)
	uout, okOut := out.(*unstructured.Unstructured)
	if !okIn || !okOut || !c.mine(uin.GroupVersionKind().GroupKind()) {
		return legacyscheme.Scheme.Convert(in, out, context)
	}
	gvk := uout.GroupVersionKind()
	if gvk.Empty() {
		gvk = uin.GroupVersionKind()
	}
	if !c.mine(gvk.GroupKind()) {
		return fmt.Errorf("webhook/kube: convert %s to %s", uin.GroupVersionKind(), gvk)
	}
	conv, err := c.d.Convert(uin, gvk.Version)
	if err != nil {
		return err
	}
	uout.SetUnstructuredContent(conv.UnstructuredContent())
	return nil
}

// ConvertToVersion implements runtime.ObjectConvertor.
func (c crInterfaces) ConvertToVersion(in runtime.Object, gv runtime.GroupVersioner) (runtime.Object, error) {
	u, ok := in.(*unstructured.Unstructured)
	if !ok || !c.mine(u.GroupVersionKind().GroupKind()) {
		return legacyscheme.Scheme.ConvertToVersion(in, gv)
	}
	target, ok := gv.KindForGroupVersionKinds([]schema.GroupVersionKind{u.GroupVersionKind()})
	if !ok || !c.mine(target.GroupKind()) {
		return nil, fmt.Errorf("webhook/kube: %s cannot be converted to %v", u.GroupVersionKind(), gv)
	}
	return c.d.Convert(u, target.Version)
}

// ConvertFieldLabel implements runtime.ObjectConvertor.
func (c crInterfaces) ConvertFieldLabel(gvk schema.GroupVersionKind, label, value string) (string, string, error) {
	if c.mine(gvk.GroupKind()) {
		return label, value, nil
	}
	return legacyscheme.Scheme.ConvertFieldLabel(gvk, label, value)
}

func (c crInterfaces) resource() schema.GroupResource {
	return schema.GroupResource{Group: c.d.Group(), Resource: c.d.Names().Plural}
}

// EquivalentResourcesFor implements runtime.EquivalentResourceMapper:
// every served version of d's resource.
func (c crInterfaces) EquivalentResourcesFor(resource schema.GroupVersionResource, subresource string) []schema.GroupVersionResource {
	if resource.GroupResource() != c.resource() {
		return c.equiv.EquivalentResourcesFor(resource, subresource)
	}
	var out []schema.GroupVersionResource
	for _, v := range c.d.Served() {
		out = append(out, c.resource().WithVersion(v.Name))
	}
	return out
}

// KindFor implements runtime.EquivalentResourceMapper.
func (c crInterfaces) KindFor(resource schema.GroupVersionResource, subresource string) schema.GroupVersionKind {
	if resource.GroupResource() != c.resource() {
		return c.equiv.KindFor(resource, subresource)
	}
	if v, ok := c.d.Version(resource.Version); !ok || !v.Served {
		return schema.GroupVersionKind{}
	}
	if subresource == "scale" {
		return schema.GroupVersionKind{Group: "autoscaling", Version: "v1", Kind: "Scale"}
	}
	return schema.GroupVersionKind{Group: c.d.Group(), Version: resource.Version, Kind: c.d.Names().Kind}
}
