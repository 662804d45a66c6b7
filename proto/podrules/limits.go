package podrules

import (
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/podflow/podflow/proto/corev1"
)

// PodLimits returns the pod-level cpu (MilliCPU) and memory (Memory, in
// bytes) limit of pod as kubelet's ResourceConfigForPod sets the pod's
// cgroup: for each, the larger of the app containers' sum and the largest
// init container's (init containers run one at a time, before the app
// containers), and only when every container, init ones included, has a
// limit of it and the pod has an app container; 0 otherwise. The node
// agent sizes a memory emptyDir's tmpfs by the same Memory, and its Linux
// runtime sets the pod's cgroup from both (linux.PlanPod), so the two
// cannot drift. A quantity that does not parse or is not above zero
// counts as unset (admission refuses it). EphemeralStorage and Pods are 0.
func PodLimits(pod *corev1.Pod) Resources {
	type sums struct {
		cpu, mem       int64
		allCPU, allMem bool
	}
	apps, inits := sums{allCPU: true, allMem: true}, sums{allCPU: true, allMem: true}
	for _, c := range pod.GetSpec().GetContainers() {
		cpu, mem := ContainerLimits(c)
		apps.cpu, apps.mem = apps.cpu+cpu, apps.mem+mem
		apps.allCPU, apps.allMem = apps.allCPU && cpu > 0, apps.allMem && mem > 0
	}
	for _, c := range pod.GetSpec().GetInitContainers() {
		cpu, mem := ContainerLimits(c)
		inits.cpu, inits.mem = max(inits.cpu, cpu), max(inits.mem, mem)
		inits.allCPU, inits.allMem = inits.allCPU && cpu > 0, inits.allMem && mem > 0
	}
	var r Resources
	if len(pod.GetSpec().GetContainers()) == 0 {
		return r
	}
	if apps.allCPU && inits.allCPU {
		r.MilliCPU = max(apps.cpu, inits.cpu)
	}
	if apps.allMem && inits.allMem {
		r.Memory = max(apps.mem, inits.mem)
	}
	return r
}

// ContainerLimits returns container c's cpu limit in millicores and its
// memory limit in bytes, each 0 when unset (see QuantityMilli).
func ContainerLimits(c *corev1.Container) (milliCPU, memory int64) {
	lim := c.GetResources().GetLimits()
	return QuantityMilli(lim[ResourceCPU]), QuantityValue(lim[ResourceMemory])
}

// QuantityValue returns the quantity s in units (bytes, for memory),
// rounded up; 0 when s is empty, does not parse or is not above zero — as
// the rules of limits count a quantity that is not set.
func QuantityValue(s string) int64 {
	q, ok := positiveQuantity(s)
	if !ok {
		return 0
	}
	return q.Value()
}

// QuantityMilli is QuantityValue in thousandths (millicores, for cpu).
func QuantityMilli(s string) int64 {
	q, ok := positiveQuantity(s)
	if !ok {
		return 0
	}
	return q.MilliValue()
}

func positiveQuantity(s string) (resource.Quantity, bool) {
	if s == "" {
		return resource.Quantity{}, false
	}
	q, err := resource.ParseQuantity(s)
	if err != nil || q.Sign() <= 0 {
		return resource.Quantity{}, false
	}
	return q, true
}
