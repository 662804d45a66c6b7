package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// scaleReport is what `podflow bench scale --json` writes (the fields the
// tests read).
type scaleReport struct {
	Cgroup string `json:"cgroup"`
	Runs   []struct {
		Replicas   int     `json:"replicas"`
		PodsPerSec float64 `json:"podsPerSec"`
		StageCPUms float64 `json:"stageCpuMs"`
		Stage      struct {
			Samples int `json:"samples"`
		} `json:"stage"`
		Bounds []struct {
			Path     string `json:"path"`
			QuotaUs  int64  `json:"quotaUs"`
			PeriodUs uint64 `json:"periodUs"`
			PIDs     []int  `json:"pids"`
		} `json:"bounds"`
		Restarted []string `json:"restarted"`
	} `json:"runs"`
}

// benchScale runs `podflow bench scale` with args; it skips the test when
// the bench skips (not root, no cgroup cpu controller).
func benchScale(t *testing.T, limit time.Duration, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, append([]string{"bench", "scale"}, args...)...)
	cmd.Dir = repoRoot
	out, err := cmd.CombinedOutput()
	if strings.Contains(string(out), "bench scale: skipped: ") {
		t.Skip(strings.TrimSpace(string(out)))
	}
	if err != nil {
		t.Fatalf("podflow bench scale %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// TestBenchScaleCgroups: a short `podflow bench scale` (1 and 2 replicas
// of the scheduler, 20 pods each) puts every replica of the stage in a
// podflow-named cgroup of its own with the CPU bound asked for — read back
// from the kernel while the replica ran — and no cgroup of it is left
// when the bench ends. No throughput is asserted.
func TestBenchScaleCgroups(t *testing.T) {
	parallel(t, simulated)
	file := filepath.Join(t.TempDir(), "scale.json")
	out := benchScale(t, 5*time.Minute, "--replica-counts", "1,2", "--runs", "1", "--pods", "20", "--rate", "50", "--nodes", "2",
		"--stage-cpu", "0.5", "--json", file)
	t.Log(out)
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var rep scaleReport
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Runs) != 2 || rep.Runs[0].Replicas != 1 || rep.Runs[1].Replicas != 2 {
		t.Fatalf("runs %+v, want one of 1 replica then one of 2", rep.Runs)
	}
	var roots []string
	t.Cleanup(func() { removeCgroups(append(roots, rmRoots(roots)...)) })
	for _, r := range rep.Runs {
		if len(r.Bounds) != r.Replicas {
			t.Errorf("%d replicas, %d cgroups", r.Replicas, len(r.Bounds))
		}
		pids := map[int]bool{}
		for _, bd := range r.Bounds {
			if bd.QuotaUs != 50_000 || bd.PeriodUs != 100_000 {
				t.Errorf("cgroup %s: quota %d µs per %d µs, want 50000 per 100000", bd.Path, bd.QuotaUs, bd.PeriodUs)
			}
			if len(bd.PIDs) != 1 || pids[bd.PIDs[0]] {
				t.Errorf("cgroup %s holds %v, want one replica of its own", bd.Path, bd.PIDs)
			}
			for _, p := range bd.PIDs {
				pids[p] = true
			}
			if !strings.HasPrefix(filepath.Base(filepath.Dir(bd.Path)), "podflow-bench-scale-") || !strings.HasPrefix(filepath.Base(bd.Path), "scheduler-") {
				t.Errorf("cgroup %s is not named podflow-bench-scale-<pid>/scheduler-<n>", bd.Path)
			}
			if _, err := os.Stat(bd.Path); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("cgroup %s left after the bench: %v", bd.Path, err)
			}
			roots = append(roots, bd.Path)
		}
		if len(r.Restarted) > 0 || r.Stage.Samples == 0 || r.StageCPUms <= 0 || r.PodsPerSec <= 0 {
			t.Errorf("run of %d: restarted %v, %d samples of the consumer, %v stage CPU ms, %v pods/s", r.Replicas, r.Restarted, r.Stage.Samples, r.StageCPUms, r.PodsPerSec)
		}
	}
	for _, root := range slices.Compact(rmRoots(roots)) {
		if _, err := os.Stat(root); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the bench's cgroup %s left after it: %v", root, err)
		}
	}
}

