package scheduler

import (
	"fmt"
	"strings"
)

// MaxNodeScore is the highest score a plugin gives a node.
const MaxNodeScore int64 = 100

// DefaultNormalizeScore is kube-scheduler's helper of the same name: scale
// scores so that the best is maxPriority; reversed, the best becomes 0
// (and all score maxPriority when every raw score is 0).
func DefaultNormalizeScore(maxPriority int64, reverse bool, scores []int64) {
	var maxScore int64
	for _, s := range scores {
		maxScore = max(maxScore, s)
	}
	if maxScore == 0 {
		if reverse {
			for i := range scores {
				scores[i] = maxPriority
			}
		}
		return
	}
	for i, s := range scores {
		if s != 0 { // most raw scores are 0: no division for them
			s = maxPriority * s / maxScore
		}
		if reverse {
			s = maxPriority - s
		}
		scores[i] = s
	}
}

// NodeScore is a node's score: the weighted total and each score plugin's
// 0–100 score. The in-tree plugins have fields of their own; Plugins lists
// every score plugin that ran, in profile order.
type NodeScore struct {
	Node                                                                             string
	Total                                                                            int64
	TaintToleration, NodeAffinity, LeastAllocated, BalancedAllocation, ImageLocality int64
	Plugins                                                                          []PluginScore
}

// PluginScore is one plugin's normalized, unweighted score of a node.
type PluginScore struct {
	Name  string
	Score int64
}

// field returns the NodeScore field of an in-tree score plugin, or nil.
func (ns *NodeScore) field(plugin string) *int64 {
	switch plugin {
	case TaintTolerationName:
		return &ns.TaintToleration
	case NodeAffinityName:
		return &ns.NodeAffinity
	case NodeResourcesFitName:
		return &ns.LeastAllocated
	case BalancedAllocationName:
		return &ns.BalancedAllocation
	case ImageLocalityName:
		return &ns.ImageLocality
	}
	return nil
}

// String renders a score for traces: the in-tree plugins always, any other
// plugin that ran after them.
func (ns NodeScore) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s=%d (TaintToleration %d, NodeAffinity %d, LeastAllocated %d, BalancedAllocation %d, ImageLocality %d",
		ns.Node, ns.Total, ns.TaintToleration, ns.NodeAffinity, ns.LeastAllocated, ns.BalancedAllocation, ns.ImageLocality)
	for _, p := range ns.Plugins {
		if ns.field(p.Name) == nil {
			fmt.Fprintf(&b, ", %s %d", p.Name, p.Score)
		}
	}
	b.WriteByte(')')
	return b.String()
}
