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
		if statuses[i] != nil {
			continue
		}
		// Most nodes fit: say so without a call; fits spells out why not.
		if int64(n.numPods)+1 <= n.allocatable.Pods &&
			(r.MilliCPU <= 0 || r.MilliCPU <= n.allocatable.MilliCPU-n.requested.MilliCPU) &&
			(r.Memory <= 0 || r.Memory <= n.allocatable.Memory-n.requested.Memory) &&
			(r.EphemeralStorage <= 0 || r.EphemeralStorage <= n.allocatable.EphemeralStorage-n.requested.EphemeralStorage) {
			continue
		}
		statuses[i] = fits(&r, n)
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
func (pl nodeResourcesFit) Score(state *CycleState, pod *corev1.Pod, n *NodeInfo) int64 {
	var score [1]int64
	nodes := [1]*NodeInfo{n}
	pl.ScoreNodes(state, pod, nodes[:], score[:])
	return score[0]
}

// ScoreNodes holds the score's one copy, in the loop: a call per node
// costs as much as the score.
func (nodeResourcesFit) ScoreNodes(state *CycleState, _ *corev1.Pod, nodes []*NodeInfo, scores []int64) {
	p, _ := state.Read(podResourcesKey).(*podResources)
	if p == nil {
		clear(scores)
		return
	}
	podCPU, podMem := p.nonZero.MilliCPU, p.nonZero.Memory
	for i, n := range nodes {
		cpu, mem := n.allocatable.MilliCPU, n.allocatable.Memory
		var s int64
		switch {
		case cpu != 0 && mem != 0:
			// A constant divisor: a shift, not a division instruction.
			s = (leastRequestedScore(n.nonZeroRequested.MilliCPU+podCPU, cpu) +
				leastRequestedScore(n.nonZeroRequested.Memory+podMem, mem)) / 2
		case cpu != 0:
			s = leastRequestedScore(n.nonZeroRequested.MilliCPU+podCPU, cpu)
		case mem != 0:
			s = leastRequestedScore(n.nonZeroRequested.Memory+podMem, mem)
		}
		scores[i] = s
	}
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
