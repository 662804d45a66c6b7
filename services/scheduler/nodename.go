package scheduler

import "github.com/podflow/podflow/proto/corev1"

// NodeNameName is the NodeName plugin's name.
const NodeNameName = "NodeName"

// ReasonNodeName is NodeName's reason.
const ReasonNodeName = "node(s) didn't match the requested node name"

// nodeName is kube-scheduler's NodeName filter: a pod that names a node in
// spec.nodeName runs only there. Its PreFilter skips the filter for the
// usual pod, which names none.
type nodeName struct{}

var (
	_ PreFilterPlugin = nodeName{}
	_ FilterPlugin    = nodeName{}
)

var statusNodeName = NewStatus(UnschedulableAndUnresolvable, ReasonNodeName)

func (nodeName) Name() string { return NodeNameName }

func (nodeName) PreFilter(_ *CycleState, pod *corev1.Pod) *Status {
	if pod.GetSpec().GetNodeName() == "" {
		return skipStatus
	}
	return nil
}

func (nodeName) Filter(_ *CycleState, pod *corev1.Pod, n *NodeInfo) *Status {
	if name := pod.GetSpec().GetNodeName(); name != "" && name != n.name {
		return statusNodeName
	}
	return nil
}
