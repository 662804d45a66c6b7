package replicaset

import (
	"fmt"

	apps "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	appsinternal "k8s.io/kubernetes/pkg/apis/apps"
	appsconversion "k8s.io/kubernetes/pkg/apis/apps/v1"
	apiv1 "k8s.io/kubernetes/pkg/apis/core/v1"
)

// rcToRS converts a ReplicationController to the ReplicaSet the
// controller works on, as kube's replication controller does
// (pkg/controller/replication conversion.go, through the internal type).
func rcToRS(rc *v1.ReplicationController) (*apps.ReplicaSet, error) {
	var in appsinternal.ReplicaSet
	if err := apiv1.Convert_v1_ReplicationController_To_apps_ReplicaSet(rc, &in, nil); err != nil {
		return nil, fmt.Errorf("convert ReplicationController %s/%s to a ReplicaSet: %w", rc.Namespace, rc.Name, err)
	}
	out := &apps.ReplicaSet{}
	if err := appsconversion.Convert_apps_ReplicaSet_To_v1_ReplicaSet(&in, out, nil); err != nil {
		return nil, fmt.Errorf("convert ReplicationController %s/%s to a ReplicaSet: %w", rc.Namespace, rc.Name, err)
	}
	return out, nil
}

// rsToRC converts back (kube's convertRStoRC).
func rsToRC(rs *apps.ReplicaSet) (*v1.ReplicationController, error) {
	var in appsinternal.ReplicaSet
	if err := appsconversion.Convert_v1_ReplicaSet_To_apps_ReplicaSet(rs, &in, nil); err != nil {
		return nil, fmt.Errorf("convert ReplicaSet %s/%s to a ReplicationController: %w", rs.Namespace, rs.Name, err)
	}
	rc := &v1.ReplicationController{}
	if err := apiv1.Convert_apps_ReplicaSet_To_v1_ReplicationController(&in, rc, nil); err != nil {
		return nil, fmt.Errorf("convert ReplicaSet %s/%s to a ReplicationController: %w", rs.Namespace, rs.Name, err)
	}
	return rc, nil
}
