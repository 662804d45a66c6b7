package job

import (
	"slices"
	"time"

	batch "k8s.io/api/batch/v1"
	v1 "k8s.io/api/core/v1"

	"github.com/podflow/podflow/proto/corev1"
)

// perIndex is what backoffLimitPerIndex decides for an Indexed Job in one
// sync (kube's calculateFailedIndexes and
// getPodsWithDelayedDeletionPerIndex).
type perIndex struct {
	job *batch.Job
	kp  kubePods
	// failed are the failed indexes: status.failedIndexes and the indexes
	// of the pods not counted yet that failed them.
	failed orderedIntervals
	// replaced is, per index to run again, its last failed pod still
	// holding the finalizer: the replacement takes its failure count on
	// and it is counted once the replacement runs.
	replaced map[int]*corev1.Pod
}

func newPerIndex(job *batch.Job, pods, activePods []*corev1.Pod, succeeded indexSet, kp kubePods) *perIndex {
	completions := int(*job.Spec.Completions)
	pi := &perIndex{job: job, kp: kp, replaced: map[int]*corev1.Pod{}}
	if job.Status.FailedIndexes != nil {
		pi.failed = parseIndexesFromString(*job.Status.FailedIndexes, completions)
	}
	var newFailed []int
	for _, p := range pods {
		if i, ok := podIndex(p, completions); ok && hasFinalizer(p) && pi.indexFailed(p) && !slices.Contains(newFailed, i) {
			newFailed = append(newFailed, i)
		}
	}
	slices.Sort(newFailed)
	pi.failed = pi.failed.withOrderedIndexes(newFailed)
	activeIdx := map[int]bool{}
	for _, p := range activePods {
		if i, ok := podIndex(p, completions); ok {
			activeIdx[i] = true
		}
	}
	for _, p := range pods {
		i, ok := podIndex(p, completions)
		if _, f := outcome(p, job); !ok || !f || !hasFinalizer(p) || succeeded[i] || pi.failed.has(i) || activeIdx[i] {
			continue
		}
		last, ok := pi.replaced[i]
		if !ok || getIndexAbsoluteFailureCount(kp.of(last)) <= getIndexAbsoluteFailureCount(kp.of(p)) && !finishTime(p).Before(finishTime(last)) {
			pi.replaced[i] = p
		}
	}
	return pi
}

// indexFailed is kube's isIndexFailed: p failed and either matched a
// FailIndex rule or used up its index's backoffLimitPerIndex.
func (pi *perIndex) indexFailed(p *corev1.Pod) bool {
	if _, f := outcome(p, pi.job); !f {
		return false
	}
	counted := true
	if pi.job.Spec.PodFailurePolicy != nil {
		_, count, action := matchPodFailurePolicy(pi.job.Spec.PodFailurePolicy, pi.kp.of(p))
		if action != nil && *action == batch.PodFailurePolicyActionFailIndex {
			return true
		}
		counted = count
	}
	return counted && getIndexFailureCount(pi.kp.of(p)) >= *pi.job.Spec.BackoffLimitPerIndex
}

// replacedOf is, in kube's form, the failed pod index i's next pod
// replaces (nil: none).
func (pi *perIndex) replacedOf(i int) *v1.Pod {
	p := pi.replaced[i]
	if p == nil {
		return nil
	}
	return pi.kp.of(p)
}

// delayed reports whether p's count waits for its replacement.
func (pi *perIndex) delayed(p *corev1.Pod) bool {
	i, ok := podIndex(p, int(*pi.job.Spec.Completions))
	return ok && pi.replaced[i] == p
}

// remaining is how long index i still waits before its next pod after
// its last failure (kube's getRemainingTimePerIndex).
func (pi *perIndex) remaining(i int, base, maxBackoff time.Duration, now time.Time) time.Duration {
	p := pi.replaced[i]
	if p == nil {
		return 0
	}
	last := finishTime(p)
	return getRemainingTimeForFailuresCount(now, base, maxBackoff, getIndexAbsoluteFailureCount(pi.kp.of(p))+1, &last)
}
