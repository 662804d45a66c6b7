package cgroups

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/podflow/podflow/proto/podrules"
)

// These tests need root. Each uses its own hierarchy root
// "podflow-test-<random>" and removes it in t.Cleanup; they run once per
// mode the machine supports (v1 and/or v2) and skip a mode it lacks.

const helperEnv = "PODFLOW_CGROUPS_TEST_HELPER"

// runHelper is the body of the test binary re-executed as a child: it
// waits for a line on stdin (the parent has put it in its cgroup by then),
// then sleeps or allocates memory until killed.
func runHelper(mode string) {
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
	switch mode {
	case "sleep":
		time.Sleep(time.Hour)
	case "alloc":
		var hold [][]byte
		for range 1024 { // up to 1 GiB, touching every page
			b := make([]byte, 1<<20)
			for i := 0; i < len(b); i += 4096 {
				b[i] = 1
			}
			hold = append(hold, b)
		}
		fmt.Println(len(hold))
	case "exit":
	}
	os.Exit(0)
}

type child struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
}

// startHelper starts the test binary as a helper child waiting to go.
func startHelper(t *testing.T, mode string) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+mode)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &child{cmd: cmd, stdin: stdin}
	t.Cleanup(func() { c.kill() })
	return c
}

func (c *child) pid() int { return c.cmd.Process.Pid }
func (c *child) start()   { _, _ = io.WriteString(c.stdin, "go\n") }
func (c *child) kill() {
	if c.cmd.ProcessState == nil {
		_ = c.cmd.Process.Kill()
		_ = c.cmd.Wait()
	}
}

func modes(t *testing.T, run func(t *testing.T, m *Manager)) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates cgroups")
	}
	for _, mode := range []string{ModeV1, ModeV2} {
		t.Run(mode, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Mode = mode
			cfg.Root = fmt.Sprintf("podflow-test-%d", rand.Int64())
			m, err := New(cfg)
			if errors.Is(err, ErrUnavailable) {
				t.Skipf("cgroup %s unusable here: %v", mode, err)
			}
			if err != nil {
				t.Fatal(err)
			}
			if m.Mode() != mode {
				t.Fatalf("Mode = %s, want %s", m.Mode(), mode)
			}
			t.Cleanup(func() {
				ctx := context.Background()
				uids, _ := m.ListPods(ctx)
				for _, uid := range uids {
					if err := m.RemovePod(ctx, uid, ""); err != nil {
						t.Errorf("cleanup %s: %v", uid, err)
					}
				}
				if err := m.RemoveHierarchy(ctx); err != nil {
					t.Errorf("cleanup hierarchy: %v", err)
				}
				requireNoTrace(t, m)
			})
			run(t, m)
		})
	}
}

