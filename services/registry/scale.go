package registry

import (
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/kubernetes/pkg/apis/apps"
	"k8s.io/kubernetes/pkg/apis/autoscaling"
	autoscalingvalidation "k8s.io/kubernetes/pkg/apis/autoscaling/validation"
	api "k8s.io/kubernetes/pkg/apis/core"
)

// validateScale validates the Scale a write through the scale
// subresource asks for (in: the object with its new replicas), as
// kube-apiserver's ScaleREST does before it updates the object.
func validateScale(in runtime.Object) error {
	var replicas int32
	var md *metav1.ObjectMeta
	switch o := in.(type) {
	case *apps.Deployment:
		replicas, md = o.Spec.Replicas, &o.ObjectMeta
	case *apps.ReplicaSet:
		replicas, md = o.Spec.Replicas, &o.ObjectMeta
	case *apps.StatefulSet:
		replicas, md = o.Spec.Replicas, &o.ObjectMeta
	case *api.ReplicationController:
		if o.Spec.Replicas != nil {
			replicas = *o.Spec.Replicas
		}
		md = &o.ObjectMeta
	default:
		return apierrors.NewNotFound(autoscaling.Resource("scale"), fmt.Sprintf("%T", in))
	}
	scale := &autoscaling.Scale{ObjectMeta: metav1.ObjectMeta{Name: md.Name, Namespace: md.Namespace}, Spec: autoscaling.ScaleSpec{Replicas: replicas}}
	if errs := autoscalingvalidation.ValidateScale(scale); len(errs) > 0 {
		return apierrors.NewInvalid(autoscaling.Kind("Scale"), md.Name, errs)
	}
	return nil
}
