package cgroups

import (
	"github.com/containerd/cgroups/v3/cgroup2"
)

// Kubernetes' constants for cpu shares and CFS quota (pkg/kubelet/cm).
const (
	MinShares     = 2
	MaxShares     = 262144
	SharesPerCPU  = 1024
	MilliCPUToCPU = 1000
	// QuotaPeriod is the CFS period, in microseconds (100 ms).
	QuotaPeriod = 100000
	// MinQuota is the smallest CFS quota the kernel accepts, in µs (1 ms).
	MinQuota = 1000
	// DefaultPodPidsLimit bounds the processes of one pod (and of each of
	// its containers): a fork bomb in a pod cannot exhaust the node.
	DefaultPodPidsLimit = 4096
)

// Resources is the desired state of one cgroup, as data. A zero field means
// "no limit" (or "kernel default" for shares and weight): Apply leaves the
// kernel's default in place.
type Resources struct {
	// CPUShares is the v1 cpu.shares from the cpu request (2..262144).
	CPUShares uint64
	// CPUWeight is the v2 cpu.weight converted from CPUShares as runc and
	// containerd convert it (1..10000; 1024 shares → 100).
	CPUWeight uint64
	// CPUQuota is the CFS quota in µs per CPUPeriod; 0 means unlimited.
	CPUQuota int64
	// CPUPeriod is the CFS period in µs; set whenever CPUQuota is.
	CPUPeriod uint64
	// MemoryLimit is the memory limit in bytes; 0 means unlimited.
	MemoryLimit int64
	// PidsLimit is the maximum number of tasks; 0 means unlimited.
	PidsLimit int64
}

// ContainerPlan is the cgroup of one container.
type ContainerPlan struct {
	Name string
	Init bool
	Resources
}

// PodPlan is the cgroup layout of one pod: its QoS class, the pod-level
// cgroup and one cgroup per container and init container. The node agent
// derives it from the pod spec (nodeagent/linux PlanPod); the manager only
// applies it.
type PodPlan struct {
	// QOSClass is "Guaranteed", "Burstable" or "BestEffort".
	QOSClass       string
	Resources      Resources
	InitContainers []ContainerPlan
	Containers     []ContainerPlan
}

// Container returns the plan of the (init) container called name.
func (p PodPlan) Container(name string) (ContainerPlan, bool) {
	for _, list := range [][]ContainerPlan{p.InitContainers, p.Containers} {
		for _, c := range list {
			if c.Name == name {
				return c, true
			}
		}
	}
	return ContainerPlan{}, false
}

// ResourcesFor is the cgroup of a pod or container that requests
// reqMilliCPU of cpu and is limited to limMilliCPU and limMemory bytes (0:
// no limit), as the kubelet computes it (pkg/kubelet/cm
// ResourceConfigForPod):
//
//   - cpu shares = milliCPU*1024/1000 of the request, at least 2; 2 for a
//     BestEffort pod; the v2 weight is converted from the shares;
//   - CFS quota = milliCPU*100000/1000 µs per 100 ms of the limit, at least
//     1 ms; none without a limit;
//   - memory limit = the memory limit;
//   - DefaultPodPidsLimit tasks.
func ResourcesFor(reqMilliCPU, limMilliCPU, limMemory int64, bestEffort bool) Resources {
	r := Resources{
		CPUShares:   MilliCPUToShares(reqMilliCPU),
		MemoryLimit: limMemory,
		PidsLimit:   DefaultPodPidsLimit,
	}
	if bestEffort {
		r.CPUShares = MinShares
	}
	r.CPUWeight = SharesToWeight(r.CPUShares)
	if limMilliCPU > 0 {
		r.CPUQuota = MilliCPUToQuota(limMilliCPU, QuotaPeriod)
		r.CPUPeriod = QuotaPeriod
	}
	return r
}

// SharesToWeight converts v1 cpu.shares to a v2 cpu.weight as runc and
// containerd do (a quadratic in log2(shares) through 2→1, 1024→100 and
// 262144→10000).
func SharesToWeight(shares uint64) uint64 { return cgroup2.ConvertCPUSharesToCgroupV2Value(shares) }

// MilliCPUToShares converts a cpu request in millicores to cpu.shares.
func MilliCPUToShares(milliCPU int64) uint64 {
	if milliCPU <= 0 {
		return MinShares
	}
	shares := milliCPU * SharesPerCPU / MilliCPUToCPU
	return uint64(min(max(shares, MinShares), MaxShares))
}

// MilliCPUToQuota converts a cpu limit in millicores to a CFS quota in µs
// per period µs; 0 (no quota) for a limit that is not positive.
func MilliCPUToQuota(milliCPU int64, period int64) int64 {
	if milliCPU <= 0 {
		return 0
	}
	return max(milliCPU*period/MilliCPUToCPU, MinQuota)
}
