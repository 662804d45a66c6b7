package cgroups

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/containerd/cgroups/v3/cgroup1"
	"github.com/containerd/cgroups/v3/cgroup2"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/podflow/podflow/proto/podrules"
)

// v1Subsystems are the v1 controllers podflow uses, each its own hierarchy
// (or a symlink to a co-mounted one, such as cpu → cpu,cpuacct).
var v1Subsystems = []cgroup1.Name{cgroup1.Cpu, cgroup1.Cpuacct, cgroup1.Memory, cgroup1.Pids}

// v2Controllers are the controllers podflow needs in the unified hierarchy.
var v2Controllers = []string{"cpu", "memory", "pids"}

// Manager owns podflow's cgroup hierarchy: /<Root>/<qos>/pod<uid>/<container>
// in each v1 hierarchy podflow uses, or once in the unified v2 hierarchy.
//
// Concurrency: a Manager is safe for concurrent use; operations on the same
// pod must not run concurrently (the agent drives a pod from one worker).
type Manager struct {
	cfg  Config
	mode string
	// v1
	hier cgroup1.Hierarchy
	// statHier is the cpuacct and memory hierarchies, all ContainerUsage
	// and NodeUsage read.
	statHier cgroup1.Hierarchy
	memsw    bool              // v1 memory.memsw.* present (swap accounting)
	v1Roots  map[string]string // subsystem → its mount directory
	// v2
	v2Mount string
	v2swap  bool // memory.swap.max exists (swap accounting compiled in)
}

// New detects the hierarchy cfg asks for and ensures podflow's root and its
// QoS-class cgroups exist. It fails with ErrUnavailable, saying why, when
// the process is not root or the hierarchy lacks what podflow needs.
func New(cfg Config) (*Manager, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("%w: needs root to manage cgroups", ErrUnavailable)
	}
	m := &Manager{cfg: cfg}
	v2Mount, v2err := unifiedMount(cfg.Mountpoint)
	mode := cfg.Mode
	if mode == ModeAuto {
		mode = ModeV1
		if v2err == nil && v2Mount == cfg.Mountpoint {
			mode = ModeV2 // a pure v2 host
		}
	}
	m.mode = mode
	switch mode {
	case ModeV2:
		if v2err != nil {
			return nil, v2err
		}
		have, err := readFields(filepath.Join(v2Mount, "cgroup.controllers"))
		if err != nil {
			return nil, fmt.Errorf("%w: read cgroup2 controllers: %w", ErrUnavailable, err)
		}
		for _, c := range v2Controllers {
			if !slices.Contains(have, c) {
				return nil, fmt.Errorf("%w: cgroup2 at %q lacks the %q controller (have %v); use mode v1", ErrUnavailable, v2Mount, c, have)
			}
		}
		m.v2Mount = v2Mount
	case ModeV1:
		m.v1Roots = map[string]string{}
		var subs, stats []cgroup1.Subsystem
		for _, name := range v1Subsystems {
			dir := filepath.Join(cfg.Mountpoint, string(name))
			var st unix.Statfs_t
			if err := unix.Statfs(dir, &st); err != nil || st.Type != unix.CGROUP_SUPER_MAGIC {
				return nil, fmt.Errorf("%w: no cgroup v1 %q hierarchy at %q", ErrUnavailable, name, dir)
			}
			m.v1Roots[string(name)] = dir
			switch name {
			case cgroup1.Cpu:
				subs = append(subs, cgroup1.NewCpu(cfg.Mountpoint))
			case cgroup1.Cpuacct:
				subs = append(subs, cgroup1.NewCpuacct(cfg.Mountpoint))
				stats = append(stats, subs[len(subs)-1])
			case cgroup1.Memory:
				subs = append(subs, cgroup1.NewMemory(cfg.Mountpoint, cgroup1.OptionalSwap()))
				stats = append(stats, subs[len(subs)-1])
			case cgroup1.Pids:
				subs = append(subs, cgroup1.NewPids(cfg.Mountpoint))
			}
		}
		_, err := os.Stat(filepath.Join(m.v1Roots["memory"], "memory.memsw.limit_in_bytes"))
		m.memsw = err == nil
		m.hier = func() ([]cgroup1.Subsystem, error) { return subs, nil }
		m.statHier = func() ([]cgroup1.Subsystem, error) { return stats, nil }
	}
	for _, qos := range []string{podrules.QOSGuaranteed, podrules.QOSBurstable, podrules.QOSBestEffort} {
		r := Resources{}
		if qos == podrules.QOSBestEffort {
			r.CPUShares, r.CPUWeight = MinShares, 1 // as the kubelet's besteffort cgroup
		}
		if err := m.ensure(m.qosPath(qos), r, false); err != nil {
			return nil, fmt.Errorf("%w: create %q: %w", ErrUnavailable, m.qosPath(qos), err)
		}
	}
	if m.mode == ModeV2 {
		_, err := os.Stat(filepath.Join(m.dirs(m.qosPath(podrules.QOSGuaranteed))[0], "memory.swap.max"))
		m.v2swap = err == nil
	}
	return m, nil
}

