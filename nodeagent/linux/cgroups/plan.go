package cgroups

import (
	"github.com/containerd/cgroups/v3/cgroup2"
	"k8s.io/apimachinery/pkg/api/resource"

	corev1 "github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/admission"
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
// cgroup and one cgroup per container and init container.
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

// PlanPod derives the cgroup plan of pod from its spec, as the kubelet does
// (pkg/kubelet/cm ResourceConfigForPod and the container manager):
//
//   - the QoS class is admission.QOSClass;
//   - cpu shares = milliCPU*1024/1000 of the request (a missing request
//     defaults to the limit), at least 2; BestEffort gets 2; the v2 weight
//     is converted from the shares;
//   - CFS quota = milliCPU*100000/1000 µs per 100 ms of the limit, at least
//     1 ms; none without a limit;
//   - memory limit = the memory limit;
//   - the pod-level cgroup gets the larger of the sum of the app containers
//     and the largest init container (init containers run one at a time
//     before the app containers), and a cpu or memory limit only when every
//     container has one;
//   - every pod and container gets DefaultPodPidsLimit.
//
// PlanPod is pure: it reads only pod and never fails; quantities that do not
// parse count as unset (admission rejects them before a pod gets here).
func PlanPod(pod *corev1.Pod) PodPlan {
	plan := PodPlan{QOSClass: admission.QOSClass(pod)}
	type sums struct {
		reqCPU, limCPU, limMem int64
		allCPU, allMem         bool
	}
	app := sums{allCPU: true, allMem: true}
	var initMax sums
	initMax.allCPU, initMax.allMem = true, true
	visit := func(c *corev1.Container, init bool) ContainerPlan {
		reqCPU, limCPU, limMem := containerQuantities(c)
		cp := ContainerPlan{Name: c.GetName(), Init: init}
		cp.Resources = resourcesFor(reqCPU, limCPU, limMem, plan.QOSClass)
		if init {
			initMax.reqCPU = max(initMax.reqCPU, reqCPU)
			initMax.limCPU = max(initMax.limCPU, limCPU)
			initMax.limMem = max(initMax.limMem, limMem)
			initMax.allCPU = initMax.allCPU && limCPU > 0
			initMax.allMem = initMax.allMem && limMem > 0
		} else {
			app.reqCPU += reqCPU
			app.limCPU += limCPU
			app.limMem += limMem
			app.allCPU = app.allCPU && limCPU > 0
			app.allMem = app.allMem && limMem > 0
		}
		return cp
	}
	for _, c := range pod.GetSpec().GetInitContainers() {
		plan.InitContainers = append(plan.InitContainers, visit(c, true))
	}
	for _, c := range pod.GetSpec().GetContainers() {
		plan.Containers = append(plan.Containers, visit(c, false))
	}
	reqCPU := max(app.reqCPU, initMax.reqCPU)
	var limCPU, limMem int64
	if app.allCPU && initMax.allCPU && len(plan.Containers) > 0 {
		limCPU = max(app.limCPU, initMax.limCPU)
	}
	if app.allMem && initMax.allMem && len(plan.Containers) > 0 {
		limMem = max(app.limMem, initMax.limMem)
	}
	plan.Resources = resourcesFor(reqCPU, limCPU, limMem, plan.QOSClass)
	return plan
}

// containerQuantities returns c's cpu request and limit in millicores and
// its memory limit in bytes (0 when unset); a missing cpu request defaults
// to the cpu limit, as API defaulting makes it.
func containerQuantities(c *corev1.Container) (reqCPU, limCPU, limMem int64) {
	r := c.GetResources()
	limCPU = milli(r.GetLimits()["cpu"])
	limMem = bytes(r.GetLimits()["memory"])
	if s, ok := r.GetRequests()["cpu"]; ok {
		reqCPU = milli(s)
	} else {
		reqCPU = limCPU
	}
	return reqCPU, limCPU, limMem
}

func resourcesFor(reqCPU, limCPU, limMem int64, qos string) Resources {
	r := Resources{
		CPUShares:   MilliCPUToShares(reqCPU),
		MemoryLimit: limMem,
		PidsLimit:   DefaultPodPidsLimit,
	}
	if qos == admission.QOSBestEffort {
		r.CPUShares = MinShares
	}
	r.CPUWeight = convertShares(r.CPUShares)
	if limCPU > 0 {
		r.CPUQuota = MilliCPUToQuota(limCPU, QuotaPeriod)
		r.CPUPeriod = QuotaPeriod
	}
	return r
}

// convertShares converts v1 cpu.shares to a v2 cpu.weight as runc and
// containerd do (a quadratic in log2(shares) through 2→1, 1024→100 and
// 262144→10000).
func convertShares(shares uint64) uint64 { return cgroup2.ConvertCPUSharesToCgroupV2Value(shares) }

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

func milli(s string) int64 {
	q, err := resource.ParseQuantity(s)
	if err != nil || q.Sign() <= 0 {
		return 0
	}
	return q.MilliValue()
}

func bytes(s string) int64 {
	q, err := resource.ParseQuantity(s)
	if err != nil || q.Sign() <= 0 {
		return 0
	}
	return q.Value()
}
