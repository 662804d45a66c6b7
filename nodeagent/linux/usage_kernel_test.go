package linux_test

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
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
	t.Parallel()
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
	// The idle container uses no CPU from the moment its process is
	// blocked in sleep's nanosleep: before that it may still be exec'ing
	// and linking, and on a loaded machine it can be descheduled midway,
	// so a CPU time that stops moving for a while proves nothing.
	eventually(t, "the idle container blocked in its sleep", func() (bool, string) {
		pids := podPIDs(t, e.cgroups, idle.Metadata.Uid, "main")
		if len(pids) == 0 {
			return false, "no process"
		}
		for _, pid := range pids {
			if call := blockedSyscall(pid); call != sysNanosleep && call != sysClockNanosleep {
				return false, fmt.Sprintf("pid %s in syscall %q", pid, call)
			}
		}
		return true, ""
	})

	m := e.rt.NewMeter()
	first, err := m.Sample(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if first.Window != 0 || first.CPUNanoCores != 0 || len(first.Pods) != 0 || first.MemoryBytes == 0 {
		t.Fatalf("first sample = %+v, want no rate, no pods, the node's memory", first)
	}
	// Let the burner use burnNanos of CPU, however loaded the machine is.
	// A rate is a difference of two readings over the interval between
	// their times, each taken a moment after its counter is read; under
	// load that moment varies by milliseconds, so the window is long
	// enough for such a skew to stay well inside the bounds below (a
	// 75 ms window once read a single thread as 1.18 cores).
	const burnNanos = 500_000_000
	start := cpuOf(burn, podrules.QOSBurstable)
	for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		n := cpuOf(burn, podrules.QOSBurstable)
		if n-start >= burnNanos {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the burner used %d ns of CPU in 90 s, want %d", n-start, burnNanos)
		}
	}
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
	// The burner used burnNanos between the samples, on one thread: its
	// rate over the window is at least that, and at most one core.
	if used := float64(b.CPUNanoCores) * rd.Window.Seconds(); used < 0.9*burnNanos || b.CPUNanoCores > 1.1e9 {
		t.Errorf("burner %d nanocores over %v: want at least %d ns of CPU and at most one core", b.CPUNanoCores, rd.Window, burnNanos)
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

// x86-64 and arm64 numbers of the two sleeps (sleep(1) uses one of them).
var (
	sysNanosleep      = map[string]string{"amd64": "35", "arm64": "101"}[runtime.GOARCH]
	sysClockNanosleep = map[string]string{"amd64": "230", "arm64": "115"}[runtime.GOARCH]
)

// podPIDs lists the processes of the pod's container cgroup under root.
func podPIDs(t *testing.T, root, uid, container string) []string {
	t.Helper()
	procs, _ := filepath.Glob("/sys/fs/cgroup/*/" + root + "/*/pod" + uid + "/" + container + "/cgroup.procs")
	v2, _ := filepath.Glob("/sys/fs/cgroup/" + root + "/*/pod" + uid + "/" + container + "/cgroup.procs")
	var pids []string
	for _, f := range append(procs, v2...) {
		b, _ := os.ReadFile(f)
		pids = append(pids, strings.Fields(string(b))...)
	}
	return pids
}

// blockedSyscall is the number of the system call pid is blocked in
// ("running" when it runs, "" when it is gone), from /proc/PID/syscall.
func blockedSyscall(pid string) string {
	b, err := os.ReadFile("/proc/" + pid + "/syscall")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return ""
	}
	return f[0]
}
