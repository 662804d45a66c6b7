package bench

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/containerd/cgroups/v3/cgroup1"
	"github.com/containerd/cgroups/v3/cgroup2"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// ErrNoCPUCgroup is returned by newCPUGroups when this process cannot
// bound the CPU of others: not root, or no cgroup cpu controller.
var ErrNoCPUCgroup = errors.New("bench: no cgroup cpu controller to bound a replica's CPU")

// cpuPeriodUs is the CFS period of every bound: the quota is CPUs × it.
const cpuPeriodUs = 100_000

// minQuotaUs is the kernel's smallest CFS quota (1 ms).
const minQuotaUs = 1000

// cpuGroupPrefix names the cgroup a bench makes, followed by its PID, so
// that one left by a bench killed with SIGKILL is found and removed by
// the next (sweepCPUGroups).
const cpuGroupPrefix = "podflow-bench-scale-"

// cpuGroups puts processes into cgroups of their own with a CPU bound
// each, below one cgroup named podflow-bench-scale-<pid>: on a cgroup v2
// host (or a hybrid one whose unified hierarchy has the cpu controller)
// with cpu.max, else in the v1 cpu hierarchy with cpu.cfs_quota_us and
// cpu.cfs_period_us. Close removes every cgroup it made.
//
// Concurrency: not safe for concurrent use; one owner (the bench).
type cpuGroups struct {
	v2   bool
	dir  string // the cpu controller's hierarchy: /sys/fs/cgroup(/unified) or /sys/fs/cgroup/cpu
	root string // "/podflow-bench-scale-<pid>", relative to dir
}

// cpuBound is what the kernel reports for one replica's cgroup.
type cpuBound struct {
	Path     string `json:"path"`     // absolute directory of the cgroup
	QuotaUs  int64  `json:"quotaUs"`  // read back from cpu.max or cpu.cfs_quota_us
	PeriodUs uint64 `json:"periodUs"` // read back from cpu.max or cpu.cfs_period_us
	PIDs     []int  `json:"pids"`     // read back from cgroup.procs
}

// cpuThrottle is a cgroup's cpu.stat: how often its bound held it back.
type cpuThrottle struct {
	Periods, Throttled uint64
}

// newCPUGroups finds the cpu controller under mountpoint (/sys/fs/cgroup)
// and removes the cgroups of earlier benches that died without doing so.
// It fails with ErrNoCPUCgroup, saying why, when there is none or the
// process is not root.
func newCPUGroups(mountpoint string) (*cpuGroups, error) {
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("%w: needs root", ErrNoCPUCgroup)
	}
	g := &cpuGroups{root: "/" + cpuGroupPrefix + strconv.Itoa(os.Getpid())}
	for _, dir := range []string{mountpoint, filepath.Join(mountpoint, "unified")} {
		if fsType(dir) != unix.CGROUP2_SUPER_MAGIC {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, "cgroup.controllers"))
		if err == nil && slices.Contains(strings.Fields(string(b)), "cpu") {
			g.v2, g.dir = true, dir
			break
		}
	}
	if !g.v2 {
		dir := filepath.Join(mountpoint, string(cgroup1.Cpu))
		if fsType(dir) != unix.CGROUP_SUPER_MAGIC {
			return nil, fmt.Errorf("%w: neither cgroup v2 with the cpu controller nor a v1 cpu hierarchy under %q", ErrNoCPUCgroup, mountpoint)
		}
		g.dir = dir
	}
	sweepCPUGroups(g.dir)
	return g, nil
}

func fsType(dir string) int64 {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0
	}
	return int64(st.Type)
}

// Mode is "v2" or "v1".
func (g *cpuGroups) Mode() string {
	if g.v2 {
		return "v2"
	}
	return "v1"
}

// quotaUs is the CFS quota of cpus CPUs.
func quotaUs(cpus float64) int64 { return int64(math.Round(cpus * cpuPeriodUs)) }

// Place makes the cgroup name below the bench's, bounds it to cpus CPUs
// and moves pid (all its threads) into it; it returns what the kernel
// then reports.
func (g *cpuGroups) Place(name string, pid int, cpus float64) (cpuBound, error) {
	if name == "" || name == "." || name == ".." || strings.ContainsRune(name, '/') {
		return cpuBound{}, fmt.Errorf("bench: cgroup name %q", name)
	}
	quota, period := quotaUs(cpus), uint64(cpuPeriodUs)
	if quota < minQuotaUs {
		return cpuBound{}, fmt.Errorf("bench: %.4g CPUs is below the kernel's smallest quota (%d µs of %d)", cpus, minQuotaUs, cpuPeriodUs)
	}
	p := g.root + "/" + name
	if g.v2 {
		m, err := cgroup2.NewManager(g.dir, p, &cgroup2.Resources{CPU: &cgroup2.CPU{Max: cgroup2.NewCPUMax(&quota, &period)}})
		if err != nil {
			return cpuBound{}, fmt.Errorf("bench: create cgroup %q: %w", p, err)
		}
		if err := m.AddProc(uint64(pid)); err != nil {
			return cpuBound{}, fmt.Errorf("bench: move %d into %q: %w", pid, p, err)
		}
	} else {
		cpu := g.dir
		hier := func() ([]cgroup1.Subsystem, error) {
			return []cgroup1.Subsystem{cgroup1.NewCpu(filepath.Dir(cpu))}, nil
		}
		cg, err := cgroup1.New(cgroup1.StaticPath(p), &specs.LinuxResources{CPU: &specs.LinuxCPU{Quota: &quota, Period: &period}}, cgroup1.WithHierarchy(hier))
		if err != nil {
			return cpuBound{}, fmt.Errorf("bench: create cgroup %q: %w", p, err)
		}
		if err := cg.AddProc(uint64(pid)); err != nil {
			return cpuBound{}, fmt.Errorf("bench: move %d into %q: %w", pid, p, err)
		}
	}
	return readCPUBound(g.Dir(name), g.v2)
}

