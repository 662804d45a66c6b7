package registry

import (
	"context"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	appsapi "k8s.io/kubernetes/pkg/apis/apps"
)

// NoClaimTemplates completes "podflow does not support …" for a
// StatefulSet's volumeClaimTemplates.
const NoClaimTemplates = "PersistentVolumeClaims: podflow has no storage provisioner, so a StatefulSet cannot have volumeClaimTemplates; use volumes in the pod template"

// statefulSetStrategy is kube-apiserver's StatefulSet strategy that also
// refuses spec.volumeClaimTemplates: podflow has no PersistentVolume
// provisioner and refuses pods with persistentVolumeClaim volumes, so
// such a set's pods could never be made. The refusal is a 422 Invalid
// naming the field, as kube-apiserver refuses what it does not allow,
// rather than a set that never gets pods.
type statefulSetStrategy struct{ both }

func (s statefulSetStrategy) Validate(ctx context.Context, obj runtime.Object) field.ErrorList {
	return append(s.both.Validate(ctx, obj), refuseClaimTemplates(obj)...)
}

func (s statefulSetStrategy) ValidateUpdate(ctx context.Context, obj, old runtime.Object) field.ErrorList {
	return append(s.both.ValidateUpdate(ctx, obj, old), refuseClaimTemplates(obj)...)
}

func refuseClaimTemplates(obj runtime.Object) field.ErrorList {
	set, ok := obj.(*appsapi.StatefulSet)
	if !ok || len(set.Spec.VolumeClaimTemplates) == 0 {
		return nil
	}
	return field.ErrorList{field.Forbidden(field.NewPath("spec", "volumeClaimTemplates"), "podflow does not support "+NoClaimTemplates)}
}
