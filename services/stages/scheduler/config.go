package scheduler

import (
	"fmt"

	"github.com/podflow/podflow/services/stages/scheduler/framework"
)

// Weights are the in-tree score plugins' weights in the default profile
// (DefaultPlugins): a node's total score is the sum of each plugin's 0–100
// score times its weight. Zero leaves a plugin out of scoring.
type Weights struct {
	// TaintToleration prefers nodes with fewer untolerated PreferNoSchedule
	// taints (Kubernetes default 3).
	TaintToleration int64
	// NodeAffinity prefers nodes matching more preferred node-affinity weight
	// (Kubernetes default 2).
	NodeAffinity int64
	// LeastAllocated is NodeResourcesFit's default strategy: prefer nodes
	// with more free cpu and memory (Kubernetes default 1).
	LeastAllocated int64
	// BalancedAllocation prefers nodes whose cpu and memory use stay
	// balanced (Kubernetes default 1).
	BalancedAllocation int64
	// ImageLocality prefers nodes that already have the pod's images
	// (Kubernetes default 1).
	ImageLocality int64
	// PodTopologySpread prefers the domains with fewer pods matching the
	// pod's ScheduleAnyway spread constraints (Kubernetes default 2).
	PodTopologySpread int64
	// InterPodAffinity prefers nodes by preferred pod affinity and
	// anti-affinity, the pod's and the existing pods' (Kubernetes default 2).
	InterPodAffinity int64
}

// Config configures a Scheduler.
type Config struct {
	// PercentageOfNodesToScore bounds how many feasible nodes a cycle looks
	// for before it stops filtering and scores them, as a percentage of all
	// nodes (clusters under 100 nodes are always searched in full, and at
	// least 100 feasible nodes are looked for). 0 means adaptive, as
	// kube-scheduler: 50 - nodes/125 percent, at least 5. Range 0–100.
	PercentageOfNodesToScore int32
	// Weights of the score plugins of the default profile; ignored when
	// Plugins is set.
	Weights Weights
	// Plugins is the profile: the plugins enabled, in order, each at every
	// extension point it implements, with its score weight. Nil selects
	// DefaultPlugins(Weights).
	Plugins []PluginSpec
	// Registry builds the plugins the profile names. Nil selects
	// plugins.InTreeRegistry(); a test or an out-of-tree plugin extends a copy.
	Registry framework.Registry
	// NumScoresToReport is how many of the best nodes' scores a Result
	// carries for tracing (kube-scheduler reports 3). 0 reports none.
	NumScoresToReport int
	// Seed seeds the random tie-break between equally scored nodes, for
	// reproducible tests. 0 seeds from the runtime's random source.
	Seed uint64
}

// DefaultWeights returns kube-scheduler's default plugin weights.
func DefaultWeights() Weights {
	return Weights{TaintToleration: 3, NodeAffinity: 2, LeastAllocated: 1, BalancedAllocation: 1, ImageLocality: 1,
		PodTopologySpread: 2, InterPodAffinity: 2}
}

// DefaultConfig returns kube-scheduler's defaults: adaptive sampling,
// default weights, 3 reported scores, random tie-break.
func DefaultConfig() Config {
	return Config{Weights: DefaultWeights(), NumScoresToReport: 3}
}

// maxWeight bounds a weight as kube-scheduler's configuration validation
// does, which keeps total scores far from overflow.
const maxWeight = 100

// Validate reports the first invalid field.
func (c Config) Validate() error {
	if c.PercentageOfNodesToScore < 0 || c.PercentageOfNodesToScore > 100 {
		return fmt.Errorf("scheduler: PercentageOfNodesToScore (%d) must be within 0–100", c.PercentageOfNodesToScore)
	}
	for _, w := range []struct {
		name string
		v    int64
	}{
		{"TaintToleration", c.Weights.TaintToleration},
		{"NodeAffinity", c.Weights.NodeAffinity},
		{"LeastAllocated", c.Weights.LeastAllocated},
		{"BalancedAllocation", c.Weights.BalancedAllocation},
		{"ImageLocality", c.Weights.ImageLocality},
		{"PodTopologySpread", c.Weights.PodTopologySpread},
		{"InterPodAffinity", c.Weights.InterPodAffinity},
	} {
		if w.v < 0 || w.v > maxWeight {
			return fmt.Errorf("scheduler: Weights.%s (%d) must be within 0–%d", w.name, w.v, maxWeight)
		}
	}
	if c.NumScoresToReport < 0 {
		return fmt.Errorf("scheduler: NumScoresToReport (%d) cannot be negative", c.NumScoresToReport)
	}
	return c.validatePlugins()
}
