package scheduler

import (
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"syscall"
	"testing"
	"time"

	"github.com/podflow/podflow/services/stages/scheduler/cache"
	"github.com/podflow/podflow/services/stages/scheduler/framework"
	"github.com/podflow/podflow/services/stages/scheduler/plugins/podtopologyspread"

	"github.com/podflow/podflow/proto/corev1"
)

// typicalPod is a web-ish pod: one container, 250m and 256Mi, a common
// image, no constraints.
func typicalPod(i int) *corev1.Pod {
	return mkPod(fmt.Sprintf("web-%05d", i), "250m", "256Mi", image(fmt.Sprintf("app-%d", i%20)))
}

func benchCluster(b *testing.B, n int) *cache.Cache {
	b.Helper()
	return cacheWith(b, variedCluster(rand.New(rand.NewPCG(5, 6)), n))
}

// BenchmarkSchedule5000Nodes is one scheduling cycle for a typical pod on a
// 5,000-node cluster of varied sizes, taints and labels (the adaptive
// sample is 500 feasible nodes).
func BenchmarkSchedule5000Nodes(b *testing.B) {
	snap := benchCluster(b, 5000).Snapshot()
	s := newTestScheduler(b)
	pod := typicalPod(0)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Schedule(pod, snap); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkScheduleConstrained5000Nodes is a cycle for a pod with a node
// selector, a toleration, a host port and preferred affinity.
func BenchmarkScheduleConstrained5000Nodes(b *testing.B) {
	snap := benchCluster(b, 5000).Snapshot()
	s := newTestScheduler(b)
	pod := mkPod("p", "500m", "1Gi", nodeSelector("topology.kubernetes.io/zone", "zone-1"),
		tolerate("dedicated", "Equal", "gpu", "NoSchedule"), hostPort(9100, "TCP", ""),
		preferred(10, term(expr("cores", "Gt", "4"))))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Schedule(pod, snap); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkUnschedulable5000Nodes is a cycle that finds no node: every
// node is filtered and a FitError built.
func BenchmarkUnschedulable5000Nodes(b *testing.B) {
	snap := benchCluster(b, 5000).Snapshot()
	s := newTestScheduler(b)
	pod := mkPod("huge", "64", "1Gi")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Schedule(pod, snap); !errors.Is(err, framework.ErrUnschedulable) {
			b.Fatal(err)
		}
	}
}

// benchPluginMetrics turns scheduler_plugin_execution_duration_seconds on
// in BenchmarkScheduleAndAssume10000Pods, as Stage.RegisterMetrics does:
// go test -bench ScheduleAndAssume -args -plugin-metrics.
var benchPluginMetrics = flag.Bool("plugin-metrics", false, "observe scheduler_plugin_execution_duration_seconds in BenchmarkScheduleAndAssume10000Pods")

// BenchmarkScheduleAndAssume10000Pods is the scheduler loop without I/O:
// for each of 10,000 pods, update the snapshot, schedule and assume, on a
// 5,000-node cluster. It reports pods/s. -plugin-metrics samples plugin
// timings as a stage does.
func BenchmarkScheduleAndAssume10000Pods(b *testing.B) {
	const numPods = 10000
	pods := make([]*corev1.Pod, numPods)
	for i := range pods {
		pods[i] = typicalPod(i)
	}
	b.ReportAllocs()
	var elapsed, cpu time.Duration
	for b.Loop() {
		b.StopTimer()
		c := benchCluster(b, 5000)
		s := newTestScheduler(b)
		if *benchPluginMetrics {
			s.SetPluginMetrics(NewPluginDurationMetric())
		}
		snap := framework.NewSnapshot()
		c.UpdateSnapshot(snap)
		b.StartTimer()
		start, startCPU := time.Now(), cpuTime()
		for _, pod := range pods {
			c.UpdateSnapshot(snap)
			res, err := s.Schedule(pod, snap)
			if err != nil {
				b.Fatal(err)
			}
			if err := c.AssumePod(pod, res.Node); err != nil {
				b.Fatal(err)
			}
		}
		elapsed += time.Since(start)
		cpu += cpuTime() - startCPU
	}
	b.ReportMetric(float64(numPods*b.N)/elapsed.Seconds(), "pods/s")
	// On a shared machine wall time depends on the neighbours; CPU time
	// (this process, GC included) does much less.
	b.ReportMetric(float64(numPods*b.N)/cpu.Seconds(), "pods/cpu-s")
}

// cpuTime returns the user and system CPU time of the process.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkUpdateSnapshotOneChange is the per-cycle snapshot cost after one
// assume on a 5,000-node cluster.
func BenchmarkUpdateSnapshotOneChange(b *testing.B) {
	c := benchCluster(b, 5000)
	snap := c.Snapshot()
	pod := typicalPod(0)
	b.ReportAllocs()
	for b.Loop() {
		if err := c.AssumePod(pod, "node-0042"); err != nil {
			b.Fatal(err)
		}
		c.UpdateSnapshot(snap)
		if err := c.ForgetPod(pod); err != nil {
			b.Fatal(err)
		}
	}
}

// podAwareCluster is the 5,000-node cluster with 10,000 pods of app
// web-0..web-9 placed round-robin, for the pod-aware plugins' cycles.
func podAwareCluster(b *testing.B) *framework.Snapshot {
	b.Helper()
	c := benchCluster(b, 5000)
	for i := range 10000 {
		pod := mkPod(fmt.Sprintf("placed-%05d", i), "10m", "16Mi", podLabels("app", fmt.Sprintf("web-%d", i%10)))
		if err := c.AssumePod(pod, fmt.Sprintf("node-%04d", i%5000)); err != nil {
			b.Fatal(err)
		}
	}
	return c.Snapshot()
}

// BenchmarkScheduleTopologySpread5000Nodes is a cycle for a pod with a
// DoNotSchedule zone constraint and a ScheduleAnyway hostname one, among
// 10,000 pods.
func BenchmarkScheduleTopologySpread5000Nodes(b *testing.B) {
	snap := podAwareCluster(b)
	s := newTestScheduler(b)
	sel := &corev1.LabelSelector{MatchLabels: map[string]string{"app": "web-3"}}
	pod := mkPod("p", "100m", "128Mi", podLabels("app", "web-3"),
		spreadBy(1, "topology.kubernetes.io/zone", "DoNotSchedule", sel), spreadBy(1, podtopologyspread.LabelHostname, "ScheduleAnyway", sel))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Schedule(pod, snap); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkScheduleAntiAffinity5000Nodes is a cycle for a pod with
// required anti-affinity by hostname to its app and preferred affinity by
// zone to another, among 10,000 pods.
func BenchmarkScheduleAntiAffinity5000Nodes(b *testing.B) {
	snap := podAwareCluster(b)
	s := newTestScheduler(b)
	pod := mkPod("p", "100m", "128Mi", podLabels("app", "web-3"),
		antiAffinityTo(podtopologyspread.LabelHostname, &corev1.LabelSelector{MatchLabels: map[string]string{"app": "web-3"}}),
		preferAffinity(10, "topology.kubernetes.io/zone", &corev1.LabelSelector{MatchLabels: map[string]string{"app": "web-4"}}, false))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Schedule(pod, snap); err != nil {
			b.Fatal(err)
		}
	}
}
