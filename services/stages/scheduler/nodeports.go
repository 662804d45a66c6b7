package scheduler

import "github.com/podflow/podflow/proto/corev1"

// NodePortsName is the NodePorts plugin's name.
const NodePortsName = "NodePorts"

// ReasonNodePorts is NodePorts' reason.
const ReasonNodePorts = "node(s) didn't have free ports for the requested pod ports"

// nodePorts is kube-scheduler's NodePorts filter: the pod's host ports must
// be free on the node. PreFilter collects them once (and skips the filter
// for a pod with none).
type nodePorts struct{}

var (
	_ PreFilterPlugin = nodePorts{}
	_ FilterPlugin    = nodePorts{}
	_ BatchFilter     = nodePorts{}
)

var (
	nodePortsKey    = NewStateKey("PreFilter" + NodePortsName)
	statusNodePorts = NewStatus(Unschedulable, ReasonNodePorts)
)

// nodePortsState is the pod's host ports.
type nodePortsState []HostPort

func (nodePorts) Name() string { return NodePortsName }

func (nodePorts) PreFilter(state *CycleState, pod *corev1.Pod) *Status {
	ports := podHostPorts(pod)
	if len(ports) == 0 {
		return skipStatus
	}
	state.Write(nodePortsKey, nodePortsState(ports))
	return nil
}

func (nodePorts) Filter(state *CycleState, _ *corev1.Pod, n *NodeInfo) *Status {
	ports, _ := state.Read(nodePortsKey).(nodePortsState)
	return portsFit(ports, n.usedPorts)
}

func (nodePorts) FilterNodes(state *CycleState, _ *corev1.Pod, nodes []*NodeInfo, statuses []*Status) {
	ports, _ := state.Read(nodePortsKey).(nodePortsState)
	for i, n := range nodes {
		if statuses[i] == nil && len(n.usedPorts) != 0 {
			statuses[i] = portsFit(ports, n.usedPorts)
		}
	}
}

// portsFit is NodePorts' verdict for ports against the used ones.
func portsFit(ports, used []HostPort) *Status {
	for _, hp := range ports {
		if hp.conflicts(used) {
			return statusNodePorts
		}
	}
	return nil
}
