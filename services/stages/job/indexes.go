package job

import (
	"slices"
	"strconv"
	"strings"

	batch "k8s.io/api/batch/v1"

	"github.com/podflow/podflow/proto/corev1"
)

// indexSet is a set of completion indexes.
type indexSet map[int]bool

// parseIndexes reads a status.completedIndexes ("1,3-5,7"), keeping the
// indexes below completions (kube's parseIndexesFromString).
func parseIndexes(s string, completions int) indexSet {
	out := indexSet{}
	if s == "" {
		return out
	}
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			continue
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil {
				continue
			}
		}
		for i := max(a, 0); i <= b && i < completions; i++ {
			out[i] = true
		}
	}
	return out
}

// String is the set as kube writes completedIndexes: sorted, runs of
// three or more consecutive indexes as intervals ("1,3-5,7,8").
func (s indexSet) String() string { return s.intervals().String() }

// intervals is the set as kube's orderedIntervals.
func (s indexSet) intervals() orderedIntervals {
	idx := make([]int, 0, len(s))
	for i := range s {
		idx = append(idx, i)
	}
	slices.Sort(idx)
	return orderedIntervals(nil).withOrderedIndexes(idx)
}

// podIndex is a pod's completion index (its annotation), if valid for a
// Job of completions (kube's getCompletionIndex).
func podIndex(p *corev1.Pod, completions int) (int, bool) {
	v, ok := p.GetMetadata().GetAnnotations()[batch.JobCompletionIndexAnnotation]
	if !ok {
		return 0, false
	}
	i, err := strconv.Atoi(v)
	if err != nil || i < 0 || i >= completions {
		return 0, false
	}
	return i, true
}
