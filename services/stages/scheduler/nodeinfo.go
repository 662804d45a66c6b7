package scheduler

import (
	"fmt"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/podrules"
)

// Well-known taints (Kubernetes' node lifecycle taints).
const (
	TaintNodeNotReady      = "node.kubernetes.io/not-ready"
	TaintNodeUnreachable   = "node.kubernetes.io/unreachable"
	TaintNodeUnschedulable = "node.kubernetes.io/unschedulable"
)

// Taint effects and toleration operators.
const (
	EffectNoSchedule       = "NoSchedule"
	EffectPreferNoSchedule = "PreferNoSchedule"
	EffectNoExecute        = "NoExecute"
	OpEqual                = "Equal"
	OpExists               = "Exists"
)

// HostPort is a host port a pod's container binds, sanitised as
// kube-scheduler does: an empty IP is "0.0.0.0", an empty protocol "TCP".
type HostPort struct {
	IP       string
	Protocol string
	Port     int32
}

const bindAllHostIP = "0.0.0.0"

func newHostPort(p *corev1.ContainerPort) HostPort {
	hp := HostPort{IP: p.GetHostIp(), Protocol: p.GetProtocol(), Port: p.GetHostPort()}
	if hp.IP == "" {
		hp.IP = bindAllHostIP
	}
	if hp.Protocol == "" {
		hp.Protocol = "TCP"
	}
	return hp
}

// podHostPorts lists the host ports of a pod's containers (init containers
// are not counted, as in kube-scheduler).
func podHostPorts(pod *corev1.Pod) []HostPort {
	var out []HostPort
	for _, c := range pod.GetSpec().GetContainers() {
		for _, p := range c.GetPorts() {
			if p.GetHostPort() > 0 {
				out = append(out, newHostPort(p))
			}
		}
	}
	return out
}

// conflicts reports whether want collides with a used port: same protocol
// and port, and either side binds 0.0.0.0 or both bind the same IP.
func (want HostPort) conflicts(used []HostPort) bool {
	for _, u := range used {
		if u.Port == want.Port && u.Protocol == want.Protocol &&
			(want.IP == bindAllHostIP || u.IP == bindAllHostIP || u.IP == want.IP) {
			return true
		}
	}
	return false
}

// taint is a node taint with TaintToleration's rejection of it built
// once, so that filtering allocates nothing.
type taint struct {
	key, value, effect string
	status             *Status // "node(s) had untolerated taint {key: value}"
}

func newTaint(key, value, effect string) taint {
	return taint{key: key, value: value, effect: effect,
		status: NewStatus(UnschedulableAndUnresolvable, fmt.Sprintf("node(s) had untolerated taint {%s: %s}", key, value))}
}

// NodeInfo is the scheduler's view of one node: what it offers and what the
// pods bound or assumed on it request. A NodeInfo in a Snapshot is read-only.
//
// The fields the filters and scores read for every node come first, to
// share cache lines: a cycle runs each plugin over a chunk of nodes in
// turn, so a field on a line of its own costs a cache miss per node.
type NodeInfo struct {
	unschedulable    bool
	ready            bool
	preferTaints     int32 // number of PreferNoSchedule taints
	numPods          int
	allocatable      Resources
	requested        Resources
	nonZeroRequested Resources
	images           []nodeImage // sorted by id; immutable
	taints           []taint     // spec taints plus readiness; immutable
	labels           map[string]string
	usedPorts        []HostPort // copy-on-write: never modified in place
	name             string
	node             *corev1.Node
	generation       int64
	// pods are the node's pods for PodTopologySpread and InterPodAffinity;
	// appended to in place (a snapshot's copy never sees past its length),
	// copied on removal.
	pods []*podMeta
	// podsWithAffinity counts the pods with pod affinity or anti-affinity,
	// podsWithRequiredAnti those with required anti-affinity.
	podsWithAffinity, podsWithRequiredAnti int32
}

// nodeImage is an image a node has. id is the cache's number for the name
// (so that scoring compares integers, not strings).
type nodeImage struct {
	id   int32
	size int64
	name string
}

