package nodeagent

import (
	corev1 "github.com/podflow/podflow/proto/corev1"
)

// podflow's nodes have no CSI drivers (no driver registers with the node
// agent, as none registers with kubelet's plugin watcher). A pod with a
// csi volume is accepted by the API, as Kubernetes accepts it whatever
// drivers its nodes have, and its volume never mounts: kubelet's csi
// plugin fails the mount with a transient error, reported as FailedMount
// and retried with back-off, and the pod stays ContainerCreating until it
// is deleted.

// csiMountError is the error kubelet's csi plugin gives the volume
// manager for an inline volume of driver that is not registered
// (csiMountMgr.SetUpAt, csi_client.go's "not found in the list of
// registered CSI drivers"), wrapped as the operation generator wraps it.
func csiMountError(v *corev1.Volume) error {
	return Errorf(CodeMount, "MountVolume.SetUp failed for volume %q : kubernetes.io/csi: mounter.SetUpAt failed to get CSI client: "+
		"driver name %s not found in the list of registered CSI drivers", v.GetName(), v.GetCsi().GetDriver())
}
