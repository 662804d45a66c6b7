package framework

import (
	"fmt"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/stages/scheduler/schedulertest"
)

var (
	mkPod = schedulertest.Pod
	image = schedulertest.Image
)

// typicalPod is the benchmarks' pod: 250m, 256Mi, one of 20 images.
func typicalPod(i int) *corev1.Pod {
	return mkPod(fmt.Sprintf("web-%05d", i), "250m", "256Mi", image(fmt.Sprintf("app-%d", i%20)))
}
