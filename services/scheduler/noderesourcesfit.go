package scheduler

import (
	"fmt"

	"github.com/podflow/podflow/proto/corev1"
)

// NodeResourcesFitName is the NodeResourcesFit plugin's name.
const NodeResourcesFitName = "NodeResourcesFit"

// NodeResourcesFit's reasons.
const (
	ReasonTooManyPods                  = "Too many pods"
	ReasonInsufficientCPU              = "Insufficient cpu"
	ReasonInsufficientMemory           = "Insufficient memory"
	ReasonInsufficientEphemeralStorage = "Insufficient ephemeral-storage"
)

// nodeResourcesFit is kube-scheduler's NodeResourcesFit with its default
// LeastAllocated scoring strategy: the filter checks the pod's requests
// against allocatable minus requested, and the pod count; the score
// prefers nodes with more free cpu and memory. The pod's requests are
// computed once per cycle (podResources), shared with
// NodeResourcesBalancedAllocation.
type nodeResourcesFit struct{}

var (
	_ PreFilterPlugin = nodeResourcesFit{}
	_ FilterPlugin    = nodeResourcesFit{}
	_ BatchFilter     = nodeResourcesFit{}
	_ PreScorePlugin  = nodeResourcesFit{}
	_ ScorePlugin     = nodeResourcesFit{}
	_ BatchScorer     = nodeResourcesFit{}
)

// podResources is the pod's requests, and its requests with the scoring
// defaults for containers that name no cpu or memory.
type podResources struct{ req, nonZero Resources }

var podResourcesKey = NewStateKey("PodResources")

// readPodResources returns the cycle's podResources, computing them the
// first time.
func readPodResources(state *CycleState, pod *corev1.Pod) (*podResources, error) {
	return readState(state, podResourcesKey, func() (*podResources, error) {
		req, nonZero, err := PodRequests(pod)
		if err != nil {
			return nil, fmt.Errorf("pod %q: %w", podName(pod), err)
		}
		return &podResources{req: req, nonZero: nonZero}, nil
	})
}

// Fit statuses by the bits of their reasons, in reason order.
const (
	fitTooManyPods = 1 << iota
	fitCPU
	fitMemory
	fitEphemeralStorage
	fitAll = fitTooManyPods | fitCPU | fitMemory | fitEphemeralStorage
)

var fitStatuses = func() (out [fitAll + 1]*Status) {
	names := []string{ReasonTooManyPods, ReasonInsufficientCPU, ReasonInsufficientMemory, ReasonInsufficientEphemeralStorage}
	for bits := 1; bits <= fitAll; bits++ {
		var reasons []string
		for i, r := range names {
			if bits&(1<<i) != 0 {
				reasons = append(reasons, r)
			}
		}
		out[bits] = NewStatus(Unschedulable, reasons...)
	}
	return out
}()

func (nodeResourcesFit) Name() string { return NodeResourcesFitName }

func (nodeResourcesFit) PreFilter(state *CycleState, pod *corev1.Pod) *Status {
	_, err := readPodResources(state, pod)
	return AsStatus(err)
}

func (nodeResourcesFit) Filter(state *CycleState, _ *corev1.Pod, n *NodeInfo) *Status {
	p, _ := state.Read(podResourcesKey).(*podResources)
	if p == nil {
		return AsStatus(fmt.Errorf("scheduler: %s Filter without PreFilter", NodeResourcesFitName))
	}
	return fits(&p.req, n)
}

func (nodeResourcesFit) FilterNodes(state *CycleState, _ *corev1.Pod, nodes []*NodeInfo, statuses []*Status) {
	p, _ := state.Read(podResourcesKey).(*podResources)
	if p == nil {
		st := AsStatus(fmt.Errorf("scheduler: %s Filter without PreFilter", NodeResourcesFitName))
		for i := range nodes {
			if statuses[i] == nil {
				statuses[i] = st
			}
		}
		return
	}
	r := p.req // a copy the loop keeps in registers
	for i, n := range nodes {
		if statuses[i] == nil {
			statuses[i] = fits(&r, n)
		}
	}
}

// fits is NodeResourcesFit's verdict for requests r on n.
func fits(r *Resources, n *NodeInfo) *Status {
	var bits int
	if int64(n.numPods)+1 > n.allocatable.Pods {
		bits |= fitTooManyPods
	}
	if r.MilliCPU == 0 && r.Memory == 0 && r.EphemeralStorage == 0 {
		return fitStatuses[bits]
	}
	if r.MilliCPU > 0 && r.MilliCPU > n.allocatable.MilliCPU-n.requested.MilliCPU {
		bits |= fitCPU
	}
	if r.Memory > 0 && r.Memory > n.allocatable.Memory-n.requested.Memory {
		bits |= fitMemory
	}
	if r.EphemeralStorage > 0 && r.EphemeralStorage > n.allocatable.EphemeralStorage-n.requested.EphemeralStorage {
		bits |= fitEphemeralStorage
	}
	return fitStatuses[bits]
}

func (nodeResourcesFit) PreScore(state *CycleState, pod *corev1.Pod, _ []*NodeInfo) *Status {
	_, err := readPodResources(state, pod)
	return AsStatus(err)
}

// Score is LeastAllocated over cpu and memory, weight 1 each, with the
// non-zero requests of the node's pods and the pod. A resource the node
// does not offer is left out of the average.
func (nodeResourcesFit) Score(state *CycleState, _ *corev1.Pod, n *NodeInfo) int64 {
	p, _ := state.Read(podResourcesKey).(*podResources)
	return p.leastAllocated(n)
}

func (nodeResourcesFit) ScoreNodes(state *CycleState, _ *corev1.Pod, nodes []*NodeInfo, scores []int64) {
	p, _ := state.Read(podResourcesKey).(*podResources)
	for i, n := range nodes {
		scores[i] = p.leastAllocated(n)
	}
}

func (p *podResources) leastAllocated(n *NodeInfo) int64 {
	if p == nil {
		return 0
	}
	cpu, mem := n.allocatable.MilliCPU, n.allocatable.Memory
	switch {
	case cpu != 0 && mem != 0:
		// A constant divisor: a shift, not a division instruction per node.
		return (leastRequestedScore(n.nonZeroRequested.MilliCPU+p.nonZero.MilliCPU, cpu) +
			leastRequestedScore(n.nonZeroRequested.Memory+p.nonZero.Memory, mem)) / 2
	case cpu != 0:
		return leastRequestedScore(n.nonZeroRequested.MilliCPU+p.nonZero.MilliCPU, cpu)
	case mem != 0:
		return leastRequestedScore(n.nonZeroRequested.Memory+p.nonZero.Memory, mem)
	}
	return 0
}

func (nodeResourcesFit) ScoreExtensions() ScoreExtensions { return nil }

// leastRequestedScore is (capacity - requested) / capacity on a 0–100
// scale; 0 when the node is full or over-full.
func leastRequestedScore(requested, capacity int64) int64 {
	if capacity == 0 || requested > capacity {
		return 0
	}
	return (capacity - requested) * MaxNodeScore / capacity
}
