package status

import (
	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/eventsv1"
	"github.com/podflow/podflow/proto/podrules"
	"github.com/podflow/podflow/proto/vt"
)

// nodeCondition is the pod conditions a node's report owns (kubelet's
// PodConditionsByKubelet, with PodReadyToStartContainers and
// AllContainersRestarting; PodScheduled is the scheduler's in podflow).
var nodeCondition = map[string]bool{
	"Ready": true, "Initialized": true, "ContainersReady": true, "PodReadyToStartContainers": true,
	"PodResizeInProgress": true, "PodResizePending": true, "AllContainersRestarting": true,
}

// terminal reports whether phase is one a pod never leaves.
func terminal(phase string) bool { return phase == "Failed" || phase == "Succeeded" }

// ApplyReport folds node's status report into pod and reports whether pod
// changed. A report is applied only when it comes from the node the pod is
// bound to and is newer than the last applied one. The node owns the
// status except the PodScheduled condition, which the scheduler wrote, the
// conditions others wrote (DisruptionTarget, readiness gates' types), and
// a terminal phase, which no report undoes.
func ApplyReport(pod *corev1.Pod, node string, rep *eventsv1.PodStatusReport) bool {
	if rep.GetStatus() == nil || pod.GetSpec().GetNodeName() != node || rep.GetSeq() <= podrules.AppliedSeq(pod) {
		return false
	}
	next := vt.Clone(rep.GetStatus())
	if sc := podrules.PodCondition(pod.GetStatus(), podrules.PodScheduled); sc != nil {
		podrules.SetPodCondition(next, vt.Clone(sc))
	}
	for _, c := range pod.GetStatus().GetConditions() {
		// kubelet's mergePodStatus: a condition the node does not own (the
		// eviction's DisruptionTarget, a readiness gate's) stays unless the
		// report carries it (DisruptionTarget is shared).
		if !nodeCondition[c.GetType()] && podrules.PodCondition(next, c.GetType()) == nil {
			podrules.SetPodCondition(next, vt.Clone(c))
		}
	}
	if next.QosClass == "" {
		next.QosClass = pod.GetStatus().GetQosClass()
	}
	if was := pod.GetStatus().GetPhase(); terminal(was) && !terminal(next.GetPhase()) {
		// A terminal phase written through pods/status stays, as kubelet
		// keeps it ("API phase was terminal, updating phase to match").
		next.Phase = was
	}
	pod.Status = next
	podrules.SetAppliedSeq(pod, rep.GetSeq())
	return true
}
