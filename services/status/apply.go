package status

import (
	"strconv"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/eventsv1"
)

// AnnotationStatusSeq records the seq of the last node status report
// applied to a pod, so that a redelivered or reordered older report is
// ignored: applying any report twice leaves the same state.
const AnnotationStatusSeq = "podflow.io/status-seq"

// AppliedSeq returns the seq of the last report applied to pod.
func AppliedSeq(pod *corev1.Pod) int64 {
	n, _ := strconv.ParseInt(pod.GetMetadata().GetAnnotations()[AnnotationStatusSeq], 10, 64)
	return n
}

// ApplyReport folds node's status report into pod and reports whether pod
// changed. A report is applied only when it comes from the node the pod is
// bound to and is newer than the last applied one. The node owns the
// status except the PodScheduled condition, which the scheduler wrote.
func ApplyReport(pod *corev1.Pod, node string, rep *eventsv1.PodStatusReport) bool {
	if rep.GetStatus() == nil || pod.GetSpec().GetNodeName() != node || rep.GetSeq() <= AppliedSeq(pod) {
		return false
	}
	next := proto.Clone(rep.GetStatus()).(*corev1.PodStatus)
	if sc := Condition(pod.GetStatus(), "PodScheduled"); sc != nil {
		SetCondition(next, proto.Clone(sc).(*corev1.PodCondition))
	}
	if next.QosClass == "" {
		next.QosClass = pod.GetStatus().GetQosClass()
	}
	pod.Status = next
	md := pod.GetMetadata()
	if md.Annotations == nil {
		md.Annotations = map[string]string{}
	}
	md.Annotations[AnnotationStatusSeq] = strconv.FormatInt(rep.GetSeq(), 10)
	return true
}

// Condition returns the condition of type t, or nil.
func Condition(st *corev1.PodStatus, t string) *corev1.PodCondition {
	for _, c := range st.GetConditions() {
		if c.GetType() == t {
			return c
		}
	}
	return nil
}

// SetCondition replaces or appends c in st, keeping the condition order
// Kubernetes uses.
func SetCondition(st *corev1.PodStatus, c *corev1.PodCondition) {
	for i, old := range st.Conditions {
		if old.GetType() == c.GetType() {
			st.Conditions[i] = c
			return
		}
	}
	st.Conditions = append(st.Conditions, c)
	order := map[string]int{"PodReadyToStartContainers": 0, "Initialized": 1, "Ready": 2, "ContainersReady": 3, "PodScheduled": 4}
	for i := len(st.Conditions) - 1; i > 0; i-- {
		a, b := st.Conditions[i-1], st.Conditions[i]
		oa, okA := order[a.GetType()]
		ob, okB := order[b.GetType()]
		if okA && okB && oa > ob {
			st.Conditions[i-1], st.Conditions[i] = b, a
		}
	}
}

// MarkCondition sets condition t to status/reason/message, moving
// lastTransitionTime only when the status changes. It reports whether
// anything changed.
func MarkCondition(st *corev1.PodStatus, t, status, reason, message string, now *timestamppb.Timestamp) bool {
	if c := Condition(st, t); c != nil {
		if c.Status == status && c.Reason == reason && c.Message == message {
			return false
		}
		if c.Status != status {
			c.LastTransitionTime = now
		}
		c.Status, c.Reason, c.Message = status, reason, message
		return true
	}
	SetCondition(st, &corev1.PodCondition{Type: t, Status: status, Reason: reason, Message: message, LastTransitionTime: now})
	return true
}
