package linux_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/podflow/podflow/nodeagent/linux"
	"github.com/podflow/podflow/nodeagent/linux/cgroups"
	corev1 "github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/podrules"
)

// TestMeterUsage reads real cgroups: a container burning CPU has a CPU
// rate and a working set above 0, an idle one no CPU to speak of, and the
// node (its cgroup root) at least some; the first Sample has no rate.
func TestMeterUsage(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, 90*time.Second)
	burn := newPod(e.cfg.NodeName, "burn", "sh", "-c", "while :; do :; done")
	// A CPU request (Burstable) keeps the burner running on a loaded
	// machine, where BestEffort's 2 shares would starve it.
	burn.Spec.Containers[0].Resources = &corev1.ResourceRequirements{Requests: map[string]string{"cpu": "250m"}}
	idle := newPod(e.cfg.NodeName, "idle", "sleep", "3600")
	e.startPod(t, ctx, burn)
	e.startPod(t, ctx, idle)
	cg, err := cgroups.New(e.cfg.Cgroups)
	if err != nil {
		t.Fatal(err)
	}
	cpuOf := func(pod *corev1.Pod, qos string) uint64 {
		u, err := cg.ContainerUsage(pod.Metadata.Uid, qos, "main")
		if err != nil {
			t.Fatal(err)
		}
		return u.CPUNanos
	}
	// The idle container's sleep has started once its CPU time stops
	// moving; a rate is only ~0 from then on.
	var idleCPU uint64
	eventually(t, "the idle container to settle", func() (bool, string) {
		prev := idleCPU
		idleCPU = cpuOf(idle, podrules.QOSBestEffort)
		return prev != 0 && prev == idleCPU, fmt.Sprint(idleCPU)
	})

	m := e.rt.NewMeter()
	first, err := m.Sample(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if first.Window != 0 || first.CPUNanoCores != 0 || len(first.Pods) != 0 || first.MemoryBytes == 0 {
		t.Fatalf("first sample = %+v, want no rate, no pods, the node's memory", first)
	}
	// Let the burner use 50ms of CPU, however loaded the machine is.
	start := cpuOf(burn, podrules.QOSBurstable)
	eventually(t, "the burner to use 50ms of CPU", func() (bool, string) {
		n := cpuOf(burn, podrules.QOSBurstable)
		return n-start >= 50_000_000, fmt.Sprint(n - start)
	})
	rd, err := m.Sample(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if m.Last().Time != rd.Time {
		t.Errorf("Last = %v, want the last sample's %v", m.Last().Time, rd.Time)
	}
	got := map[string]linux.ContainerUsage{}
	for _, p := range rd.Pods {
		if p.Namespace != "default" || len(p.Containers) != 1 || p.Containers[0].Name != "main" {
			t.Fatalf("pod %+v: want default/%s with one container main", p, p.Name)
		}
		got[p.Name] = p.Containers[0]
	}
	b, i := got["burn"], got["idle"]
	t.Logf("window %v: node %+v, burn %+v, idle %+v", rd.Window, rd.NodeUsage, b.NodeUsage, i.NodeUsage)
	if len(rd.Pods) != 2 || rd.Window <= 0 {
		t.Fatalf("reading %+v: want both pods over a window", rd)
	}
	if b.CPUNanoCores == 0 || b.MemoryBytes == 0 {
		t.Errorf("burner %+v: want CPU and memory above 0", b)
	}
	// The burner used 50ms between the samples, on one thread: its rate
	// over the window is at least that, and at most one core.
	if used := float64(b.CPUNanoCores) * rd.Window.Seconds(); used < 0.9*50e6 || b.CPUNanoCores > 1.1e9 {
		t.Errorf("burner %d nanocores over %v: want at least 50ms of CPU and at most one core", b.CPUNanoCores, rd.Window)
	}
	// 5 millicores: a sleeping process uses none; a cumulative total or a
	// rate over the wrong interval would show more.
	if i.CPUNanoCores > 5_000_000 || i.MemoryBytes == 0 {
		t.Errorf("idle %+v: want ~0 CPU and memory above 0", i)
	}
	if rd.CPUNanoCores == 0 || rd.MemoryBytes < b.MemoryBytes {
		t.Errorf("node %+v: want CPU above 0 and at least the burner's memory", rd.NodeUsage)
	}
}
