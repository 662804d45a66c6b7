package podrules

import (
	"strconv"

	"github.com/podflow/podflow/proto/corev1"
)

// AnnotationStatusSeq records the seq of the last node status report
// applied to a pod, so that a redelivered or reordered older report is
// ignored: applying any report twice leaves the same state.
const AnnotationStatusSeq = "podflow.io/status-seq"

// AppliedSeq returns the seq of the last status report applied to pod (0
// when none was).
func AppliedSeq(pod *corev1.Pod) int64 {
	n, _ := strconv.ParseInt(pod.GetMetadata().GetAnnotations()[AnnotationStatusSeq], 10, 64)
	return n
}

// SetAppliedSeq records seq as the last status report applied to pod.
func SetAppliedSeq(pod *corev1.Pod, seq int64) {
	if pod.Metadata == nil {
		pod.Metadata = &corev1.ObjectMeta{}
	}
	if pod.Metadata.Annotations == nil {
		pod.Metadata.Annotations = map[string]string{}
	}
	pod.Metadata.Annotations[AnnotationStatusSeq] = strconv.FormatInt(seq, 10)
}
