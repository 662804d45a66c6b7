package cgroups

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Container is the cgroup of one container.
//
// Concurrency: the methods are safe for concurrent use.
type Container interface {
	// Add moves process pid (all its threads) into the cgroup, in every
	// hierarchy.
	Add(pid int) error
	// Paths returns the cgroup's directories: v1 subsystem name → directory,
	// or "" → the v2 directory.
	Paths() map[string]string
	// CgroupFD opens the v2 directory for clone3's CLONE_INTO_CGROUP; the
	// caller closes it. It fails with ErrNotSupported on v1.
	CgroupFD() (int, error)
	// OOMKilled reports whether the kernel's OOM killer has killed a process
	// of this cgroup since the cgroup was created. A restarted container
	// gets a fresh cgroup (Delete, then EnsureContainer).
	OOMKilled() (bool, error)
	// Delete removes the cgroup; it kills nothing and fails with ErrBusy
	// while a process remains. Idempotent.
	Delete() error
	// MemoryLimit returns the memory limit the kernel holds, in bytes, or
	// -1 when unlimited.
	MemoryLimit() (int64, error)
	// Pids returns the processes in the cgroup (v1: its memory hierarchy),
	// e.g. to find a container's processes again after an agent restart.
	Pids() ([]int, error)
}

type container struct {
	m     *Manager
	path  string            // relative to each hierarchy's mount
	paths map[string]string // see Paths
}

var _ Container = (*container)(nil)

func (c *container) Paths() map[string]string { return maps.Clone(c.paths) }

func (c *container) Add(pid int) error {
	if pid <= 0 {
		return fmt.Errorf("%w: pid %d", ErrInvalidArgument, pid)
	}
	for _, dir := range c.m.dirs(c.path) {
		if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0); err != nil {
			return fmt.Errorf("cgroups: add pid %d to %q: %w", pid, dir, err)
		}
	}
	return nil
}

func (c *container) CgroupFD() (int, error) {
	if c.m.mode != ModeV2 {
		return -1, fmt.Errorf("%w: CLONE_INTO_CGROUP needs cgroup v2 (mode %s)", ErrNotSupported, c.m.mode)
	}
	fd, err := unix.Open(c.paths[""], unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("cgroups: open %q: %w", c.paths[""], err)
	}
	return fd, nil
}

func (c *container) OOMKilled() (bool, error) {
	var n uint64
	var err error
	if c.m.mode == ModeV2 {
		n, err = readKey(filepath.Join(c.paths[""], "memory.events"), "oom_kill")
	} else {
		n, err = readKey(filepath.Join(c.paths["memory"], "memory.oom_control"), "oom_kill")
	}
	if err != nil {
		return false, fmt.Errorf("cgroups: read OOM kills of %q: %w", c.path, err)
	}
	return n > 0, nil
}

func (c *container) MemoryLimit() (int64, error) {
	var file string
	if c.m.mode == ModeV2 {
		file = filepath.Join(c.paths[""], "memory.max")
	} else {
		file = filepath.Join(c.paths["memory"], "memory.limit_in_bytes")
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return 0, fmt.Errorf("cgroups: read memory limit: %w", err)
	}
	s := strings.TrimSpace(string(b))
	if s == "max" {
		return -1, nil
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("cgroups: parse memory limit %q: %w", s, err)
	}
	// v1 reports "unlimited" as PAGE_COUNTER_MAX pages, near MaxInt64.
	if v >= math.MaxInt64/2 {
		return -1, nil
	}
	return int64(v), nil
}

func (c *container) Delete() error {
	err := removeTrees(context.Background(), c.m.dirs(c.path))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

func (c *container) Pids() ([]int, error) {
	dir := c.paths[""]
	if c.m.mode == ModeV1 {
		dir = c.paths["memory"]
	}
	fields, err := readFields(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return nil, fmt.Errorf("cgroups: processes of %q: %w", c.path, err)
	}
	pids := make([]int, 0, len(fields))
	for _, f := range fields {
		pid, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("cgroups: processes of %q: %w", c.path, err)
		}
		pids = append(pids, pid)
	}
	return pids, nil
}
