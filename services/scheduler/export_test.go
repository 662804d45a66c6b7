package scheduler

import "github.com/podflow/podflow/proto/corev1"

// SetPreemptHook sets the hook a preemption calls at its named points
// ("nominated": committed, victims' deletion not yet requested;
// "requested": deletion requested, preemptor not yet bound) and returns
// the function that removes it. Set it before any replica starts.
func SetPreemptHook(f func(point, replica string, pod *corev1.Pod)) (restore func()) {
	preemptHook = f
	return func() { preemptHook = nil }
}
