package scheduler

import "github.com/podflow/podflow/proto/corev1"

// NodeUnschedulableName is the NodeUnschedulable plugin's name.
const NodeUnschedulableName = "NodeUnschedulable"

// ReasonUnschedulable is NodeUnschedulable's reason.
const ReasonUnschedulable = "node(s) were unschedulable"

// nodeUnschedulable is kube-scheduler's NodeUnschedulable filter: a
// cordoned node (spec.unschedulable) runs only pods that tolerate the
// node.kubernetes.io/unschedulable:NoSchedule taint.
type nodeUnschedulable struct{}

var (
	_ FilterPlugin = nodeUnschedulable{}
	_ BatchFilter  = nodeUnschedulable{}
)

var (
	unschedulableTaint  = newTaint(TaintNodeUnschedulable, "", EffectNoSchedule)
	statusUnschedulable = NewStatus(UnschedulableAndUnresolvable, ReasonUnschedulable)
)

func (nodeUnschedulable) Name() string { return NodeUnschedulableName }

func (nodeUnschedulable) Filter(_ *CycleState, pod *corev1.Pod, n *NodeInfo) *Status {
	if !n.unschedulable || tolerates(pod.GetSpec().GetTolerations(), &unschedulableTaint) {
		return nil
	}
	return statusUnschedulable
}

// FilterNodes checks the pod's tolerations once, at the first cordoned
// node.
func (nodeUnschedulable) FilterNodes(_ *CycleState, pod *corev1.Pod, nodes []*NodeInfo, statuses []*Status) {
	checked, tolerated := false, false
	for i, n := range nodes {
		if statuses[i] != nil || !n.unschedulable {
			continue
		}
		if !checked {
			checked, tolerated = true, tolerates(pod.GetSpec().GetTolerations(), &unschedulableTaint)
		}
		if !tolerated {
			statuses[i] = statusUnschedulable
		}
	}
}