// Dir is the directory of the cgroup name.
func (g *cpuGroups) Dir(name string) string { return filepath.Join(g.dir, g.root, name) }

// Root is the directory of the bench's own cgroup.
func (g *cpuGroups) Root() string { return filepath.Join(g.dir, g.root) }

// readCPUBound reads a cgroup's CPU bound and processes from its files.
func readCPUBound(dir string, v2 bool) (cpuBound, error) {
	b := cpuBound{Path: dir}
	if v2 {
		raw, err := os.ReadFile(filepath.Join(dir, "cpu.max"))
		if err != nil {
			return b, err
		}
		f := strings.Fields(string(raw)) // "25000 100000" or "max 100000"
		if len(f) != 2 {
			return b, fmt.Errorf("bench: %s/cpu.max: %q", dir, raw)
		}
		b.QuotaUs = -1
		if f[0] != "max" {
			if b.QuotaUs, err = strconv.ParseInt(f[0], 10, 64); err != nil {
				return b, err
			}
		}
		if b.PeriodUs, err = strconv.ParseUint(f[1], 10, 64); err != nil {
			return b, err
		}
	} else {
		q, err := readInt(filepath.Join(dir, "cpu.cfs_quota_us"))
		if err != nil {
			return b, err
		}
		p, err := readInt(filepath.Join(dir, "cpu.cfs_period_us"))
		if err != nil {
			return b, err
		}
		b.QuotaUs, b.PeriodUs = q, uint64(p)
	}
	pids, err := cgroupPIDs(dir)
	b.PIDs = pids
	return b, err
}

func readInt(path string) (int64, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(raw)), 10, 64)
}

func cgroupPIDs(dir string) ([]int, error) {
	raw, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, f := range strings.Fields(string(raw)) {
		if pid, err := strconv.Atoi(f); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// Throttle reads the cpu.stat of the cgroup name: the periods it ran in
// and those its bound cut short.
func (g *cpuGroups) Throttle(name string) (cpuThrottle, error) {
	raw, err := os.ReadFile(filepath.Join(g.Dir(name), "cpu.stat"))
	if err != nil {
		return cpuThrottle{}, err
	}
	var t cpuThrottle
	for _, line := range strings.Split(string(raw), "\n") {
		k, v, _ := strings.Cut(line, " ")
		n, _ := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
		switch k {
		case "nr_periods":
			t.Periods = n
		case "nr_throttled":
			t.Throttled = n
		}
	}
	return t, nil
}

// Remove moves what is still in the cgroup name to the hierarchy's root
// and removes it. Removing one that is gone is no error.
func (g *cpuGroups) Remove(name string) error {
	return removeCgroup(g.dir, g.Dir(name))
}

// removeCgroup empties the cgroup dir (its processes to the root of the
// hierarchy at top, where any process may be) and removes it.
func removeCgroup(top, dir string) error {
	pids, err := cgroupPIDs(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	for _, pid := range pids {
		// A process that exited meanwhile is gone from the cgroup too.
		if err := os.WriteFile(filepath.Join(top, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("bench: move %d out of %q: %w", pid, dir, err)
		}
	}
	if err := unix.Rmdir(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("bench: remove cgroup %q: %w", dir, err)
	}
	return nil
}

// Close removes every cgroup the bench made, its own last.
func (g *cpuGroups) Close() error {
	var errs []error
	entries, _ := os.ReadDir(g.Root())
	for _, e := range entries {
		if e.IsDir() {
			errs = append(errs, g.Remove(e.Name()))
		}
	}
	errs = append(errs, removeCgroup(g.dir, g.Root()))
	return errors.Join(errs...)
}

// sweepCPUGroups removes the podflow-bench-scale-<pid> cgroups under dir
// whose bench is no longer running (one killed with SIGKILL).
func sweepCPUGroups(dir string) {
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		pid, err := strconv.Atoi(strings.TrimPrefix(e.Name(), cpuGroupPrefix))
		if !e.IsDir() || !strings.HasPrefix(e.Name(), cpuGroupPrefix) || err != nil || pid == os.Getpid() || syscall.Kill(pid, 0) != syscall.ESRCH {
			continue
		}
		root := filepath.Join(dir, e.Name())
		kids, _ := os.ReadDir(root)
		for _, k := range kids {
			if k.IsDir() {
				_ = removeCgroup(dir, filepath.Join(root, k.Name()))
			}
		}
		_ = removeCgroup(dir, root)
	}
}
