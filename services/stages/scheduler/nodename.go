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
	_ BatchFilter     = nodeName{}
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
	return nodeNameFits(pod.GetSpec().GetNodeName(), n)
}

func (nodeName) FilterNodes(_ *CycleState, pod *corev1.Pod, nodes []*NodeInfo, statuses []*Status) {
	name := pod.GetSpec().GetNodeName()
	for i, n := range nodes {
		if statuses[i] == nil {
			statuses[i] = nodeNameFits(name, n)
		}
	}
}

// nodeNameFits is NodeName's verdict on n for the pod's spec.nodeName.
func nodeNameFits(name string, n *NodeInfo) *Status {
	if name != "" && name != n.name {
		return statusNodeName
	}
	return nil
}
