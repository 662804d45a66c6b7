package crd

import (
	"fmt"
	"strings"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Scale is the autoscaling/v1 Scale of a custom resource of a version
// with a scale subresource, as kube-apiserver's ScaleREST answers it:
// spec.replicas from specReplicasPath, status.replicas from
// statusReplicasPath, the selector from labelSelectorPath (absent
// fields: 0 and ""). found reports whether specReplicasPath is set (a GET
// of a Scale without it is kube-apiserver's 500).
func (v *Version) Scale(u *unstructured.Unstructured) (sc *autoscalingv1.Scale, found bool, err error) {
	if v.scaleSub == nil {
		return nil, false, fmt.Errorf("crd: %s %s has no scale subresource", v.def.names.Kind, v.Name)
	}
	s := v.scaleSub
	spec, found, err := unstructured.NestedInt64(u.Object, splitPath(s.SpecReplicasPath)...)
	if err != nil {
		return nil, false, err
	}
	status, _, err := unstructured.NestedInt64(u.Object, splitPath(s.StatusReplicasPath)...)
	if err != nil {
		return nil, false, err
	}
	var selector string
	if s.LabelSelectorPath != nil && *s.LabelSelectorPath != "" {
		if selector, _, err = unstructured.NestedString(u.Object, splitPath(*s.LabelSelectorPath)...); err != nil {
			return nil, false, err
		}
	}
	return &autoscalingv1.Scale{
		TypeMeta: metav1.TypeMeta{APIVersion: "autoscaling/v1", Kind: "Scale"},
		ObjectMeta: metav1.ObjectMeta{Name: u.GetName(), Namespace: u.GetNamespace(), UID: u.GetUID(),
			ResourceVersion: u.GetResourceVersion(), CreationTimestamp: u.GetCreationTimestamp()},
		Spec:   autoscalingv1.ScaleSpec{Replicas: int32(spec)},
		Status: autoscalingv1.ScaleStatus{Replicas: int32(status), Selector: selector},
	}, found, nil
}

// SetReplicas sets the specReplicasPath of u (a write through scale).
func (v *Version) SetReplicas(u *unstructured.Unstructured, n int32) error {
	if v.scaleSub == nil {
		return fmt.Errorf("crd: %s %s has no scale subresource", v.def.names.Kind, v.Name)
	}
	return unstructured.SetNestedField(u.Object, int64(n), splitPath(v.scaleSub.SpecReplicasPath)...)
}

// ScaleReplicasMissing is kube-apiserver's answer to a scale of an object
// whose specReplicasPath is not set.
func (v *Version) ScaleReplicasMissing(get bool) error {
	if get {
		return apierrors.NewInternalError(fmt.Errorf("the spec replicas field %q does not exist", v.scaleSub.SpecReplicasPath))
	}
	return apierrors.NewBadRequest(fmt.Sprintf("the spec replicas field %q cannot be empty", v.scaleSub.SpecReplicasPath))
}

func splitPath(p string) []string { return strings.Split(strings.TrimPrefix(p, "."), ".") }