// unifiedMount returns where the cgroup2 hierarchy is mounted: mountpoint on
// a pure v2 host, mountpoint/unified on a hybrid one.
func unifiedMount(mountpoint string) (string, error) {
	for _, dir := range []string{mountpoint, filepath.Join(mountpoint, "unified")} {
		var st unix.Statfs_t
		if err := unix.Statfs(dir, &st); err == nil && st.Type == unix.CGROUP2_SUPER_MAGIC {
			return dir, nil
		}
	}
	return "", fmt.Errorf("%w: no cgroup2 hierarchy at %q or %q", ErrUnavailable, mountpoint, filepath.Join(mountpoint, "unified"))
}

// Mode returns the hierarchy in use: ModeV1 or ModeV2.
func (m *Manager) Mode() string { return m.mode }

// qosDir is the directory of a QoS class below Root.
func qosDir(qos string) (string, error) {
	switch strings.ToLower(qos) {
	case "guaranteed":
		return "guaranteed", nil
	case "burstable":
		return "burstable", nil
	case "besteffort":
		return "besteffort", nil
	}
	return "", fmt.Errorf("%w: QoS class %q", ErrInvalidArgument, qos)
}

func (m *Manager) qosPath(qos string) string {
	d, _ := qosDir(qos)
	return "/" + m.cfg.Root + "/" + d
}

// validName reports whether s can be one path element of a cgroup.
func validName(s string) bool {
	if s == "" || s == "." || s == ".." || len(s) > 200 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return false
		}
	}
	return true
}

// PodPath returns the cgroup path of a pod relative to each hierarchy's
// mount, e.g. "/podflow/burstable/pod<uid>".
func (m *Manager) PodPath(podUID, qos string) (string, error) {
	d, err := qosDir(qos)
	if err != nil {
		return "", err
	}
	if !validName(podUID) {
		return "", fmt.Errorf("%w: pod UID %q", ErrInvalidArgument, podUID)
	}
	return "/" + m.cfg.Root + "/" + d + "/pod" + podUID, nil
}

// EnsurePod creates (or updates) the pod-level cgroup with plan.Resources.
// qos "" means plan.QOSClass.
func (m *Manager) EnsurePod(ctx context.Context, podUID, qos string, plan PodPlan) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if qos == "" {
		qos = plan.QOSClass
	}
	p, err := m.PodPath(podUID, qos)
	if err != nil {
		return err
	}
	if err := m.ensure(p, plan.Resources, false); err != nil {
		return fmt.Errorf("cgroups: ensure pod cgroup %q: %w", p, err)
	}
	return nil
}

// EnsureContainer creates (or updates) the cgroup of container name of the
// pod, below the pod's cgroup (EnsurePod first), and returns its handle.
func (m *Manager) EnsureContainer(ctx context.Context, podUID, qos, name string, plan ContainerPlan) (Container, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	pp, err := m.PodPath(podUID, qos)
	if err != nil {
		return nil, err
	}
	if !validName(name) {
		return nil, fmt.Errorf("%w: container name %q", ErrInvalidArgument, name)
	}
	if _, err := os.Stat(m.dirs(pp)[0]); err != nil {
		return nil, fmt.Errorf("cgroups: pod cgroup %q: %w", pp, err)
	}
	p := pp + "/" + name
	if err := m.ensure(p, plan.Resources, true); err != nil {
		return nil, fmt.Errorf("cgroups: ensure container cgroup %q: %w", p, err)
	}
	return m.handle(p), nil
}

// LoadContainer returns the handle of an existing container cgroup (after
// an agent restart); it fails with an error matching fs.ErrNotExist when
// there is none.
func (m *Manager) LoadContainer(podUID, qos, name string) (Container, error) {
	pp, err := m.PodPath(podUID, qos)
	if err != nil {
		return nil, err
	}
	if !validName(name) {
		return nil, fmt.Errorf("%w: container name %q", ErrInvalidArgument, name)
	}
	p := pp + "/" + name
	if _, err := os.Stat(m.dirs(p)[0]); err != nil {
		return nil, fmt.Errorf("cgroups: container cgroup %q: %w", p, err)
	}
	return m.handle(p), nil
}

