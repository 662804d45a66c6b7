package framework

import (
	"cmp"
	"fmt"
	"slices"

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

func NewHostPort(p *corev1.ContainerPort) HostPort {
	hp := HostPort{IP: p.GetHostIp(), Protocol: p.GetProtocol(), Port: p.GetHostPort()}
	if hp.IP == "" {
		hp.IP = bindAllHostIP
	}
	if hp.Protocol == "" {
		hp.Protocol = "TCP"
	}
	return hp
}

// PodHostPorts lists the host ports of a pod's containers (init containers
// are not counted, as in kube-scheduler).
func PodHostPorts(pod *corev1.Pod) []HostPort {
	var out []HostPort
	for _, c := range pod.GetSpec().GetContainers() {
		for _, p := range c.GetPorts() {
			if p.GetHostPort() > 0 {
				out = append(out, NewHostPort(p))
			}
		}
	}
	return out
}

// conflicts reports whether want collides with a used port: same protocol
// and port, and either side binds 0.0.0.0 or both bind the same IP.
func (want HostPort) Conflicts(used []HostPort) bool {
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
type Taint struct {
	Key, Value, Effect string
	Status             *Status // "node(s) had untolerated taint {key: value}"
}

func NewTaint(key, value, effect string) Taint {
	return Taint{Key: key, Value: value, Effect: effect,
		Status: NewStatus(UnschedulableAndUnresolvable, fmt.Sprintf("node(s) had untolerated taint {%s: %s}", key, value))}
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
	images           []NodeImage // sorted by id; immutable
	taints           []Taint     // spec taints plus readiness; immutable
	labels           map[string]string
	usedPorts        []HostPort // copy-on-write: never modified in place
	name             string
	node             *corev1.Node
	generation       int64
	// departed is the cache's count of departures when a pod last left
	// the node (or the node's entry was made): two views of the node with
	// the same value have the same pods, the later one maybe more.
	departed int64
	// pods are the node's pods for PodTopologySpread and InterPodAffinity;
	// appended to in place (a snapshot's copy never sees past its length),
	// copied on removal.
	pods []*PodMeta
	// podsWithAffinity counts the pods with pod affinity or anti-affinity,
	// podsWithRequiredAnti those with required anti-affinity.
	podsWithAffinity, podsWithRequiredAnti int32
	// scalarAllocatable and scalarRequested are the scalar resources
	// (extended resources, hugepages), read by a pod requesting any:
	// immutable, copy on write.
	scalarAllocatable, scalarRequested Scalars
}

// NodeImage is an image a node has. id is the cache's number for the name
// (so that scoring compares integers, not strings).
type NodeImage struct {
	ID   int32
	Size int64
	Name string
}

// SetNode replaces the node-derived fields, keeping the pod accounting.
func (n *NodeInfo) SetNode(node *corev1.Node) error {
	name := node.GetMetadata().GetName()
	if name == "" {
		return fmt.Errorf("%w: node without a name", ErrInvalidObject)
	}
	alloc, err := NodeAllocatable(node)
	if err != nil {
		return err
	}
	scalars, err := NodeScalars(node)
	if err != nil {
		return fmt.Errorf("node %q allocatable: %w", name, err)
	}
	n.node, n.name, n.allocatable, n.scalarAllocatable = node, name, alloc, scalars
	n.labels = node.GetMetadata().GetLabels()
	n.unschedulable = node.GetSpec().GetUnschedulable()

	n.ready = false
	readyStatus := podrules.NodeCondition(node, podrules.NodeReady).GetStatus()
	n.ready = readyStatus == "True"

	n.taints, n.preferTaints = nil, 0
	hasNotReady := false
	for _, t := range node.GetSpec().GetTaints() {
		n.taints = append(n.taints, NewTaint(t.GetKey(), t.GetValue(), t.GetEffect()))
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
		n.taints = append(n.taints, NewTaint(key, "", EffectNoSchedule))
	}

	// Images get their ids when the node enters a cache.
	n.images = nil
	seen := map[string]bool{}
	for _, img := range node.GetStatus().GetImages() {
		for _, name := range img.GetNames() {
			if !seen[name] {
				seen[name] = true
				n.images = append(n.images, NodeImage{Size: img.GetSizeBytes(), Name: name})
			}
		}
	}
	return nil
}

// ImageSize looks an image up by id.
func (n *NodeInfo) ImageSize(id int32) (int64, bool) {
	for i := range n.images {
		switch img := &n.images[i]; {
		case img.ID == id:
			return img.Size, true
		case img.ID > id:
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

// ScalarAllocatable returns the scalar resources the node offers;
// read-only.
func (n *NodeInfo) ScalarAllocatable() Scalars { return n.scalarAllocatable }

// ScalarRequested returns the sum of the scalar resources the node's pods
// request; read-only.
func (n *NodeInfo) ScalarRequested() Scalars { return n.scalarRequested }

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

// Labels returns the node's labels; read-only.
func (n *NodeInfo) Labels() map[string]string { return n.labels }

// Taints returns the node's taints (its spec's, and the not-ready or
// unreachable taint of a node that is not Ready); read-only.
func (n *NodeInfo) Taints() []Taint { return n.taints }

// PreferTaints returns the number of the node's PreferNoSchedule taints.
func (n *NodeInfo) PreferTaints() int32 { return n.preferTaints }

// Pods returns the node's pods as the pod-aware plugins see them;
// read-only.
func (n *NodeInfo) Pods() []*PodMeta { return n.pods }

// PodsWithAffinity returns the number of the node's pods with pod
// affinity or anti-affinity, PodsWithRequiredAnti of those with required
// anti-affinity.
func (n *NodeInfo) PodsWithAffinity() int32     { return n.podsWithAffinity }
func (n *NodeInfo) PodsWithRequiredAnti() int32 { return n.podsWithRequiredAnti }

// Images returns the node's images, sorted by id once the cache interned
// them; read-only.
func (n *NodeInfo) Images() []NodeImage { return n.images }

// InternImages numbers the node's images with id (the cache's number for
// an image name) and sorts them by number.
func (n *NodeInfo) InternImages(id func(name string) int32) {
	for i := range n.images {
		n.images[i].ID = id(n.images[i].Name)
	}
	slices.SortFunc(n.images, func(a, b NodeImage) int { return cmp.Compare(a.ID, b.ID) })
}

// SetGeneration sets the generation (the cache's counter at the node's
// last change).
func (n *NodeInfo) SetGeneration(g int64) { n.generation = g }

// Departed returns the cache's count of departures when a pod last left
// the node: a view of the node's pods (Pods) with the same value as an
// earlier one holds every pod the earlier one held (a pod updated in
// place stays; one removed, or moved to another node, departs).
func (n *NodeInfo) Departed() int64 { return n.departed }

// SetDeparted sets the count Departed returns (the cache's, at a pod's
// departure from the node).
func (n *NodeInfo) SetDeparted(d int64) { n.departed = d }

// Reset names n name and drops what the node object gave it (labels,
// taints, allocatable, images, readiness) and its generation, keeping the
// accounting of its pods: a node removed while pods are still bound to it.
func (n *NodeInfo) Reset(name string) {
	*n = NodeInfo{name: name, departed: n.departed, requested: n.requested, nonZeroRequested: n.nonZeroRequested, scalarRequested: n.scalarRequested,
		numPods: n.numPods, usedPorts: n.usedPorts, pods: n.pods,
		podsWithAffinity: n.podsWithAffinity, podsWithRequiredAnti: n.podsWithRequiredAnti}
}

// AccountPod adds a pod's requests to n's sums and counts it, without a
// pod entry: for a NodeInfo of one's own that only sums (a fit check
// against a stored allocation), not one of a cache or a snapshot.
func (n *NodeInfo) AccountPod(req Resources) {
	n.requested.Add(req)
	n.numPods++
}

// AccountScalars adds a pod's scalar resource requests to n's sums, as
// AccountPod its other requests (for a NodeInfo of one's own).
func (n *NodeInfo) AccountScalars(req Scalars) {
	n.scalarRequested = n.scalarRequested.plus(req, false)
}

// AccountPort adds a host port a pod binds to n's used ports, in place:
// for a NodeInfo of one's own, as AccountPod.
func (n *NodeInfo) AccountPort(p HostPort) { n.usedPorts = append(n.usedPorts, p) }

// clone returns a copy of n that AddPod, RemovePod and the Account
// methods may change without touching n (its pods and ports are clipped,
// so that an append copies them).
func (n *NodeInfo) Clone() *NodeInfo {
	c := *n
	c.pods = c.pods[:len(c.pods):len(c.pods)]
	c.usedPorts = c.usedPorts[:len(c.usedPorts):len(c.usedPorts)]
	return &c
}

// AddPod accounts for a pod on the node.
func (n *NodeInfo) AddPod(p *PodEntry) {
	n.requested.Add(p.Req)
	n.scalarRequested = n.scalarRequested.plus(p.Scalar, false)
	n.nonZeroRequested.Add(p.NonZero)
	n.numPods++
	if n.pods == nil {
		n.pods = make([]*PodMeta, 0, 4) // one allocation for most nodes
	}
	n.pods = append(n.pods, &p.Meta)
	if a := p.Meta.Affinity; a != nil {
		n.podsWithAffinity++
		if len(a.RequiredAnti) > 0 {
			n.podsWithRequiredAnti++
		}
	}
	if len(p.Ports) > 0 {
		used := make([]HostPort, 0, len(n.usedPorts)+len(p.Ports))
		n.usedPorts = append(append(used, n.usedPorts...), p.Ports...)
	}
}

// RemovePod undoes AddPod.
func (n *NodeInfo) RemovePod(p *PodEntry) {
	n.requested.Sub(p.Req)
	n.scalarRequested = n.scalarRequested.plus(p.Scalar, true)
	n.nonZeroRequested.Sub(p.NonZero)
	n.numPods--
	pods := make([]*PodMeta, 0, len(n.pods))
	for _, m := range n.pods {
		if m != &p.Meta {
			pods = append(pods, m)
		}
	}
	n.pods = pods
	if a := p.Meta.Affinity; a != nil {
		n.podsWithAffinity--
		if len(a.RequiredAnti) > 0 {
			n.podsWithRequiredAnti--
		}
	}
	if len(p.Ports) > 0 {
		used := make([]HostPort, 0, len(n.usedPorts))
		remove := append([]HostPort(nil), p.Ports...)
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

// ImageCount is an image's id and the number of present nodes that have it.
type ImageCount struct {
	ID    int32
	Nodes int
}

// PodEntry is a pod the cache accounts on a node: what it requests and
// the ports it binds, and what the pod-aware plugins read of it.
type PodEntry struct {
	Key, Namespace, Name string
	Node                 string
	Req, NonZero         Resources
	Scalar               Scalars // scalar resource requests (nil: none)
	Ports                []HostPort
	Assumed              bool
	Meta                 PodMeta
}

// PodKey is the cache key of a pod: its uid, or "namespace/name" when it
// has none.
func PodKey(pod *corev1.Pod) string {
	if uid := pod.GetMetadata().GetUid(); uid != "" {
		return uid
	}
	return pod.GetMetadata().GetNamespace() + "/" + pod.GetMetadata().GetName()
}

func NewPodEntry(pod *corev1.Pod, node string) (*PodEntry, error) {
	req, nonZero, err := PodRequests(pod)
	if err != nil {
		return nil, fmt.Errorf("pod %q: %w", PodName(pod), err)
	}
	scalars, err := PodScalars(pod)
	if err != nil {
		return nil, fmt.Errorf("pod %q: %w", PodName(pod), err)
	}
	p := &PodEntry{
		Key:       PodKey(pod),
		Namespace: pod.GetMetadata().GetNamespace(),
		Name:      pod.GetMetadata().GetName(),
		Node:      node,
		Req:       req,
		NonZero:   nonZero,
		Scalar:    scalars,
		Ports:     PodHostPorts(pod),
		Meta:      NewPodMeta(pod),
	}
	p.Meta.Entry = p
	return p, nil
}

func PodName(pod *corev1.Pod) string {
	return pod.GetMetadata().GetNamespace() + "/" + pod.GetMetadata().GetName()
}
