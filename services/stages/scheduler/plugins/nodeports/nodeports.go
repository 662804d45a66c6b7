package nodeports

import (
	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/stages/scheduler/framework"
)

// NodePortsName is the NodePorts plugin's name.
const NodePortsName = "NodePorts"

// ReasonNodePorts is NodePorts' reason.
const ReasonNodePorts = "node(s) didn't have free ports for the requested pod ports"

// NodePorts is kube-scheduler's NodePorts filter: the pod's host ports must
// be free on the node. PreFilter collects them once (and skips the filter
// for a pod with none).
type NodePorts struct{}

var (
	_ framework.PreFilterPlugin = NodePorts{}
	_ framework.FilterPlugin    = NodePorts{}
	_ framework.BatchFilter     = NodePorts{}
)

var (
	nodePortsKey    = framework.NewStateKey("PreFilter" + NodePortsName)
	statusNodePorts = framework.NewStatus(framework.Unschedulable, ReasonNodePorts)
)

// nodePortsState is the pod's host ports.
type nodePortsState []framework.HostPort

func (NodePorts) Name() string { return NodePortsName }

func (NodePorts) PreFilter(state *framework.CycleState, pod *corev1.Pod) *framework.Status {
	ports := framework.PodHostPorts(pod)
	if len(ports) == 0 {
		return framework.SkipStatus()
	}
	state.Write(nodePortsKey, nodePortsState(ports))
	return nil
}

func (NodePorts) Filter(state *framework.CycleState, _ *corev1.Pod, n *framework.NodeInfo) *framework.Status {
	ports, _ := state.Read(nodePortsKey).(nodePortsState)
	return PortsFit(ports, n.UsedPorts())
}

func (NodePorts) FilterNodes(state *framework.CycleState, _ *corev1.Pod, nodes []*framework.NodeInfo, statuses []*framework.Status) {
	ports, _ := state.Read(nodePortsKey).(nodePortsState)
	for i, n := range nodes {
		if statuses[i] == nil && len(n.UsedPorts()) != 0 {
			statuses[i] = PortsFit(ports, n.UsedPorts())
		}
	}
}

// PortsFit is NodePorts' verdict for ports against the used ones.
func PortsFit(ports, used []framework.HostPort) *framework.Status {
	for _, hp := range ports {
		if hp.Conflicts(used) {
			return statusNodePorts
		}
	}
	return nil
}
