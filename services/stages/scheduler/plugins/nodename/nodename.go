package nodename

import (
	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/stages/scheduler/framework"
)

// NodeNameName is the NodeName plugin's name.
const NodeNameName = "NodeName"

// ReasonNodeName is NodeName's reason.
const ReasonNodeName = "node(s) didn't match the requested node name"

// NodeName is kube-scheduler's NodeName filter: a pod that names a node in
// spec.nodeName runs only there. Its PreFilter skips the filter for the
// usual pod, which names none.
type NodeName struct{}

var (
	_ framework.PreFilterPlugin = NodeName{}
	_ framework.FilterPlugin    = NodeName{}
	_ framework.BatchFilter     = NodeName{}
)

var statusNodeName = framework.NewStatus(framework.UnschedulableAndUnresolvable, ReasonNodeName)

func (NodeName) Name() string { return NodeNameName }

func (NodeName) PreFilter(_ *framework.CycleState, pod *corev1.Pod) *framework.Status {
	if pod.GetSpec().GetNodeName() == "" {
		return framework.SkipStatus()
	}
	return nil
}

func (NodeName) Filter(_ *framework.CycleState, pod *corev1.Pod, n *framework.NodeInfo) *framework.Status {
	return nodeNameFits(pod.GetSpec().GetNodeName(), n)
}

func (NodeName) FilterNodes(_ *framework.CycleState, pod *corev1.Pod, nodes []*framework.NodeInfo, statuses []*framework.Status) {
	name := pod.GetSpec().GetNodeName()
	for i, n := range nodes {
		if statuses[i] == nil {
			statuses[i] = nodeNameFits(name, n)
		}
	}
}

// nodeNameFits is NodeName's verdict on n for the pod's spec.nodeName.
func nodeNameFits(name string, n *framework.NodeInfo) *framework.Status {
	if name != "" && name != n.Name() {
		return statusNodeName
	}
	return nil
}
