package bench

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func TestBenchScaleOptions(t *testing.T) {
	valid := func() ScaleOptions {
		return ScaleOptions{Stage: "scheduler", Replicas: "1,2", StageCPU: 0.25, Pods: 3000, Rate: 1200, Nodes: 100, Runs: 3, Sample: 1e8}
	}
	for _, tc := range []struct {
		name   string
		edit   func(*ScaleOptions)
		counts []int
		err    string // "" = valid
	}{
		{name: "defaults", edit: func(*ScaleOptions) {}, counts: []int{1, 2}},
		{name: "three counts, spaces", edit: func(o *ScaleOptions) { o.Replicas = "2, 1 ,4" }, counts: []int{2, 1, 4}},
		{name: "unknown stage", edit: func(o *ScaleOptions) { o.Stage = "kubelet" }, err: `--stage "kubelet"`},
		{name: "empty replicas", edit: func(o *ScaleOptions) { o.Replicas = "" }, err: "not a replica count"},
		{name: "zero replicas", edit: func(o *ScaleOptions) { o.Replicas = "0,1" }, err: `"0" is not a replica count`},
		{name: "too many replicas", edit: func(o *ScaleOptions) { o.Replicas = "65" }, err: "(1..64)"},
		{name: "not a number", edit: func(o *ScaleOptions) { o.Replicas = "1,two" }, err: `"two" is not`},
		{name: "a count twice", edit: func(o *ScaleOptions) { o.Replicas = "1,2,1" }, err: "1 given twice"},
		{name: "no CPU", edit: func(o *ScaleOptions) { o.StageCPU = 0 }, err: "--stage-cpu 0"},
		{name: "negative CPU", edit: func(o *ScaleOptions) { o.StageCPU = -1 }, err: "--stage-cpu -1"},
		{name: "more CPU than the machine", edit: func(o *ScaleOptions) { o.StageCPU = float64(runtime.NumCPU() + 1) }, err: "at most the"},
		{name: "below the smallest quota", edit: func(o *ScaleOptions) { o.StageCPU = 0.005 }, err: "smallest CPU quota"},
		{name: "the smallest quota", edit: func(o *ScaleOptions) { o.StageCPU = 0.01 }, counts: []int{1, 2}},
		{name: "no pods", edit: func(o *ScaleOptions) { o.Pods = 0 }, err: "must be positive"},
		{name: "no runs", edit: func(o *ScaleOptions) { o.Runs = 0 }, err: "must be positive"},
		{name: "no sampling", edit: func(o *ScaleOptions) { o.Sample = 0 }, err: "--sample"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := valid()
			tc.edit(&o)
			err := o.Parse()
			switch {
			case tc.err == "" && err != nil:
				t.Fatalf("parse: %v", err)
			case tc.err == "" && !slices.Equal(o.counts, tc.counts):
				t.Fatalf("counts %v, want %v", o.counts, tc.counts)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Fatalf("parse: %v, want an error with %q", err, tc.err)
			}
		})
	}
}

func TestScaleReportPrint(t *testing.T) {
	run := func(n, round int, pps, stageMs float64, pend uint64) ScaleRun {
		return ScaleRun{Replicas: n, Run: round, Load1: 3, PodsPerSec: pps, Pods: 1000, StageCPUms: stageMs * 1000, TotalCPUms: 2000, Throttled: 0.5,
			Stage:     ConsumerLoad{PendingP50: pend / 2, PendingMax: pend, AckPendingP50: 100, AckPendingMax: 8192, MaxAckPending: 8192, Samples: 10},
			Consumers: map[string]ConsumerLoad{"scheduler": {PendingMax: pend}, "api": {PendingMax: 3}}}
	}
	rep := &ScaleReport{Stage: "scheduler", StageCPU: 0.25, Runs: []ScaleRun{
		run(1, 1, 200, 1.2, 2000), run(2, 1, 390, 1.3, 900),
		run(1, 2, 210, 1.1, 2200), run(2, 2, 410, 1.2, 1000),
		run(1, 3, 190, 1.3, 2400), run(2, 3, 400, 1.25, 1100),
	}}
	rep.Runs[5].Restarted = []string{"scheduler-2"}
	var b bytes.Buffer
	rep.print(&b)
	out := b.String()
	t.Log("\n" + out)
	lines := strings.Split(out, "\n")
	find := func(prefix string) []string {
		t.Helper()
		for _, l := range lines {
			if f := strings.Fields(l); len(f) > 0 && strings.HasPrefix(strings.Join(f, " "), prefix) {
				return f
			}
		}
		t.Fatalf("no line starting %q in\n%s", prefix, out)
		return nil
	}
	// Every run: replicas, run, load, pods/s, ms/pod, all ms/pod, throttled, pending p50/max, ack pending p50, max / bound.
	if f := find("1 2 3.0 210"); !slices.Equal(f, strings.Fields("1 2 3.0 210 1.100 2.00 50% 1100 2200 100 8192 / 8192")) {
		t.Errorf("run line %q", f)
	}
	if !strings.Contains(out, "(restarted: scheduler-2, unbounded)") {
		t.Errorf("the restarted replica is not marked")
	}
	// Medians: 1 replica 200 pods/s, 2 replicas 400 (2.00× the first count).
	if f := find("1 3 200"); !slices.Equal(f, strings.Fields("1 3 200 1.00× 1.200 2200 8192")) {
		t.Errorf("median line %q", f)
	}
	if f := find("2 3 400"); !slices.Equal(f, strings.Fields("2 3 400 2.00× 1.250 1000 8192")) {
		t.Errorf("median line %q", f)
	}
	if f := find("scheduler 2200"); !slices.Equal(f, []string{"scheduler", "2200", "1000"}) {
		t.Errorf("consumer line %q", f)
	}
	if f := find("api"); !slices.Equal(f, []string{"api", "3", "3"}) {
		t.Errorf("consumer line %q", f)
	}
}

