package scheduler

import "math"

// MaxNodeScore is the highest score a plugin gives a node.
const MaxNodeScore int64 = 100

// ImageLocality thresholds (kube-scheduler's): below 23 MiB of images
// present scores 0, 1000 MiB per container scores 100.
const (
	mb                    int64 = 1024 * 1024
	minImageThreshold     int64 = 23 * mb
	maxContainerThreshold int64 = 1000 * mb
)

// leastRequestedScore is (capacity - requested) / capacity on a 0–100
// scale; 0 when the node is full or over-full.
func leastRequestedScore(requested, capacity int64) int64 {
	if capacity == 0 || requested > capacity {
		return 0
	}
	return (capacity - requested) * MaxNodeScore / capacity
}

// leastAllocated is NodeResourcesFit's LeastAllocated score over cpu and
// memory, weight 1 each, with the non-zero requests of the node's pods and
// the pod. A resource the node does not offer is left out of the average.
func (p *podState) leastAllocated(n *NodeInfo) int64 {
	var sum, count int64
	if c := n.allocatable.MilliCPU; c != 0 {
		sum += leastRequestedScore(n.nonZeroRequested.MilliCPU+p.nonZero.MilliCPU, c)
		count++
	}
	if c := n.allocatable.Memory; c != 0 {
		sum += leastRequestedScore(n.nonZeroRequested.Memory+p.nonZero.Memory, c)
		count++
	}
	if count == 0 {
		return 0
	}
	return sum / count
}

// balancedAllocation is NodeResourcesBalancedAllocation: 100 times one
// minus the standard deviation of the cpu and memory fractions the node
// would have requested with the pod (plain requests, fractions capped at 1).
func (p *podState) balancedAllocation(n *NodeInfo) int64 {
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

// bestEffort reports whether the pod requests no cpu and no memory;
// kube-scheduler skips BalancedAllocation for such pods.
func (p *podState) bestEffort() bool { return p.req.MilliCPU == 0 && p.req.Memory == 0 }

// imageLocality is ImageLocality: the sizes of the pod's images present on
// the node, each scaled by the fraction of nodes that have it (so that a
// ubiquitous image does not pull every pod onto one node), mapped onto
// 0–100 between 23 MiB and 1000 MiB per container.
func (p *podState) imageLocality(n *NodeInfo) int64 {
	var sum int64
	for i := range p.images {
		if size, ok := n.imageSize(p.images[i].id); ok {
			sum += int64(float64(size) * p.images[i].spread)
		}
	}
	maxThreshold := maxContainerThreshold * int64(p.numContainers)
	if sum < minImageThreshold {
		sum = minImageThreshold
	} else if sum > maxThreshold {
		sum = maxThreshold
	}
	return MaxNodeScore * (sum - minImageThreshold) / (maxThreshold - minImageThreshold)
}

// nodeAffinity is NodeAffinity's raw score: the summed weights of the
// preferred terms the node matches (normalised across nodes later).
func (p *podState) nodeAffinity(n *NodeInfo) int64 {
	var sum int64
	for i := range p.preferred {
		if p.preferred[i].term.matches(n) {
			sum += p.preferred[i].weight
		}
	}
	return sum
}

// intolerablePreferNoSchedule is TaintToleration's raw score: how many of
// the node's PreferNoSchedule taints the pod does not tolerate (normalised
// and reversed across nodes later).
func (p *podState) intolerablePreferNoSchedule(n *NodeInfo) int64 {
	if n.preferTaints == 0 {
		return 0
	}
	var count int64
	for i := range n.taints {
		t := &n.taints[i]
		if t.effect == EffectPreferNoSchedule && !tolerates(p.preferTolerations, t) {
			count++
		}
	}
	return count
}

// normalize is kube-scheduler's DefaultNormalizeScore: scale so the best
// node scores 100; reversed, the best becomes 0 (and all score 100 when
// every raw score is 0).
func normalize(scores []int64, maxScore int64, reverse bool) {
	if maxScore == 0 {
		if reverse {
			for i := range scores {
				scores[i] = MaxNodeScore
			}
		}
		return
	}
	for i, s := range scores {
		s = MaxNodeScore * s / maxScore
		if reverse {
			s = MaxNodeScore - s
		}
		scores[i] = s
	}
}