// TestBenchScaleInterrupted: a bench interrupted (SIGINT) while its
// replica runs bounded — while it offers the load, and while it waits for
// the pods to run (its scheduler bounded so tightly that the wait would
// last minutes) — stops its system at once and removes its cgroups.
func TestBenchScaleInterrupted(t *testing.T) {
	parallel(t, heavyLoad)
	for _, tc := range []struct {
		name, when string
		args       []string
	}{
		{"offering", "", []string{"--pods", "100000", "--rate", "100", "--stage-cpu", "0.5"}},
		{"waiting", "waiting for them to run", []string{"--pods", "20000", "--rate", "100000", "--stage-cpu", "0.01"}},
	} {
		t.Run(tc.name, func(t *testing.T) { interruptBenchScale(t, tc.when, tc.args...) })
	}
}

// interruptBenchScale starts a bench, waits until its scheduler replica is
// in its cgroup and its output has when, sends SIGINT and checks that it
// stopped and left no cgroup.
func interruptBenchScale(t *testing.T, when string, args ...string) {
	// Its output goes to a file, not a pipe: Wait then does not wait for
	// the system's processes, which inherit it.
	logf, err := os.Create(filepath.Join(t.TempDir(), "bench.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	out := func() string { b, _ := os.ReadFile(logf.Name()); return string(b) }
	cmd := exec.Command(binary, append([]string{"bench", "scale", "--replica-counts", "1", "--runs", "1", "--nodes", "2"}, args...)...)
	cmd.Dir = repoRoot
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		select {
		case <-exited:
		default:
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	own := cpuGroupDirs(cmd.Process.Pid)
	t.Cleanup(func() {
		for _, d := range own {
			removeCgroups([]string{filepath.Join(d, "scheduler-1"), d})
		}
	})
	var replica string
	eventually(t, 2*time.Minute, "the scheduler replica in the bench's cgroup", func() (bool, string) {
		if strings.Contains(out(), "skipped: ") {
			t.Skip(out())
		}
		for _, dir := range own {
			if b, err := os.ReadFile(filepath.Join(dir, "scheduler-1", "cgroup.procs")); err == nil && len(bytes.TrimSpace(b)) > 0 && strings.Contains(out(), when) {
				replica = filepath.Join(dir, "scheduler-1")
				return true, ""
			}
		}
		return false, out()
	})
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
	case <-time.After(2 * time.Minute):
		t.Fatalf("the bench did not stop within 2m of SIGINT:\n%s", out())
	}
	for _, p := range []string{replica, filepath.Dir(replica)} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("cgroup %s left after the interrupted bench: %v\n%s", p, err, out())
		}
	}
}

// cpuGroupDirs are where a bench of PID pid makes its cgroup (v2, hybrid
// v2 or v1 cpu).
func cpuGroupDirs(pid int) []string {
	name := "podflow-bench-scale-" + strconv.Itoa(pid)
	return []string{filepath.Join("/sys/fs/cgroup", name), filepath.Join("/sys/fs/cgroup/unified", name), filepath.Join("/sys/fs/cgroup/cpu", name)}
}

func rmRoots(paths []string) []string {
	var out []string
	for _, p := range paths {
		out = append(out, filepath.Dir(p))
	}
	return out
}

// removeCgroups removes the cgroups at paths (children first) that a
// failed bench left, so that a failed test leaves none either: what is
// still in one (a process of a killed bench's system, exiting) moves to
// the hierarchy's root first.
func removeCgroups(paths []string) {
	for _, p := range paths {
		top, _, ok := strings.Cut(p, "/podflow-bench-scale-")
		b, err := os.ReadFile(filepath.Join(p, "cgroup.procs"))
		if !ok || err != nil {
			continue
		}
		for _, pid := range strings.Fields(string(b)) {
			_ = os.WriteFile(filepath.Join(top, "cgroup.procs"), []byte(pid), 0)
		}
		_ = syscall.Rmdir(p)
	}
}
