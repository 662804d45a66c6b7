package podrules

import (
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/podflow/podflow/proto/corev1"
)

// QoS classes (status.qosClass).
const (
	QOSGuaranteed = "Guaranteed"
	QOSBurstable  = "Burstable"
	QOSBestEffort = "BestEffort"
)

// QOSClass returns the pod's QoS class as Kubernetes computes it
// (pkg/apis/core/v1/helper/qos ComputePodQOS), over cpu and memory of its
// containers and init containers:
//
//   - BestEffort: no container requests or limits any cpu or memory;
//   - Guaranteed: every container has cpu and memory limits, and every
//     request equals its limit;
//   - Burstable: anything else.
//
// Zero quantities count as unset, as in Kubernetes; unparseable ones are
// ignored (validation rejects them). A missing request counts as equal to
// its limit, as pod defaulting makes it, so the class of a pod is the same
// before and after admission.
func QOSClass(pod *corev1.Pod) string {
	requests := map[string]resource.Quantity{}
	limits := map[string]resource.Quantity{}
	guaranteed := true
	visit := func(c *corev1.Container) {
		for name, s := range c.GetResources().GetRequests() {
			if q, ok := positiveQoSQuantity(name, s); ok {
				addQuantity(requests, name, q)
			}
		}
		found := 0
		for name, s := range c.GetResources().GetLimits() {
			if q, ok := positiveQoSQuantity(name, s); ok {
				addQuantity(limits, name, q)
				found++
				if _, set := c.GetResources().GetRequests()[name]; !set {
					addQuantity(requests, name, q) // as defaulting will
				}
			}
		}
		if found < 2 { // both cpu and memory limits are needed
			guaranteed = false
		}
	}
	for _, c := range pod.GetSpec().GetInitContainers() {
		visit(c)
	}
	for _, c := range pod.GetSpec().GetContainers() {
		visit(c)
	}
	if len(requests) == 0 && len(limits) == 0 {
		return QOSBestEffort
	}
	if guaranteed {
		for name, req := range requests {
			if lim, ok := limits[name]; !ok || lim.Cmp(req) != 0 {
				guaranteed = false
				break
			}
		}
	}
	if guaranteed && len(requests) == len(limits) {
		return QOSGuaranteed
	}
	return QOSBurstable
}

// positiveQoSQuantity parses a cpu or memory quantity, reporting false for
// any other resource, a bad quantity or one that is not above zero.
func positiveQoSQuantity(name, s string) (resource.Quantity, bool) {
	if name != ResourceCPU && name != ResourceMemory {
		return resource.Quantity{}, false
	}
	return positiveQuantity(s)
}

func addQuantity(m map[string]resource.Quantity, name string, q resource.Quantity) {
	sum := m[name]
	sum.Add(q)
	m[name] = sum
}
