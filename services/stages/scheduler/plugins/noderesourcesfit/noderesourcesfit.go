package noderesourcesfit

import (
	"fmt"
	"slices"

	"github.com/podflow/podflow/services/stages/scheduler/framework"

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

// Fit is kube-scheduler's NodeResourcesFit with its default
// LeastAllocated scoring strategy: the filter checks the pod's requests
// against allocatable minus requested, and the pod count; the score
// prefers nodes with more free cpu and memory. The pod's requests are
// computed once per cycle (PodResources), shared with
// NodeResourcesBalancedAllocation.
type Fit struct{}

var (
	_ framework.PreFilterPlugin = Fit{}
	_ framework.FilterPlugin    = Fit{}
	_ framework.BatchFilter     = Fit{}
	_ framework.PreScorePlugin  = Fit{}
	_ framework.ScorePlugin     = Fit{}
	_ framework.BatchScorer     = Fit{}
)

// PodResources is the pod's requests, and its requests with the scoring
// defaults for containers that name no cpu or memory; Scalar its requests
// of the scalar resources (extended resources, hugepages).
type PodResources struct {
	Req, nonZero framework.Resources
	Scalar       framework.Scalars
}

var PodResourcesKey = framework.NewStateKey("PodResources")

// ReadPodResources returns the cycle's PodResources, computing them the
// first time.
func ReadPodResources(state *framework.CycleState, pod *corev1.Pod) (*PodResources, error) {
	return framework.ReadState(state, PodResourcesKey, func() (*PodResources, error) {
		req, nonZero, err := framework.PodRequests(pod)
		if err != nil {
			return nil, fmt.Errorf("pod %q: %w", framework.PodName(pod), err)
		}
		scalars, err := framework.PodScalars(pod)
		if err != nil {
			return nil, fmt.Errorf("pod %q: %w", framework.PodName(pod), err)
		}
		return &PodResources{Req: req, nonZero: nonZero, Scalar: scalars}, nil
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

var fitStatuses = func() (out [fitAll + 1]*framework.Status) {
	names := []string{ReasonTooManyPods, ReasonInsufficientCPU, ReasonInsufficientMemory, ReasonInsufficientEphemeralStorage}
	for bits := 1; bits <= fitAll; bits++ {
		var reasons []string
		for i, r := range names {
			if bits&(1<<i) != 0 {
				reasons = append(reasons, r)
			}
		}
		out[bits] = framework.NewStatus(framework.Unschedulable, reasons...)
	}
	return out
}()

func (Fit) Name() string { return NodeResourcesFitName }

func (Fit) PreFilter(state *framework.CycleState, pod *corev1.Pod) *framework.Status {
	_, err := ReadPodResources(state, pod)
	return framework.AsStatus(err)
}

func (Fit) Filter(state *framework.CycleState, _ *corev1.Pod, n *framework.NodeInfo) *framework.Status {
	p, _ := state.Read(PodResourcesKey).(*PodResources)
	if p == nil {
		return framework.AsStatus(fmt.Errorf("scheduler: %s Filter without PreFilter", NodeResourcesFitName))
	}
	return WithScalars(Fits(&p.Req, n), p.Scalar, n)
}

func (Fit) FilterNodes(state *framework.CycleState, _ *corev1.Pod, nodes []*framework.NodeInfo, statuses []*framework.Status) {
	p, _ := state.Read(PodResourcesKey).(*PodResources)
	if p == nil {
		st := framework.AsStatus(fmt.Errorf("scheduler: %s Filter without PreFilter", NodeResourcesFitName))
		for i := range nodes {
			if statuses[i] == nil {
				statuses[i] = st
			}
		}
		return
	}
	r := p.Req // a copy the loop keeps in registers
	for i, n := range nodes {
		if statuses[i] != nil {
			continue
		}
		if len(p.Scalar) > 0 {
			statuses[i] = WithScalars(Fits(&r, n), p.Scalar, n)
			continue
		}
		// Most nodes fit: say so without a call; fits spells out why not.
		if int64(n.NumPods())+1 <= n.Allocatable().Pods &&
			(r.MilliCPU <= 0 || r.MilliCPU <= n.Allocatable().MilliCPU-n.Requested().MilliCPU) &&
			(r.Memory <= 0 || r.Memory <= n.Allocatable().Memory-n.Requested().Memory) &&
			(r.EphemeralStorage <= 0 || r.EphemeralStorage <= n.Allocatable().EphemeralStorage-n.Requested().EphemeralStorage) {
			continue
		}
		statuses[i] = Fits(&r, n)
	}
}

// fits is NodeResourcesFit's verdict for requests r on n.
func Fits(r *framework.Resources, n *framework.NodeInfo) *framework.Status {
	var bits int
	if int64(n.NumPods())+1 > n.Allocatable().Pods {
		bits |= fitTooManyPods
	}
	if r.MilliCPU == 0 && r.Memory == 0 && r.EphemeralStorage == 0 {
		return fitStatuses[bits]
	}
	if r.MilliCPU > 0 && r.MilliCPU > n.Allocatable().MilliCPU-n.Requested().MilliCPU {
		bits |= fitCPU
	}
	if r.Memory > 0 && r.Memory > n.Allocatable().Memory-n.Requested().Memory {
		bits |= fitMemory
	}
	if r.EphemeralStorage > 0 && r.EphemeralStorage > n.Allocatable().EphemeralStorage-n.Requested().EphemeralStorage {
		bits |= fitEphemeralStorage
	}
	return fitStatuses[bits]
}

// WithScalars adds to st (Fits' verdict) an "Insufficient <name>" for each
// scalar resource in req that n has too little of, as kube-scheduler's
// fitsRequest does for its ScalarResources (a node that does not offer
// the resource has none), in name order.
func WithScalars(st *framework.Status, req framework.Scalars, n *framework.NodeInfo) *framework.Status {
	var short []string
	for name, q := range req {
		if q > 0 && q > n.ScalarAllocatable()[name]-n.ScalarRequested()[name] {
			short = append(short, "Insufficient "+name)
		}
	}
	if len(short) == 0 {
		return st
	}
	slices.Sort(short)
	return framework.NewStatus(framework.Unschedulable, append(slices.Clone(st.Reasons()), short...)...)
}

func (Fit) PreScore(state *framework.CycleState, pod *corev1.Pod, _ []*framework.NodeInfo) *framework.Status {
	_, err := ReadPodResources(state, pod)
	return framework.AsStatus(err)
}

// Score is LeastAllocated over cpu and memory, weight 1 each, with the
// non-zero requests of the node's pods and the pod. A resource the node
// does not offer is left out of the average.
func (pl Fit) Score(state *framework.CycleState, pod *corev1.Pod, n *framework.NodeInfo) int64 {
	var score [1]int64
	nodes := [1]*framework.NodeInfo{n}
	pl.ScoreNodes(state, pod, nodes[:], score[:])
	return score[0]
}

// ScoreNodes holds the score's one copy, in the loop: a call per node
// costs as much as the score.
func (Fit) ScoreNodes(state *framework.CycleState, _ *corev1.Pod, nodes []*framework.NodeInfo, scores []int64) {
	p, _ := state.Read(PodResourcesKey).(*PodResources)
	if p == nil {
		clear(scores)
		return
	}
	podCPU, podMem := p.nonZero.MilliCPU, p.nonZero.Memory
	for i, n := range nodes {
		cpu, mem := n.Allocatable().MilliCPU, n.Allocatable().Memory
		var s int64
		switch {
		case cpu != 0 && mem != 0:
			// A constant divisor: a shift, not a division instruction.
			s = (leastRequestedScore(n.NonZeroRequested().MilliCPU+podCPU, cpu) +
				leastRequestedScore(n.NonZeroRequested().Memory+podMem, mem)) / 2
		case cpu != 0:
			s = leastRequestedScore(n.NonZeroRequested().MilliCPU+podCPU, cpu)
		case mem != 0:
			s = leastRequestedScore(n.NonZeroRequested().Memory+podMem, mem)
		}
		scores[i] = s
	}
}

func (Fit) ScoreExtensions() framework.ScoreExtensions { return nil }

// leastRequestedScore is (capacity - requested) / capacity on a 0–100
// scale; 0 when the node is full or over-full.
func leastRequestedScore(requested, capacity int64) int64 {
	if capacity == 0 || requested > capacity {
		return 0
	}
	return (capacity - requested) * framework.MaxNodeScore / capacity
}
