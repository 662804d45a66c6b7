package framework

import (
	"k8s.io/apimachinery/pkg/labels"

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

// PDB is what preemption reads of a PodDisruptionBudget (policy/v1), as
// kube-scheduler's filterPodsWithPDBViolation does: the namespace and
// selector of the pods it guards, status.disruptionsAllowed, and
// status.disruptedPods (pods the eviction subresource is deleting, already
// counted against it).
type PDB struct {
	Namespace, Name string
	// Selector selects the pods it guards; nil (no selector, an empty or
	// an invalid one) selects none.
	Selector           labels.Selector
	DisruptionsAllowed int32
	DisruptedPods      map[string]bool // by pod name
}

// Guards reports whether the budget counts a pod of namespace ns with
// labels lbls, as kube-scheduler's filterPodsWithPDBViolation decides: a
// pod without labels matches none.
func (b *PDB) Guards(ns string, lbls map[string]string) bool {
	return len(lbls) > 0 && b.Namespace == ns && b.Selector != nil && b.Selector.Matches(labels.Set(lbls))
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