// ensure creates cgroup p in every hierarchy (parents included) and writes
// r. On v2 a container's cgroup is an OOM group (memory.oom.group=1, as the
// kubelet sets it): an OOM kill takes the whole container, not one process.
func (m *Manager) ensure(p string, r Resources, container bool) error {
	if m.mode == ModeV2 {
		res := m.v2Resources(r)
		if container {
			group := true
			res.Memory.OOMGroup = &group
		}
		_, err := cgroup2.NewManager(m.v2Mount, p, res)
		return err
	}
	_, err := cgroup1.New(cgroup1.StaticPath(p), m.v1Resources(r), cgroup1.WithHierarchy(m.hier))
	return err
}

// v1Resources compiles r to the OCI resources cgroup1 writes.
func (m *Manager) v1Resources(r Resources) *specs.LinuxResources {
	out := &specs.LinuxResources{CPU: &specs.LinuxCPU{}, Memory: &specs.LinuxMemory{}, Pids: &specs.LinuxPids{}}
	if r.CPUShares > 0 {
		out.CPU.Shares = &r.CPUShares
	}
	if r.CPUQuota > 0 {
		quota, period := r.CPUQuota, r.CPUPeriod
		out.CPU.Quota, out.CPU.Period = &quota, &period
	}
	if r.MemoryLimit > 0 {
		limit := r.MemoryLimit
		out.Memory.Limit = &limit
		if m.memsw {
			out.Memory.Swap = &limit // memory+swap = memory: no swap
		}
	}
	if r.PidsLimit > 0 {
		pids := r.PidsLimit
		out.Pids.Limit = &pids
	}
	return out
}

// v2Resources compiles r to cgroup2's resources. Every controller is
// non-nil so that it is enabled down the path.
func (m *Manager) v2Resources(r Resources) *cgroup2.Resources {
	out := &cgroup2.Resources{CPU: &cgroup2.CPU{}, Memory: &cgroup2.Memory{}, Pids: &cgroup2.Pids{Max: r.PidsLimit}}
	if r.CPUWeight > 0 {
		w := r.CPUWeight
		out.CPU.Weight = &w
	}
	if r.CPUQuota > 0 {
		quota, period := r.CPUQuota, r.CPUPeriod
		out.CPU.Max = cgroup2.NewCPUMax(&quota, &period)
	}
	if r.MemoryLimit > 0 {
		limit := r.MemoryLimit
		out.Memory.Max = &limit
		if m.v2swap {
			swap := int64(0) // no swap beyond the limit, as v1's memsw = limit
			out.Memory.Swap = &swap
		}
	}
	return out
}

// dirs returns the directories of cgroup p, the memory (v1) or unified (v2)
// one first.
func (m *Manager) dirs(p string) []string {
	if m.mode == ModeV2 {
		return []string{filepath.Join(m.v2Mount, p)}
	}
	out := []string{filepath.Join(m.v1Roots["memory"], p)}
	for _, s := range v1Subsystems {
		if s != cgroup1.Memory {
			out = append(out, filepath.Join(m.v1Roots[string(s)], p))
		}
	}
	return out
}

func (m *Manager) handle(p string) *container {
	c := &container{m: m, path: p, paths: map[string]string{}}
	if m.mode == ModeV2 {
		c.paths[""] = filepath.Join(m.v2Mount, p)
	} else {
		for s, root := range m.v1Roots {
			c.paths[s] = filepath.Join(root, p)
		}
	}
	return c
}

// RemovePod removes the pod's cgroup and its containers' in every hierarchy.
// It kills nothing: it fails with ErrBusy when a process remains (the
// runtime kills first). qos "" looks in every QoS class. Idempotent.
func (m *Manager) RemovePod(ctx context.Context, podUID, qos string) error {
	dirs, err := m.podDirs(podUID, qos)
	if err != nil {
		return err
	}
	return removeTrees(ctx, dirs)
}

// podDirs returns the pod's cgroup directory in every hierarchy (in every
// QoS class for qos "").
func (m *Manager) podDirs(podUID, qos string) ([]string, error) {
	classes := []string{qos}
	if qos == "" {
		classes = []string{podrules.QOSGuaranteed, podrules.QOSBurstable, podrules.QOSBestEffort}
	}
	var dirs []string
	for _, q := range classes {
		p, err := m.PodPath(podUID, q)
		if err != nil {
			return nil, err
		}
		dirs = append(dirs, m.dirs(p)...)
	}
	return dirs, nil
}

