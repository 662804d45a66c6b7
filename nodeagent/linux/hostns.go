package linux

import (
	"context"
	"os"

	"github.com/podflow/podflow/nodeagent/linux/cgroups"
	"github.com/podflow/podflow/nodeagent/linux/container"
	"github.com/podflow/podflow/nodeagent/linux/network"
	corev1 "github.com/podflow/podflow/proto/corev1"
)

// podNetwork is the pod's network: for hostNetwork the host's (no
// namespace, veth or address of its own; the pod IP is Config.NodeIP, as
// kubelet reports status.hostIP), otherwise a namespace, veth and IP of
// its own, and its hostPorts published on the node.
func (r *Runtime) podNetwork(ctx context.Context, pd *corev1.Pod) (network.Attachment, error) {
	uid := pd.GetMetadata().GetUid()
	if pd.GetSpec().GetHostNetwork() {
		return network.Attachment{PodUID: uid, IP: r.cfg.NodeIP}, nil
	}
	att, err := r.net.Setup(ctx, uid)
	if err != nil {
		return att, err
	}
	// Its hostPorts, as the CNI portmap plugin after the bridge plugin.
	if err := r.net.SetHostPorts(uid, att.IP, hostPorts(pd)); err != nil {
		return network.Attachment{}, err
	}
	return att, nil
}

// hostsFile is the pod's /etc/hosts: kubelet's managed file, or for a
// hostNetwork pod the node's own /etc/hosts.
func hostsFile(pd *corev1.Pod, att network.Attachment) []byte {
	if pd.GetSpec().GetHostNetwork() {
		if b, err := os.ReadFile("/etc/hosts"); err == nil {
			return b
		}
	}
	return []byte("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n" + att.IP + "\t" + pd.GetMetadata().GetName() + "\n")
}

// withPodNamespaces keeps the host's namespaces the pod asks for, as
// containerd's CRI does: hostPID the PID namespace, hostIPC the IPC
// namespace, hostNetwork the network (NetnsPath "") and UTS namespaces;
// joins the pod's shared PID namespace (shareProcessNamespace) when it has
// one; and gives the container the pod's sysctls (already admitted by
// RunPodSandbox), which its init writes in its own namespaces.
func withPodNamespaces(spec *container.Spec, pd *corev1.Pod, sysctls map[string]string, pidns *container.PIDNamespace) {
	spec.Sysctls = sysctls
	spec.PIDNamespace = pidns
	ps := pd.GetSpec()
	spec.HostPID, spec.HostIPC, spec.HostUTS = ps.GetHostPid(), ps.GetHostIpc(), ps.GetHostNetwork()
	if ps.GetHostNetwork() {
		spec.NetnsPath = ""
	}
}

// pidnsCgroup is the cgroup of a pod's PID namespace holder, below the
// pod's as a container's; no container can have the name (a Kubernetes
// container name is a DNS label).
const pidnsCgroup = "_pidns"

// sharedPIDNamespace starts the holder of the pod's shared PID namespace
// when the pod asks for one (shareProcessNamespace; with hostPID, which
// Kubernetes' validation refuses together with it, the host's wins), in a
// cgroup of the pod's, so that the pod's limits count it and reaping an orphaned pod
// kills it. nil: the containers get PID namespaces of their own.
func (r *Runtime) sharedPIDNamespace(ctx context.Context, pd *corev1.Pod, qos, dir string) (*container.PIDNamespace, error) {
	if !pd.GetSpec().GetShareProcessNamespace() || pd.GetSpec().GetHostPid() {
		return nil, nil
	}
	cg, err := r.cg.EnsureContainer(ctx, pd.GetMetadata().GetUid(), qos, pidnsCgroup, cgroups.ContainerPlan{Name: pidnsCgroup})
	if err != nil {
		return nil, err
	}
	ns, err := container.StartPIDNamespace(ctx, r.cfg.Container, dir)
	if err != nil {
		return nil, err
	}
	if err := cg.Add(ns.PID); err != nil {
		_ = ns.Kill(context.WithoutCancel(ctx))
		return nil, err
	}
	return &ns, nil
}
