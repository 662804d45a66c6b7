package kube

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"

	k8scorev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/kubernetes/pkg/api/legacyscheme"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/manifest"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/registry" // legacyscheme with every built-in group installed
)

// toAttrObject is a stored object as kube-apiserver's admission sees it:
// its internal form, from its k8s.io/api form with the version's defaults
// (what kube-apiserver decodes a request into); a kind without an internal
// type (custom resources) as *unstructured.Unstructured.
func toAttrObject(obj objects.Object) (runtime.Object, error) {
	ext, err := manifest.ToKube(obj)
	if err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	if u, ok := ext.(*unstructured.Unstructured); ok {
		return u, nil
	}
	return toInternal(ext, ext.GetObjectKind().GroupVersionKind())
}

// toInternal defaults ext (of kind gvk) and converts it to its internal
// type; a kind legacyscheme has no internal type for stays as it is.
func toInternal(ext runtime.Object, gvk schema.GroupVersionKind) (runtime.Object, error) {
	sc := legacyscheme.Scheme
	in, err := sc.New(gvk.GroupKind().WithVersion(runtime.APIVersionInternal))
	if err != nil {
		return ext, nil
	}
	ext = ext.DeepCopyObject()
	sc.Default(ext)
	if err := sc.Convert(ext, in, nil); err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	return in, nil
}

// kindOf is the group version kind of a k8s.io/api object.
func kindOf(o runtime.Object) (schema.GroupVersionKind, error) {
	if gvk := o.GetObjectKind().GroupVersionKind(); !gvk.Empty() {
		return gvk, nil
	}
	gvks, _, err := legacyscheme.Scheme.ObjectKinds(o)
	if err != nil {
		return schema.GroupVersionKind{}, err
	}
	return gvks[0], nil
}

// fromAttrObject is the stored form of an object admission left, like
// orig (its kind and version).
func fromAttrObject(in runtime.Object, orig objects.Object) (objects.Object, error) {
	if in == nil {
		return orig, nil
	}
	var ext runtime.Object = in
	if _, ok := in.(*unstructured.Unstructured); !ok {
		k, err := objects.KindOf(orig)
		if err != nil {
			return nil, err
		}
		gv := schema.GroupVersion{Group: k.APIGroup, Version: k.Version}
		if ext, err = legacyscheme.Scheme.ConvertToVersion(in, gv); err != nil {
			return nil, apierrors.NewInternalError(err)
		}
		ext.GetObjectKind().SetGroupVersionKind(gv.WithKind(k.Name))
		normalize(ext)
	}
	if u, ok := ext.(*unstructured.Unstructured); ok && !manifest.HasGoType(u.GetAPIVersion(), u.GetKind()) {
		if _, isGeneric := orig.(*corev1.Unstructured); !isGeneric {
			// podflow's own kind: back through its manifest.
			b, err := json.Marshal(u.Object)
			if err != nil {
				return nil, apierrors.NewInternalError(err)
			}
			objs, err := manifest.Decode(b)
			if err != nil {
				return nil, apierrors.NewBadRequest(err.Error())
			}
			return objs[0].Message.(objects.Object), nil
		}
	}
	m, err := manifest.FromKube(ext)
	if err != nil {
		var me *manifest.Error
		if errors.As(err, &me) {
			// a mutation podflow cannot honour, named by field
			return nil, apierrors.NewBadRequest(fmt.Sprintf("the object as admission mutated it: %v", err))
		}
		return nil, apierrors.NewInternalError(err)
	}
	out, ok := m.(objects.Object)
	if !ok {
		return nil, apierrors.NewInternalError(fmt.Errorf("admission: %T is not a stored object", m))
	}
	return out, nil
}

// replaceObject overwrites dst (an object admission holds) with src of
// the same type.
func replaceObject(dst, src runtime.Object) error {
	if du, ok := dst.(*unstructured.Unstructured); ok {
		su, ok := src.(*unstructured.Unstructured)
		if !ok {
			return fmt.Errorf("webhook/kube: replace %T with %T", dst, src)
		}
		du.SetUnstructuredContent(su.UnstructuredContent())
		return nil
	}
	dv, sv := reflect.ValueOf(dst), reflect.ValueOf(src)
	if dv.Type() != sv.Type() || dv.Kind() != reflect.Pointer {
		return fmt.Errorf("webhook/kube: replace %T with %T", dst, src)
	}
	dv.Elem().Set(sv.Elem())
	return nil
}

// statusOf is the Status of a plugin's error.
func statusOf(err error) *corev1.Status {
	var se *statusError
	if errors.As(err, &se) {
		return se.st
	}
	var as apierrors.APIStatus
	if !errors.As(err, &as) {
		as = apierrors.NewInternalError(err)
	}
	return registry.StatusOf(as.Status())
}

// registerEquivalents records each stored kind's resource (and
// subresources) for matchPolicy Equivalent and the webhooks' kinds.
func registerEquivalents(r runtime.EquivalentResourceRegistry) {
	for _, k := range objects.Kinds() {
		gvr := schema.GroupVersionResource{Group: k.APIGroup, Version: k.Version, Resource: k.Resource}
		gvk := schema.GroupVersionKind{Group: k.APIGroup, Version: k.Version, Kind: k.Name}
		r.RegisterKindFor(gvr, "", gvk)
		for _, sub := range k.Subresources {
			if sub == "scale" {
				r.RegisterKindFor(gvr, sub, schema.GroupVersionKind{Group: "autoscaling", Version: "v1", Kind: "Scale"})
				continue
			}
			r.RegisterKindFor(gvr, sub, gvk)
		}
		if k.Name == objects.Pods.Name {
			for sub, kind := range map[string]string{"status": "Pod", "ephemeralcontainers": "Pod", "attach": "PodAttachOptions",
				"exec": "PodExecOptions", "portforward": "PodPortForwardOptions", "proxy": "PodProxyOptions", "binding": "Binding", "eviction": "Eviction"} {
				g := ""
				if kind == "Eviction" {
					g = "policy"
				}
				r.RegisterKindFor(gvr, sub, schema.GroupVersionKind{Group: g, Version: "v1", Kind: kind})
			}
		}
	}
}

// normalize undoes what the conversion from the internal form adds that
// podflow does not keep: a pod's deprecated spec.serviceAccount, which
// the v1 conversion copies from spec.serviceAccountName (podflow refuses
// the field by name when it is set on its own).
func normalize(o runtime.Object) {
	if p, ok := o.(*k8scorev1.Pod); ok && p.Spec.DeprecatedServiceAccount == p.Spec.ServiceAccountName {
		p.Spec.DeprecatedServiceAccount = ""
	}
}