// TestCPUGroupsUnavailable: without a cgroup cpu controller (here a plain
// directory as the mount point) the bench says so and skips.
func TestCPUGroupsUnavailable(t *testing.T) {
	_, err := newCPUGroups(t.TempDir())
	if !errors.Is(err, ErrNoCPUCgroup) {
		t.Fatalf("newCPUGroups on a plain directory: %v, want ErrNoCPUCgroup", err)
	}
	var b bytes.Buffer
	o := &ScaleOptions{CgroupRoot: t.TempDir()}
	if err := RunScale(t.Context(), o, &b); err != nil || !strings.Contains(b.String(), "bench scale: skipped: ") {
		t.Fatalf("runBenchScale: %v, output %q; want a skip", err, b.String())
	}
}

// realCPUGroups returns the bench's cgroups on this machine's hierarchy,
// removed when the test ends, or skips when it cannot have them.
func realCPUGroups(t *testing.T) *cpuGroups {
	t.Helper()
	g, err := newCPUGroups("/sys/fs/cgroup")
	if errors.Is(err, ErrNoCPUCgroup) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := g.Close(); err != nil {
			t.Error(err)
		}
	})
	return g
}

// sleeper starts a process that lives until the test ends.
func sleeper(t *testing.T) int {
	t.Helper()
	cmd := exec.Command("sleep", "600")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd.Process.Pid
}

// TestCPUGroupsPlaceRemove: a placed process is in a podflow-named cgroup
// with the quota asked for, as the kernel reports it; Remove takes the
// cgroup away though the process still runs (it moves to the root), and
// Close the bench's own cgroup.
func TestCPUGroupsPlaceRemove(t *testing.T) {
	g := realCPUGroups(t)
	pid := sleeper(t)
	b, err := g.Place("pf-test-1", pid, 0.5)
	if err != nil {
		t.Fatal(err)
	}
	if b.QuotaUs != 50_000 || b.PeriodUs != 100_000 || !slices.Equal(b.PIDs, []int{pid}) {
		t.Fatalf("bound %+v, want quota 50000 µs per 100000 µs with pid %d", b, pid)
	}
	if !strings.Contains(b.Path, "/podflow-bench-scale-"+strconv.Itoa(os.Getpid())+"/pf-test-1") {
		t.Fatalf("cgroup %q is not the bench's", b.Path)
	}
	if _, err := g.Throttle("pf-test-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := g.Place("pf/test", pid, 0.5); err == nil {
		t.Fatal("a cgroup name with a slash was accepted")
	}
	if _, err := g.Place("pf-test-2", pid, 0.001); err == nil {
		t.Fatal("a quota below the kernel's smallest was accepted")
	}
	if err := g.Remove("pf-test-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(b.Path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("cgroup %q still there after Remove: %v", b.Path, err)
	}
	if err := g.Remove("pf-test-1"); err != nil {
		t.Fatalf("Remove of a removed cgroup: %v", err)
	}
	if _, err := g.Place("pf-test-3", pid, 0.25); err != nil {
		t.Fatal(err)
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(g.Root()); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the bench's cgroup %q still there after Close (with a process placed): %v", g.Root(), err)
	}
}

// TestCPUGroupsSweep: a cgroup left by a bench that died (its PID gone) is
// removed when the next bench starts; one of a live bench is kept.
func TestCPUGroupsSweep(t *testing.T) {
	g := realCPUGroups(t)
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	hier := filepath.Dir(g.Root())
	stale := filepath.Join(hier, cpuGroupPrefix+strconv.Itoa(dead.Process.Pid))
	live := filepath.Join(hier, cpuGroupPrefix+strconv.Itoa(sleeper(t)))
	for _, d := range []string{filepath.Join(stale, "scheduler-1"), live} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		_ = removeCgroup(hier, filepath.Join(stale, "scheduler-1"))
		_ = removeCgroup(hier, stale)
		_ = removeCgroup(hier, live)
	})
	sweepCPUGroups(hier)
	if _, err := os.Stat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("stale cgroup %q not swept: %v", stale, err)
	}
	if _, err := os.Stat(live); err != nil {
		t.Errorf("a live bench's cgroup %q swept: %v", live, err)
	}
}
