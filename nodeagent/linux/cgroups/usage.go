package cgroups

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/containerd/cgroups/v3/cgroup1"
	"github.com/containerd/cgroups/v3/cgroup2"
)

// Usage is one reading of a cgroup, as cAdvisor takes it for the kubelet's
// summaries: the CPU time its processes (and its children's) used since
// it was created, and its memory working set at the moment of reading.
type Usage struct {
	// CPUNanos is the cumulative CPU time in nanoseconds (v1
	// cpuacct.usage, v2 cpu.stat usage_usec × 1000). A rate is the
	// difference of two readings of the same cgroup over their interval.
	CPUNanos uint64
	// WorkingSetBytes is the memory usage less the inactive file cache
	// (v1 memory.usage_in_bytes - total_inactive_file, v2 memory.current -
	// inactive_file), never below 0: what the kubelet evicts on and
	// kubectl top shows.
	WorkingSetBytes uint64
}

// workingSet is usage - inactive, or 0 when the cache exceeds usage (the
// counters are read one after the other), as cAdvisor's.
func workingSet(usage, inactive uint64) uint64 {
	if inactive >= usage {
		return 0
	}
	return usage - inactive
}

// ContainerUsage reads the cgroup of container name of the pod; it fails
// with an error matching fs.ErrNotExist when there is none.
func (m *Manager) ContainerUsage(podUID, qos, name string) (Usage, error) {
	pp, err := m.PodPath(podUID, qos)
	if err != nil {
		return Usage{}, err
	}
	if !validName(name) {
		return Usage{}, fmt.Errorf("%w: container name %q", ErrInvalidArgument, name)
	}
	return m.usage(pp + "/" + name)
}

// NodeUsage reads podflow's root cgroup (/<Root>): the sum of every pod's
// use on this node, which the kernel keeps hierarchically.
func (m *Manager) NodeUsage() (Usage, error) { return m.usage("/" + m.cfg.Root) }

// usage reads cgroup p with containerd/cgroups' statistics: on v1 from
// the cpuacct and memory hierarchies, on v2 the cpu and memory files.
func (m *Manager) usage(p string) (Usage, error) {
	// Both libraries read a missing cgroup as zeros or a bare error; say
	// which.
	if _, err := os.Stat(m.dirs(p)[0]); err != nil {
		return Usage{}, fmt.Errorf("cgroups: read usage of %q: %w", p, err)
	}
	if m.mode == ModeV2 {
		cg, err := cgroup2.Load(p, cgroup2.WithMountpoint(m.v2Mount))
		if err != nil {
			return Usage{}, fmt.Errorf("cgroups: load %q: %w", p, err)
		}
		st, err := cg.StatFiltered(cgroup2.StatCPU | cgroup2.StatMemory)
		if err != nil {
			return Usage{}, fmt.Errorf("cgroups: read usage of %q: %w", p, err)
		}
		return Usage{
			CPUNanos:        st.GetCPU().GetUsageUsec() * 1000,
			WorkingSetBytes: workingSet(st.GetMemory().GetUsage(), st.GetMemory().GetInactiveFile()),
		}, nil
	}
	cg, err := cgroup1.Load(cgroup1.StaticPath(p), cgroup1.WithHierarchy(m.statHier))
	if err != nil {
		if errors.Is(err, cgroup1.ErrCgroupDeleted) {
			err = fmt.Errorf("%w: %w", fs.ErrNotExist, err)
		}
		return Usage{}, fmt.Errorf("cgroups: load %q: %w", p, err)
	}
	st, err := cg.Stat()
	if err != nil {
		return Usage{}, fmt.Errorf("cgroups: read usage of %q: %w", p, err)
	}
	mem := st.GetMemory()
	// total_inactive_file counts the children too, as usage_in_bytes does.
	return Usage{
		CPUNanos:        st.GetCPU().GetUsage().GetTotal(),
		WorkingSetBytes: workingSet(mem.GetUsage().GetUsage(), mem.GetTotalInactiveFile()),
	}, nil
}
