package framework

import (
	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/podrules"
)

// ConditionDisruptionTarget and ReasonPreemptionByScheduler are the
// condition the scheduler sets on a victim.
const (
	ConditionDisruptionTarget   = "DisruptionTarget"
	ReasonPreemptionByScheduler = "PreemptionByScheduler"
)

// Victim is a pod a preemption deletes.
type Victim struct {
	UID, Namespace, Name string
	Priority             int32
	// Terminating: the victim was already terminating in the snapshot
	// (another preemption's victim, or deleted), so it needs no deletion.
	Terminating bool
}

// PostFilterResult is a successful PostFilter's outcome: the pod is to be
// nominated to NominatedNode once Victims are deleted.
type PostFilterResult struct {
	NominatedNode string
	// Victims, most important first (higher priority, then the longest
	// running).
	Victims []Victim
}

// PodStartTime is when a pod started (status.startTime), else when it was
// created, in Unix nanoseconds.
func PodStartTime(pod *corev1.Pod) int64 {
	if t := pod.GetStatus().GetStartTime(); t != nil {
		return t.AsTime().UnixNano()
	}
	return pod.GetMetadata().GetCreationTimestamp().AsTime().UnixNano()
}

// PreemptedByScheduler reports whether the pod carries the scheduler's
// DisruptionTarget=True condition with reason PreemptionByScheduler.
func PreemptedByScheduler(pod *corev1.Pod) bool {
	c := podrules.PodCondition(pod.GetStatus(), ConditionDisruptionTarget)
	return c.GetStatus() == podrules.ConditionTrue && c.GetReason() == ReasonPreemptionByScheduler
}
