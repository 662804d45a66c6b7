package scheduler

import (
	"math"

	"github.com/podflow/podflow/proto/corev1"
)

// BalancedAllocationName is the NodeResourcesBalancedAllocation plugin's
// name.
const BalancedAllocationName = "NodeResourcesBalancedAllocation"

// balancedAllocation is kube-scheduler's NodeResourcesBalancedAllocation:
// 100 times one minus the standard deviation of the cpu and memory
// fractions the node would have requested with the pod (plain requests,
// fractions capped at 1). PreScore skips a pod that requests no cpu and no
// memory, as kube-scheduler does.
type balancedAllocation struct{}

var (
	_ PreScorePlugin = balancedAllocation{}
	_ ScorePlugin    = balancedAllocation{}
	_ BatchScorer    = balancedAllocation{}
)

func (balancedAllocation) Name() string { return BalancedAllocationName }

func (balancedAllocation) PreScore(state *CycleState, pod *corev1.Pod, _ []*NodeInfo) *Status {
	p, err := readPodResources(state, pod)
	if err != nil {
		return AsStatus(err)
	}
	if p.req.MilliCPU == 0 && p.req.Memory == 0 {
		return skipStatus
	}
	return nil
}

func (balancedAllocation) Score(state *CycleState, _ *corev1.Pod, n *NodeInfo) int64 {
	p, _ := state.Read(podResourcesKey).(*podResources)
	return p.balancedAllocation(n)
}

func (balancedAllocation) ScoreNodes(state *CycleState, _ *corev1.Pod, nodes []*NodeInfo, scores []int64) {
	p, _ := state.Read(podResourcesKey).(*podResources)
	for i, n := range nodes {
		scores[i] = p.balancedAllocation(n)
	}
}

func (p *podResources) balancedAllocation(n *NodeInfo) int64 {
	if p == nil {
		return 0
	}
	var fractions [2]float64
	k := 0
	if c := n.allocatable.MilliCPU; c != 0 {
		fractions[k] = min(float64(n.requested.MilliCPU+p.req.MilliCPU)/float64(c), 1)
		k++
	}
	if c := n.allocatable.Memory; c != 0 {
		fractions[k] = min(float64(n.requested.Memory+p.req.Memory)/float64(c), 1)
		k++
	}
	std := 0.0
	if k == 2 {
		std = math.Abs((fractions[0] - fractions[1]) / 2)
	}
	return int64((1 - std) * float64(MaxNodeScore))
}

func (balancedAllocation) ScoreExtensions() ScoreExtensions { return nil }
