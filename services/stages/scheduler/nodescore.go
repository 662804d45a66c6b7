package scheduler

import (
	"fmt"
	"strings"

	"github.com/podflow/podflow/services/stages/scheduler/plugins/balancedallocation"
	"github.com/podflow/podflow/services/stages/scheduler/plugins/imagelocality"
	"github.com/podflow/podflow/services/stages/scheduler/plugins/nodeaffinity"
	"github.com/podflow/podflow/services/stages/scheduler/plugins/noderesourcesfit"
	"github.com/podflow/podflow/services/stages/scheduler/plugins/tainttoleration"
)

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
	case tainttoleration.TaintTolerationName:
		return &ns.TaintToleration
	case nodeaffinity.NodeAffinityName:
		return &ns.NodeAffinity
	case noderesourcesfit.NodeResourcesFitName:
		return &ns.LeastAllocated
	case balancedallocation.BalancedAllocationName:
		return &ns.BalancedAllocation
	case imagelocality.ImageLocalityName:
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
