package pipeline_test

import (
	"testing"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/podrules"
	"github.com/podflow/podflow/proto/vt"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/pipeline"
)

// BenchmarkPodWriteChecks: the store leader's check of a bind and of a
// status report (StoreWriteFilter), run on every such write.
func BenchmarkPodWriteChecks(b *testing.B) {
	key := objects.Pods.Key("default", "web")
	pod := storedPod()
	pod.Spec.Containers = append(pod.Spec.Containers, &corev1.Container{Name: "side", Image: "podflow/side:1",
		Env: []*corev1.EnvVar{{Name: "A", Value: "1"}, {Name: "B", Value: "2"}}})
	bound := vt.Clone(pod)
	bound.Spec.NodeName = "n1"
	bound.Status = &corev1.PodStatus{Conditions: []*corev1.PodCondition{{Type: podrules.PodScheduled, Status: "True"}}}
	running := vt.Clone(bound)
	running.Status.Phase = "Running"
	running.Metadata.Annotations = map[string]string{podrules.AnnotationStatusSeq: "3"}
	enc := func(p *corev1.Pod) []byte {
		data, err := objects.Encode(p)
		if err != nil {
			b.Fatal(err)
		}
		return data
	}
	for _, bc := range []struct {
		name     string
		stage    string
		old, new []byte
	}{
		{"bind", pipeline.Scheduler, enc(pod), enc(bound)},
		{"status", pipeline.Status, enc(bound), enc(running)},
	} {
		check := pipeline.StoreWriteFilter(pipeline.StageRole(bc.stage), key)
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := check(bc.old, bc.new); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
