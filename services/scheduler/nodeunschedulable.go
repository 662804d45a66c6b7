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

var _ FilterPlugin = nodeUnschedulable{}

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