// requireNoTrace asks the cgroup filesystems that nothing named after the
// manager's root remains.
func requireNoTrace(t *testing.T, m *Manager) {
	t.Helper()
	for _, dir := range m.dirs("/" + m.cfg.Root) {
		if _, err := os.Stat(dir); err == nil {
			t.Errorf("%s remains", dir)
		}
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// testPlan is the plan of a Guaranteed pod with containers "app" (500m,
// 96Mi) and "side" (250m, 32Mi), as the node agent's PlanPod makes it.
func testPlan() PodPlan {
	return guaranteedPlan(map[string][2]int64{"app": {500, 96 * mi}, "side": {250, 32 * mi}}, "app", "side")
}

// guaranteedPlan is the plan of a Guaranteed pod whose containers, in order
// names, request and are limited to limits[name] (millicores, bytes).
func guaranteedPlan(limits map[string][2]int64, names ...string) PodPlan {
	plan := PodPlan{QOSClass: podrules.QOSGuaranteed}
	var cpu, mem int64
	for _, name := range names {
		l := limits[name]
		cpu, mem = cpu+l[0], mem+l[1]
		plan.Containers = append(plan.Containers, ContainerPlan{Name: name, Resources: ResourcesFor(l[0], l[0], l[1], false)})
	}
	plan.Resources = ResourcesFor(cpu, cpu, mem, false)
	return plan
}

// TestLimitsInKernel: the pod's and its containers' limits are exactly what
// their cgroup files hold.
func TestLimitsInKernel(t *testing.T) {
	modes(t, func(t *testing.T, m *Manager) {
		ctx := context.Background()
		uid := "7d1c0e52-aaaa-4bbb-8ccc-000000000001"
		plan := testPlan()
		if err := m.EnsurePod(ctx, uid, plan.QOSClass, plan); err != nil {
			t.Fatal(err)
		}
		if err := m.EnsurePod(ctx, uid, plan.QOSClass, plan); err != nil {
			t.Fatalf("second EnsurePod: %v", err)
		}
		podPath, _ := m.PodPath(uid, plan.QOSClass)
		if podPath != "/"+m.cfg.Root+"/guaranteed/pod"+uid {
			t.Fatalf("pod path %s", podPath)
		}
		podCg := m.handle(podPath)
		if got, err := podCg.MemoryLimit(); err != nil || got != 128*mi {
			t.Errorf("pod memory limit = %d, %v; want %d", got, err, 128*mi)
		}
		for _, name := range []string{"app", "side"} {
			cp, _ := plan.Container(name)
			c, err := m.EnsureContainer(ctx, uid, plan.QOSClass, name, cp)
			if err != nil {
				t.Fatal(err)
			}
			got, err := c.MemoryLimit()
			if err != nil || got != cp.MemoryLimit {
				t.Errorf("%s: MemoryLimit = %d, %v; want %d", name, got, err, cp.MemoryLimit)
			}
			p := c.Paths()
			switch m.Mode() {
			case ModeV1:
				want := map[string]string{
					p["memory"] + "/memory.limit_in_bytes": strconv.FormatInt(cp.MemoryLimit, 10),
					p["cpu"] + "/cpu.shares":               strconv.FormatUint(cp.CPUShares, 10),
					p["cpu"] + "/cpu.cfs_quota_us":         strconv.FormatInt(cp.CPUQuota, 10),
					p["cpu"] + "/cpu.cfs_period_us":        strconv.FormatUint(cp.CPUPeriod, 10),
					p["pids"] + "/pids.max":                strconv.FormatInt(cp.PidsLimit, 10),
				}
				if m.memsw {
					want[p["memory"]+"/memory.memsw.limit_in_bytes"] = strconv.FormatInt(cp.MemoryLimit, 10)
				}
				for file, v := range want {
					if got := readFile(t, file); got != v {
						t.Errorf("%s = %s, want %s", file, got, v)
					}
				}
				if _, err := c.CgroupFD(); !errors.Is(err, ErrNotSupported) {
					t.Errorf("CgroupFD on v1 = %v, want ErrNotSupported", err)
				}
			case ModeV2:
				dir := p[""]
				want := map[string]string{
					dir + "/memory.max": strconv.FormatInt(cp.MemoryLimit, 10),
					dir + "/cpu.weight": strconv.FormatUint(cp.CPUWeight, 10),
					dir + "/cpu.max":    fmt.Sprintf("%d %d", cp.CPUQuota, cp.CPUPeriod),
					dir + "/pids.max":   strconv.FormatInt(cp.PidsLimit, 10),
				}
				for file, v := range want {
					if got := readFile(t, file); got != v {
						t.Errorf("%s = %s, want %s", file, got, v)
					}
				}
				fd, err := c.CgroupFD()
				if err != nil {
					t.Errorf("CgroupFD: %v", err)
				} else {
					syscall.Close(fd)
				}
			}
		}
		uids, err := m.ListPods(ctx)
		if err != nil || len(uids) != 1 || uids[0] != uid {
			t.Fatalf("ListPods = %v, %v", uids, err)
		}
	})
}

// TestRemovePodRefusesWhileProcessesRemain: a process in a container cgroup
// keeps RemovePod failing with ErrBusy (nothing is killed); once it is gone
// RemovePod removes every directory, and again is a no-op.
func TestRemovePodRefusesWhileProcessesRemain(t *testing.T) {
	modes(t, func(t *testing.T, m *Manager) {
		ctx := context.Background()
		uid := "busy-pod"
		plan := testPlan()
		if err := m.EnsurePod(ctx, uid, "", plan); err != nil {
			t.Fatal(err)
		}
		cp, _ := plan.Container("app")
		c, err := m.EnsureContainer(ctx, uid, plan.QOSClass, "app", cp)
		if err != nil {
			t.Fatal(err)
		}
		h := startHelper(t, "sleep")
		if err := c.Add(h.pid()); err != nil {
			t.Fatal(err)
		}
		if pids, err := c.Pids(); err != nil || len(pids) != 1 || pids[0] != h.pid() {
			t.Fatalf("Pids = %v, %v; want [%d]", pids, err, h.pid())
		}
		loaded, err := m.LoadContainer(uid, plan.QOSClass, "app")
		if err != nil {
			t.Fatal(err)
		}
		if pids, err := loaded.Pids(); err != nil || len(pids) != 1 || pids[0] != h.pid() {
			t.Fatalf("loaded Pids = %v, %v; want [%d]", pids, err, h.pid())
		}
		procCgroup := readFile(t, fmt.Sprintf("/proc/%d/cgroup", h.pid()))
		podPath, _ := m.PodPath(uid, plan.QOSClass)
		if !strings.Contains(procCgroup, podPath+"/app") {
			t.Fatalf("/proc/%d/cgroup does not name %s/app:\n%s", h.pid(), podPath, procCgroup)
		}
		if err := m.RemovePod(ctx, uid, plan.QOSClass); !errors.Is(err, ErrBusy) {
			t.Fatalf("RemovePod with a process inside = %v, want ErrBusy", err)
		}
		if err := c.Delete(); !errors.Is(err, ErrBusy) {
			t.Fatalf("Delete with a process inside = %v, want ErrBusy", err)
		}
		if err := syscall.Kill(h.pid(), 0); err != nil {
			t.Fatalf("RemovePod killed the process: %v", err)
		}
		h.kill()
		if err := m.RemovePod(ctx, uid, ""); err != nil {
			t.Fatal(err)
		}
		for _, dir := range m.dirs(podPath) {
			if _, err := os.Stat(dir); err == nil {
				t.Errorf("%s remains", dir)
			}
		}
		if err := m.RemovePod(ctx, uid, plan.QOSClass); err != nil {
			t.Fatalf("second RemovePod: %v", err)
		}
		if uids, err := m.ListPods(ctx); err != nil || len(uids) != 0 {
			t.Fatalf("ListPods = %v, %v", uids, err)
		}
	})
}

// TestOOMKilled: a process allocating beyond its container's memory limit
// is killed by the kernel and OOMKilled reports it; a process that exits
// within its limit is not reported.
func TestOOMKilled(t *testing.T) {
	modes(t, func(t *testing.T, m *Manager) {
		ctx := context.Background()
		uid := "oom-pod"
		plan := guaranteedPlan(map[string][2]int64{"hog": {1000, 48 * mi}, "calm": {1000, 48 * mi}}, "hog", "calm")
		if err := m.EnsurePod(ctx, uid, "", plan); err != nil {
			t.Fatal(err)
		}
		run := func(name, mode string) (Container, error) {
			cp, _ := plan.Container(name)
			c, err := m.EnsureContainer(ctx, uid, plan.QOSClass, name, cp)
			if err != nil {
				t.Fatal(err)
			}
			h := startHelper(t, mode)
			if err := c.Add(h.pid()); err != nil {
				t.Fatal(err)
			}
			h.start()
			return c, h.cmd.Wait()
		}
		hog, err := run("hog", "alloc")
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Fatalf("hog ended with %v, want killed by SIGKILL", err)
		}
		if oom, err := hog.OOMKilled(); err != nil || !oom {
			t.Fatalf("hog OOMKilled = %v, %v; want true", oom, err)
		}
		calm, err := run("calm", "exit")
		if err != nil {
			t.Fatalf("calm: %v", err)
		}
		if oom, err := calm.OOMKilled(); err != nil || oom {
			t.Fatalf("calm OOMKilled = %v, %v; want false", oom, err)
		}
		// A fresh cgroup for the restarted hog starts clean.
		if err := hog.Delete(); err != nil {
			t.Fatal(err)
		}
		cp, _ := plan.Container("hog")
		again, err := m.EnsureContainer(ctx, uid, plan.QOSClass, "hog", cp)
		if err != nil {
			t.Fatal(err)
		}
		if oom, err := again.OOMKilled(); err != nil || oom {
			t.Fatalf("recreated hog OOMKilled = %v, %v; want false", oom, err)
		}
	})
}

func TestInvalidNames(t *testing.T) {
	modes(t, func(t *testing.T, m *Manager) {
		ctx := context.Background()
		plan := testPlan()
		for _, uid := range []string{"", "..", "a/b", "pod uid"} {
			if err := m.EnsurePod(ctx, uid, "", plan); !errors.Is(err, ErrInvalidArgument) {
				t.Errorf("EnsurePod(%q) = %v, want ErrInvalidArgument", uid, err)
			}
		}
		if err := m.EnsurePod(ctx, "ok", "Platinum", plan); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("EnsurePod with QoS Platinum = %v", err)
		}
		if err := m.EnsurePod(ctx, "ok", "", plan); err != nil {
			t.Fatal(err)
		}
		if _, err := m.EnsureContainer(ctx, "ok", "", "../escape", ContainerPlan{}); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("EnsureContainer(../escape) = %v", err)
		}
		if _, err := m.EnsureContainer(ctx, "missing", "burstable", "app", ContainerPlan{}); err == nil {
			t.Error("EnsureContainer without its pod succeeded")
		}
		if _, err := m.LoadContainer("ok", "Guaranteed", "app"); err == nil {
			t.Error("LoadContainer of a container never made succeeded")
		}
	})
}
