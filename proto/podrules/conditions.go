package podrules

import (
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podflow/podflow/proto/corev1"
)

// Pod condition types (pod.status.conditions[].type).
const (
	PodScheduled              = "PodScheduled"
	PodReadyToStartContainers = "PodReadyToStartContainers"
	PodInitialized            = "Initialized"
	ContainersReady           = "ContainersReady"
	PodReady                  = "Ready"
)

// NodeReady is the node condition type the scheduler and the status stage
// read (node.status.conditions[].type).
const NodeReady = "Ready"

// Condition statuses.
const (
	ConditionTrue    = "True"
	ConditionFalse   = "False"
	ConditionUnknown = "Unknown"
)

// conditionOrder is the order in which the kubelet reports pod conditions.
var conditionOrder = map[string]int{
	PodReadyToStartContainers: 0, PodInitialized: 1, PodReady: 2, ContainersReady: 3, PodScheduled: 4,
}

// PodCondition returns st's condition of type t, or nil.
func PodCondition(st *corev1.PodStatus, t string) *corev1.PodCondition {
	for _, c := range st.GetConditions() {
		if c.GetType() == t {
			return c
		}
	}
	return nil
}

// SetPodCondition replaces or appends c in st, keeping the condition order
// the kubelet uses.
func SetPodCondition(st *corev1.PodStatus, c *corev1.PodCondition) {
	for i, old := range st.Conditions {
		if old.GetType() == c.GetType() {
			st.Conditions[i] = c
			return
		}
	}
	st.Conditions = append(st.Conditions, c)
	// Only c moves, back past the conditions kubelet reports after it:
	// the others keep their stored order (a writer allowed to add one
	// condition, as the scheduler its DisruptionTarget, changes no other).
	for i := len(st.Conditions) - 1; i > 0; i-- {
		a, b := st.Conditions[i-1], st.Conditions[i]
		oa, okA := conditionOrder[a.GetType()]
		ob, okB := conditionOrder[b.GetType()]
		if !okA || !okB || oa <= ob {
			break
		}
		st.Conditions[i-1], st.Conditions[i] = b, a
	}
}

// MarkPodCondition sets condition t of st to status, reason and message,
// moving lastTransitionTime to now only when the status changes (or the
// condition is new), as Kubernetes' UpdatePodCondition does. It reports
// whether anything changed.
func MarkPodCondition(st *corev1.PodStatus, t, status, reason, message string, now *timestamppb.Timestamp) bool {
	if c := PodCondition(st, t); c != nil {
		if c.Status == status && c.Reason == reason && c.Message == message {
			return false
		}
		if c.Status != status {
			c.LastTransitionTime = now
		}
		c.Status, c.Reason, c.Message = status, reason, message
		return true
	}
	SetPodCondition(st, &corev1.PodCondition{Type: t, Status: status, Reason: reason, Message: message, LastTransitionTime: now})
	return true
}

// IsPodReady reports whether pod's Ready condition is True (Kubernetes'
// podutil.IsPodReady).
func IsPodReady(pod *corev1.Pod) bool {
	return PodCondition(pod.GetStatus(), PodReady).GetStatus() == ConditionTrue
}

// NodeCondition returns n's condition of type t, or nil.
func NodeCondition(n *corev1.Node, t string) *corev1.NodeCondition {
	for _, c := range n.GetStatus().GetConditions() {
		if c.GetType() == t {
			return c
		}
	}
	return nil
}
