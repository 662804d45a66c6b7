package sim_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"

	"github.com/podflow/podflow/nodeagent/sim"
	corev1 "github.com/podflow/podflow/proto/corev1"
)

// BenchmarkSandboxMemory: the heap the simulated runtime holds per pod
// sandbox (its record, IP and exit channel), before any container. The
// scale goal is at most 10 KB per pod for the whole simulated-node process;
// "bytes/pod" is the runtime's share.
func BenchmarkSandboxMemory(b *testing.B) {
	const pods = 2000
	ctx := context.Background()
	var held float64
	for b.Loop() {
		before := liveHeap()
		rt, err := sim.New(sim.DefaultConfig("10.128.0.0/16"))
		if err != nil {
			b.Fatal(err)
		}
		for i := range pods {
			p := &corev1.Pod{Metadata: &corev1.ObjectMeta{Namespace: "bench", Name: fmt.Sprintf("p-%d", i), Uid: fmt.Sprintf("uid-%d", i)},
				Spec: &corev1.PodSpec{Containers: []*corev1.Container{{Name: "app", Image: "pause"}}}}
			if _, err := rt.RunPodSandbox(ctx, p); err != nil {
				b.Fatal(err)
			}
		}
		held = float64(liveHeap()-before) / pods
		rt.Close()
	}
	b.ReportMetric(held, "bytes/pod")
}

func liveHeap() int64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}
