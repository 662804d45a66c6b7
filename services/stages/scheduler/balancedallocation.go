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

func (pl balancedAllocation) Score(state *CycleState, pod *corev1.Pod, n *NodeInfo) int64 {
	var score [1]int64
	nodes := [1]*NodeInfo{n}
	pl.ScoreNodes(state, pod, nodes[:], score[:])
	return score[0]
}

// ScoreNodes holds the score's one copy, in the loop: a call per node
// costs as much as the score.
func (balancedAllocation) ScoreNodes(state *CycleState, _ *corev1.Pod, nodes []*NodeInfo, scores []int64) {
	p, _ := state.Read(podResourcesKey).(*podResources)
	if p == nil {
		clear(scores)
		return
	}
	podCPU, podMem := p.req.MilliCPU, p.req.Memory
	for i, n := range nodes {
		// With one of cpu and memory offered the deviation is 0.
		cpu, mem := n.allocatable.MilliCPU, n.allocatable.Memory
		std := 0.0
		if cpu != 0 && mem != 0 {
			fc := min(float64(n.requested.MilliCPU+podCPU)/float64(cpu), 1)
			fm := min(float64(n.requested.Memory+podMem)/float64(mem), 1)
			std = math.Abs((fc - fm) / 2)
		}
		scores[i] = int64((1 - std) * float64(MaxNodeScore))
	}
}

func (balancedAllocation) ScoreExtensions() ScoreExtensions { return nil }
