package podrules

import "strings"

// SysctlNamespace is the namespace a sysctl (dotted name) belongs to, as
// kubelet's pkg/kubelet/sysctl NamespacedBy: "ipc" (kernel.shm*,
// kernel.msg*, kernel.sem, fs.mqueue.*), "net" (net.*), or "" for one that
// is not namespaced: setting it would change the host. The node agent's
// admission and the container runtime's own spec check both ask it.
func SysctlNamespace(name string) string {
	switch {
	case strings.HasPrefix(name, "net."):
		return "net"
	case name == "kernel.sem", strings.HasPrefix(name, "kernel.shm"), strings.HasPrefix(name, "kernel.msg"),
		strings.HasPrefix(name, "fs.mqueue."):
		return "ipc"
	}
	return ""
}
