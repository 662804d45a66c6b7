package linux

import (
	"github.com/podflow/podflow/nodeagent/linux/network"
	corev1 "github.com/podflow/podflow/proto/corev1"
)

// hostPorts are the ports pd publishes on its node, as kubelet's sandbox
// port mappings: every port of its app containers with a hostPort (init
// containers publish none). A hostNetwork pod publishes nothing: it binds
// the node's ports itself.
func hostPorts(pd *corev1.Pod) []network.HostPort {
	if pd.GetSpec().GetHostNetwork() {
		return nil
	}
	var out []network.HostPort
	for _, c := range pd.GetSpec().GetContainers() {
		for _, p := range c.GetPorts() {
			if p.GetHostPort() > 0 {
				out = append(out, network.HostPort{HostPort: p.GetHostPort(), ContainerPort: p.GetContainerPort(),
					Protocol: p.GetProtocol(), HostIP: p.GetHostIp()})
			}
		}
	}
	return out
}
