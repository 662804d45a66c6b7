package nodeagent

import (
	"sync"

	"github.com/podflow/podflow/proto/corev1"
)

// Kubelet's admission of a pod's host ports (pkg/kubelet/lifecycle
// predicate.go: the scheduler's NodePorts filter run by the node): a pod
// asking for a host port that a pod the node already admitted holds is
// rejected, Failed with reason NodePorts, never started. This is what
// keeps a pod bound by spec.nodeName (past the scheduler) off a taken port.
const (
	reasonNodePorts = "NodePorts"
	// msgNodePorts is kubelet's PredicateFailureError for the NodePorts
	// filter ("Predicate %s failed: %s" with the filter's ErrReason).
	msgNodePorts = "Predicate NodePorts failed: node(s) didn't have free ports for the requested pod ports"
)

// hostPort is one host port a container asks for, as the scheduler's
// HostPortInfo keys it: the IP ("0.0.0.0" when unset), protocol (TCP when
// unset) and port.
type hostPort struct {
	ip, protocol string
	port         int32
}

// conflicts reports whether p and q cannot both be bound: the same port
// and protocol on the same IP, or on any IP when either is 0.0.0.0
// (HostPortInfo.CheckConflict).
func (p hostPort) conflicts(q hostPort) bool {
	if p.port != q.port || p.protocol != q.protocol {
		return false
	}
	return p.ip == q.ip || p.ip == "0.0.0.0" || q.ip == "0.0.0.0"
}

// podHostPorts lists the host ports of pod's containers (init containers
// included, as the scheduler counts them).
func podHostPorts(pod *corev1.Pod) []hostPort {
	var out []hostPort
	add := func(cs []*corev1.Container) {
		for _, c := range cs {
			for _, p := range c.GetPorts() {
				if p.GetHostPort() <= 0 {
					continue
				}
				hp := hostPort{ip: p.GetHostIp(), protocol: p.GetProtocol(), port: p.GetHostPort()}
				if hp.ip == "" {
					hp.ip = "0.0.0.0"
				}
				if hp.protocol == "" {
					hp.protocol = "TCP"
				}
				out = append(out, hp)
			}
		}
	}
	add(pod.GetSpec().GetInitContainers())
	add(pod.GetSpec().GetContainers())
	return out
}

// hostPorts is the node's admitted pods' host ports, by pod uid. It is
// safe for concurrent use by the workers.
type hostPorts struct {
	mu   sync.Mutex
	held map[string][]hostPort
}

func newHostPorts() *hostPorts { return &hostPorts{held: map[string][]hostPort{}} }

// admit records the host ports of pod uid unless one of them conflicts
// with a port another admitted pod holds; it reports whether it did. A pod
// already admitted is admitted again. A pod without host ports conflicts
// with none and is not recorded: nearly every pod has none, and an entry
// cost ~100 bytes a pod.
func (h *hostPorts) admit(uid string, pod *corev1.Pod) bool {
	want := podHostPorts(pod)
	if len(want) == 0 {
		return true
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.held[uid]; ok {
		return true
	}
	for other, ports := range h.held {
		if other == uid {
			continue
		}
		for _, p := range ports {
			for _, q := range want {
				if p.conflicts(q) {
					return false
				}
			}
		}
	}
	h.held[uid] = want
	return true
}

// hold records pod uid's host ports whatever they conflict with (a pod
// the node already runs, adopted after a restart of the agent).
func (h *hostPorts) hold(uid string, pod *corev1.Pod) {
	ports := podHostPorts(pod)
	if len(ports) == 0 {
		return // as admit: nothing to hold
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.held[uid] = ports
}

// release forgets pod uid's host ports (it finished or is gone).
func (h *hostPorts) release(uid string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.held, uid)
}
