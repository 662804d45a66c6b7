package nodeunschedulable

import (
	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/stages/scheduler/framework"
	"github.com/podflow/podflow/services/stages/scheduler/plugins/tainttoleration"
)

// NodeUnschedulableName is the NodeUnschedulable plugin's name.
const NodeUnschedulableName = "NodeUnschedulable"

// ReasonUnschedulable is NodeUnschedulable's reason.
const ReasonUnschedulable = "node(s) were unschedulable"

// NodeUnschedulable is kube-scheduler's NodeUnschedulable filter: a
// cordoned node (spec.unschedulable) runs only pods that tolerate the
// node.kubernetes.io/unschedulable:NoSchedule taint.
type NodeUnschedulable struct{}

var (
	_ framework.FilterPlugin = NodeUnschedulable{}
	_ framework.BatchFilter  = NodeUnschedulable{}
)

var (
	unschedulableTaint  = framework.NewTaint(framework.TaintNodeUnschedulable, "", framework.EffectNoSchedule)
	statusUnschedulable = framework.NewStatus(framework.UnschedulableAndUnresolvable, ReasonUnschedulable)
)

func (NodeUnschedulable) Name() string { return NodeUnschedulableName }

func (NodeUnschedulable) Filter(_ *framework.CycleState, pod *corev1.Pod, n *framework.NodeInfo) *framework.Status {
	if !n.Unschedulable() || tainttoleration.Tolerates(pod.GetSpec().GetTolerations(), &unschedulableTaint) {
		return nil
	}
	return statusUnschedulable
}

// FilterNodes checks the pod's tolerations once, at the first cordoned
// node.
func (NodeUnschedulable) FilterNodes(_ *framework.CycleState, pod *corev1.Pod, nodes []*framework.NodeInfo, statuses []*framework.Status) {
	checked, tolerated := false, false
	for i, n := range nodes {
		if statuses[i] != nil || !n.Unschedulable() {
			continue
		}
		if !checked {
			checked, tolerated = true, tainttoleration.Tolerates(pod.GetSpec().GetTolerations(), &unschedulableTaint)
		}
		if !tolerated {
			statuses[i] = statusUnschedulable
		}
	}
}
