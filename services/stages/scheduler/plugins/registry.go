// Package plugins holds the scheduler's in-tree plugins, one package each
// (kube-scheduler's pkg/scheduler/framework/plugins), and InTreeRegistry,
// which names them. A plugin implements the framework's extension points
// it needs (framework.PreFilterPlugin, FilterPlugin, ...) over the
// cycle's framework.CycleState and the snapshot's NodeInfos. Plugins do
// no I/O: they read the pod, the NodeInfos and the Snapshot, and write
// only their own per-cycle state.
package plugins

import (
	"github.com/podflow/podflow/services/stages/scheduler/framework"
	"github.com/podflow/podflow/services/stages/scheduler/plugins/balancedallocation"
	"github.com/podflow/podflow/services/stages/scheduler/plugins/defaultpreemption"
	"github.com/podflow/podflow/services/stages/scheduler/plugins/imagelocality"
	"github.com/podflow/podflow/services/stages/scheduler/plugins/interpodaffinity"
	"github.com/podflow/podflow/services/stages/scheduler/plugins/nodeaffinity"
	"github.com/podflow/podflow/services/stages/scheduler/plugins/nodename"
	"github.com/podflow/podflow/services/stages/scheduler/plugins/nodeports"
	"github.com/podflow/podflow/services/stages/scheduler/plugins/noderesourcesfit"
	"github.com/podflow/podflow/services/stages/scheduler/plugins/nodeunschedulable"
	"github.com/podflow/podflow/services/stages/scheduler/plugins/podtopologyspread"
	"github.com/podflow/podflow/services/stages/scheduler/plugins/tainttoleration"
)

// InTreeRegistry returns the plugins podflow ships. Adding a plugin is a
// package under plugins/ and a line here (and in the scheduler's
// DefaultPlugins, if it is on by default).
func InTreeRegistry() framework.Registry {
	return framework.Registry{
		nodeunschedulable.NodeUnschedulableName:   func() (framework.Plugin, error) { return nodeunschedulable.NodeUnschedulable{}, nil },
		nodename.NodeNameName:                     func() (framework.Plugin, error) { return nodename.NodeName{}, nil },
		tainttoleration.TaintTolerationName:       func() (framework.Plugin, error) { return tainttoleration.TaintToleration{}, nil },
		nodeaffinity.NodeAffinityName:             func() (framework.Plugin, error) { return nodeaffinity.NodeAffinity{}, nil },
		nodeports.NodePortsName:                   func() (framework.Plugin, error) { return nodeports.NodePorts{}, nil },
		noderesourcesfit.NodeResourcesFitName:     func() (framework.Plugin, error) { return noderesourcesfit.Fit{}, nil },
		balancedallocation.BalancedAllocationName: func() (framework.Plugin, error) { return balancedallocation.BalancedAllocation{}, nil },
		imagelocality.ImageLocalityName:           func() (framework.Plugin, error) { return imagelocality.ImageLocality{}, nil },
		podtopologyspread.PodTopologySpreadName:   func() (framework.Plugin, error) { return podtopologyspread.PodTopologySpread{}, nil },
		interpodaffinity.InterPodAffinityName:     func() (framework.Plugin, error) { return interpodaffinity.InterPodAffinity{}, nil },
		defaultpreemption.DefaultPreemptionName:   defaultpreemption.New,
	}
}