// KillPod sends SIGKILL to every process in the pod's cgroups and their
// children (every QoS class for qos "") and waits until none is left or
// ctx ends: for an orphaned pod, one that no agent records and so none
// can adopt. Idempotent; a pod without cgroups has nothing to kill.
func (m *Manager) KillPod(ctx context.Context, podUID, qos string) error {
	roots, err := m.podDirs(podUID, qos)
	if err != nil {
		return err
	}
	for {
		alive := 0
		for _, root := range roots {
			_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
				if err != nil || !d.IsDir() {
					return nil
				}
				procs, _ := readFields(filepath.Join(p, "cgroup.procs"))
				for _, f := range procs {
					if pid, err := strconv.Atoi(f); err == nil && pid > 0 {
						if unix.Kill(pid, unix.SIGKILL) == nil {
							alive++
						}
					}
				}
				return nil
			})
		}
		if alive == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cgroups: kill the processes of pod %q: %w", podUID, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// ListPods returns the UIDs of the pods that have a cgroup, sorted.
func (m *Manager) ListPods(ctx context.Context) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var uids []string
	for _, qos := range []string{podrules.QOSGuaranteed, podrules.QOSBurstable, podrules.QOSBestEffort} {
		entries, err := os.ReadDir(m.dirs(m.qosPath(qos))[0])
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("cgroups: list pods: %w", err)
		}
		for _, e := range entries {
			if uid, ok := strings.CutPrefix(e.Name(), "pod"); ok && e.IsDir() && uid != "" {
				uids = append(uids, uid)
			}
		}
	}
	slices.Sort(uids)
	return slices.Compact(uids), nil
}

// RemoveHierarchy removes podflow's root and QoS cgroups. It fails with
// ErrBusy while a pod cgroup remains. For tests and node decommissioning.
func (m *Manager) RemoveHierarchy(ctx context.Context) error {
	uids, err := m.ListPods(ctx)
	if err != nil {
		return err
	}
	if len(uids) > 0 {
		return fmt.Errorf("%w: %d pod cgroups remain", ErrBusy, len(uids))
	}
	return removeTrees(ctx, m.dirs("/"+m.cfg.Root))
}

// removeTrees removes each directory tree of cgroups, deepest first, after
// checking that none holds a process. Missing trees are fine.
func removeTrees(ctx context.Context, roots []string) error {
	var all []string
	for _, root := range roots {
		err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					return nil
				}
				return err
			}
			if d.IsDir() {
				all = append(all, p)
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("cgroups: walk %q: %w", root, err)
		}
	}
	for _, dir := range all {
		procs, err := readFields(filepath.Join(dir, "cgroup.procs"))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("cgroups: read processes of %q: %w", dir, err)
		}
		if len(procs) > 0 {
			return fmt.Errorf("%w: %q holds pids %v", ErrBusy, dir, procs)
		}
	}
	// Deepest first: reverse lexical order puts children before parents.
	slices.Sort(all)
	slices.Reverse(all)
	for _, dir := range all {
		if err := rmdir(ctx, dir); err != nil {
			return err
		}
	}
	return nil
}

// rmdir removes one cgroup directory, retrying EBUSY for a short while: a
// cgroup whose last process just exited can stay busy for a moment.
func rmdir(ctx context.Context, dir string) error {
	delay := time.Millisecond
	deadline := time.Now().Add(2 * time.Second)
	for {
		err := unix.Rmdir(dir)
		switch {
		case err == nil || errors.Is(err, unix.ENOENT):
			return nil
		case !errors.Is(err, unix.EBUSY) || time.Now().After(deadline):
			if errors.Is(err, unix.EBUSY) {
				return fmt.Errorf("%w: remove %q: %w", ErrBusy, dir, err)
			}
			return fmt.Errorf("cgroups: remove %q: %w", dir, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(delay):
		}
		delay = min(2*delay, 100*time.Millisecond)
	}
}

// readFields returns the whitespace-separated fields of a file.
func readFields(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return strings.Fields(string(b)), nil
}

// readKey returns the value of "key N" in a flat-keyed cgroup file.
func readKey(path, key string) (uint64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		k, v, ok := strings.Cut(s.Text(), " ")
		if ok && k == key {
			return strconv.ParseUint(strings.TrimSpace(v), 10, 64)
		}
	}
	if err := s.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("cgroups: no %q in %q", key, path)
}
