package disruption

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/podflow/podflow/services/objects"
)

// getScaleController is the last of kube's finders: a pod's controller of
// any other kind, by its scale subresource. podflow's kinds with a scale
// subresource are the four the typed finders read already (Deployment,
// ReplicaSet, StatefulSet, ReplicationController), so another kind is
// refused as kube refuses it: with the RESTMapper's error when the kind is
// not served, else "<resource> does not implement the scale subresource".
// Custom resources' scale subresources are not read: a pod controlled by
// one makes a percentage budget fail its sync (DisruptionAllowed False,
// SyncFailed), and an integer minAvailable works as in kube.
func (dc *Controller) getScaleController(_ context.Context, controllerRef *metav1.OwnerReference, _ string) (*controllerAndScale, error) {
	gv, err := schema.ParseGroupVersion(controllerRef.APIVersion)
	if err != nil {
		return nil, err
	}
	for _, k := range objects.Kinds() {
		if k.APIGroup == gv.Group && k.Name == controllerRef.Kind {
			if k.HasSubresource("scale") {
				return nil, nil // gone, or another uid: as kube's Scales().Get answering NotFound
			}
			gr := schema.GroupResource{Group: k.APIGroup, Resource: k.Resource}
			return nil, fmt.Errorf("%s does not implement the scale subresource", gr.String())
		}
	}
	return nil, fmt.Errorf("no matches for kind %q in version %q", controllerRef.Kind, controllerRef.APIVersion)
}
