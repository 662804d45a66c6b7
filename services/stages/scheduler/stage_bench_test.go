package scheduler_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/stages/scheduler/schedsim"
)

// BenchmarkStage measures the scheduler stage end to end over real parts
// (embedded JetStream, a 3-replica raftstore without fsync, R replicas):
// each iteration stores 1,000 pods, then publishes their PodPersisted and
// waits until all are bound, on 500 nodes (kube-scheduler's
// scheduler_perf node and pod: 4 cpu/32Gi/110 pods, 100m/500Mi). `podflow
// bench scheduler` runs the issue's shape (5,000 nodes, 10,000 pods).
func BenchmarkStage(b *testing.B) {
	const numNodes, batch = 500, 1000
	for _, replicas := range []int{1, 2} {
		b.Run(fmt.Sprintf("replicas=%d", replicas), func(b *testing.B) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			cfg := schedsim.DefaultConfig(b.TempDir())
			cfg.StoreNoSync = true
			env, err := schedsim.Start(ctx, cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer env.Close()
			if err := env.CreateNodes(ctx, schedsim.Nodes(numNodes, "4", "32Gi", 110)); err != nil {
				b.Fatal(err)
			}
			for i := range replicas {
				if _, err := env.StartReplica(ctx, fmt.Sprintf("scheduler-%d", i)); err != nil {
					b.Fatal(err)
				}
			}
			var elapsed time.Duration
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				pods := make([]*corev1.Pod, batch)
				for j := range pods {
					pods[j] = schedsim.Pod("bench", fmt.Sprintf("i%d-%05d", i, j), "100m", "500Mi")
				}
				if err := env.CreatePods(ctx, pods); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				start := time.Now()
				if err := env.Publish(ctx, pods); err != nil {
					b.Fatal(err)
				}
				if err := env.Scheduled.Wait(ctx, (i+1)*batch); err != nil {
					b.Fatal(err)
				}
				elapsed += time.Since(start)
			}
			b.ReportMetric(float64(b.N*batch)/elapsed.Seconds(), "pods/s")
			ph := env.Scheduled.Phases()
			b.ReportMetric(float64(ph.Bind.P50.Microseconds()), "bind-p50-µs")
			b.ReportMetric(float64(ph.Conflicts)/float64(ph.Pods), "conflicts/pod")
		})
	}
}
