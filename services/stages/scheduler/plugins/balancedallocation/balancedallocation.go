package balancedallocation

import (
	"math"

	"github.com/podflow/podflow/services/stages/scheduler/framework"
	"github.com/podflow/podflow/services/stages/scheduler/plugins/noderesourcesfit"

	"github.com/podflow/podflow/proto/corev1"
)

// BalancedAllocationName is the NodeResourcesBalancedAllocation plugin's
// name.
const BalancedAllocationName = "NodeResourcesBalancedAllocation"

// BalancedAllocation is kube-scheduler's NodeResourcesBalancedAllocation:
// 100 times one minus the standard deviation of the cpu and memory
// fractions the node would have requested with the pod (plain requests,
// fractions capped at 1). PreScore skips a pod that requests no cpu and no
// memory, as kube-scheduler does.
type BalancedAllocation struct{}

var (
	_ framework.PreScorePlugin = BalancedAllocation{}
	_ framework.ScorePlugin    = BalancedAllocation{}
	_ framework.BatchScorer    = BalancedAllocation{}
)

func (BalancedAllocation) Name() string { return BalancedAllocationName }

func (BalancedAllocation) PreScore(state *framework.CycleState, pod *corev1.Pod, _ []*framework.NodeInfo) *framework.Status {
	p, err := noderesourcesfit.ReadPodResources(state, pod)
	if err != nil {
		return framework.AsStatus(err)
	}
	if p.Req.MilliCPU == 0 && p.Req.Memory == 0 {
		return framework.SkipStatus()
	}
	return nil
}

func (pl BalancedAllocation) Score(state *framework.CycleState, pod *corev1.Pod, n *framework.NodeInfo) int64 {
	var score [1]int64
	nodes := [1]*framework.NodeInfo{n}
	pl.ScoreNodes(state, pod, nodes[:], score[:])
	return score[0]
}

// ScoreNodes holds the score's one copy, in the loop: a call per node
// costs as much as the score.
func (BalancedAllocation) ScoreNodes(state *framework.CycleState, _ *corev1.Pod, nodes []*framework.NodeInfo, scores []int64) {
	p, _ := state.Read(noderesourcesfit.PodResourcesKey).(*noderesourcesfit.PodResources)
	if p == nil {
		clear(scores)
		return
	}
	podCPU, podMem := p.Req.MilliCPU, p.Req.Memory
	for i, n := range nodes {
		// With one of cpu and memory offered the deviation is 0.
		cpu, mem := n.Allocatable().MilliCPU, n.Allocatable().Memory
		std := 0.0
		if cpu != 0 && mem != 0 {
			fc := min(float64(n.Requested().MilliCPU+podCPU)/float64(cpu), 1)
			fm := min(float64(n.Requested().Memory+podMem)/float64(mem), 1)
			std = math.Abs((fc - fm) / 2)
		}
		scores[i] = int64((1 - std) * float64(framework.MaxNodeScore))
	}
}

func (BalancedAllocation) ScoreExtensions() framework.ScoreExtensions { return nil }