// setNode replaces the node-derived fields, keeping the pod accounting.
func (n *NodeInfo) setNode(node *corev1.Node) error {
	name := node.GetMetadata().GetName()
	if name == "" {
		return fmt.Errorf("%w: node without a name", ErrInvalidObject)
	}
	alloc, err := NodeAllocatable(node)
	if err != nil {
		return err
	}
	n.node, n.name, n.allocatable = node, name, alloc
	n.labels = node.GetMetadata().GetLabels()
	n.unschedulable = node.GetSpec().GetUnschedulable()

	n.ready = false
	readyStatus := podrules.NodeCondition(node, podrules.NodeReady).GetStatus()
	n.ready = readyStatus == "True"

	n.taints, n.preferTaints = nil, 0
	hasNotReady := false
	for _, t := range node.GetSpec().GetTaints() {
		n.taints = append(n.taints, newTaint(t.GetKey(), t.GetValue(), t.GetEffect()))
		if t.GetEffect() == EffectPreferNoSchedule {
			n.preferTaints++
		}
		if (t.GetKey() == TaintNodeNotReady || t.GetKey() == TaintNodeUnreachable) && t.GetEffect() == EffectNoSchedule {
			hasNotReady = true
		}
	}
	// Kubernetes' node lifecycle controller taints a node whose Ready
	// condition is not True; do the same so that readiness is filtered, and
	// tolerated, exactly like the taint.
	if !n.ready && !hasNotReady {
		key := TaintNodeNotReady
		if readyStatus == "Unknown" {
			key = TaintNodeUnreachable
		}
		n.taints = append(n.taints, newTaint(key, "", EffectNoSchedule))
	}

	// Images get their ids when the node enters a cache.
	n.images = nil
	seen := map[string]bool{}
	for _, img := range node.GetStatus().GetImages() {
		for _, name := range img.GetNames() {
			if !seen[name] {
				seen[name] = true
				n.images = append(n.images, nodeImage{size: img.GetSizeBytes(), name: name})
			}
		}
	}
	return nil
}

// imageSize looks an image up by id.
func (n *NodeInfo) imageSize(id int32) (int64, bool) {
	for i := range n.images {
		switch img := &n.images[i]; {
		case img.id == id:
			return img.size, true
		case img.id > id:
			return 0, false
		}
	}
	return 0, false
}

// Name returns the node's name.
func (n *NodeInfo) Name() string { return n.name }

// Node returns the node object; callers must not modify it.
func (n *NodeInfo) Node() *corev1.Node { return n.node }

// Allocatable returns what the node offers to pods.
func (n *NodeInfo) Allocatable() Resources { return n.allocatable }

// Requested returns the sum of the requests of the node's pods.
func (n *NodeInfo) Requested() Resources { return n.requested }

// NonZeroRequested returns Requested with the scoring defaults for
// containers that request no cpu or memory.
func (n *NodeInfo) NonZeroRequested() Resources { return n.nonZeroRequested }

// NumPods returns the number of pods bound or assumed on the node.
func (n *NodeInfo) NumPods() int { return n.numPods }

// UsedPorts returns the host ports the node's pods bind; read-only.
func (n *NodeInfo) UsedPorts() []HostPort { return n.usedPorts }

// Ready reports whether the node's Ready condition is True.
func (n *NodeInfo) Ready() bool { return n.ready }

// Unschedulable reports the node's spec.unschedulable.
func (n *NodeInfo) Unschedulable() bool { return n.unschedulable }

// Generation increases whenever the node or its pods change.
func (n *NodeInfo) Generation() int64 { return n.generation }

// clone returns a copy of n that addPod and removePod may change without
// touching n (its pods are clipped, so that an append copies them).
func (n *NodeInfo) clone() *NodeInfo {
	c := *n
	c.pods = c.pods[:len(c.pods):len(c.pods)]
	return &c
}

// addPod accounts for a pod on the node.
func (n *NodeInfo) addPod(p *podEntry) {
	n.requested.Add(p.req)
	n.nonZeroRequested.Add(p.nonZero)
	n.numPods++
	if n.pods == nil {
		n.pods = make([]*podMeta, 0, 4) // one allocation for most nodes
	}
	n.pods = append(n.pods, &p.meta)
	if a := p.meta.affinity; a != nil {
		n.podsWithAffinity++
		if len(a.requiredAnti) > 0 {
			n.podsWithRequiredAnti++
		}
	}
	if len(p.ports) > 0 {
		used := make([]HostPort, 0, len(n.usedPorts)+len(p.ports))
		n.usedPorts = append(append(used, n.usedPorts...), p.ports...)
	}
}

// removePod undoes addPod.
func (n *NodeInfo) removePod(p *podEntry) {
	n.requested.Sub(p.req)
	n.nonZeroRequested.Sub(p.nonZero)
	n.numPods--
	pods := make([]*podMeta, 0, len(n.pods))
	for _, m := range n.pods {
		if m != &p.meta {
			pods = append(pods, m)
		}
	}
	n.pods = pods
	if a := p.meta.affinity; a != nil {
		n.podsWithAffinity--
		if len(a.requiredAnti) > 0 {
			n.podsWithRequiredAnti--
		}
	}
	if len(p.ports) > 0 {
		used := make([]HostPort, 0, len(n.usedPorts))
		remove := append([]HostPort(nil), p.ports...)
		for _, u := range n.usedPorts {
			if i := indexOf(remove, u); i >= 0 {
				remove = append(remove[:i], remove[i+1:]...)
				continue
			}
			used = append(used, u)
		}
		n.usedPorts = used
	}
}

func indexOf(ports []HostPort, p HostPort) int {
	for i, q := range ports {
		if q == p {
			return i
		}
	}
	return -1
}
