package linux

import (
	"github.com/podflow/podflow/nodeagent/linux/cgroups"
	corev1 "github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/podrules"
)

// PlanPod derives the cgroup plan of pod from its spec, as the kubelet does
// (pkg/kubelet/cm ResourceConfigForPod and the container manager):
//
//   - the QoS class is podrules.QOSClass;
//   - each cgroup is cgroups.ResourcesFor its cpu request (a missing
//     request defaults to the limit), cpu limit and memory limit;
//   - the pod-level cgroup gets the larger of the sum of the app containers'
//     cpu requests and the largest init container's (init containers run
//     one at a time before the app containers), and the cpu and memory
//     limits of podrules.PodLimits (the same rule: a limit only when every
//     container has one) — the memory limit a memory emptyDir's tmpfs is
//     sized by, too;
//   - every pod and container gets cgroups.DefaultPodPidsLimit.
//
// PlanPod is pure: it reads only pod and never fails; quantities that do not
// parse count as unset (admission rejects them before a pod gets here).
func PlanPod(pod *corev1.Pod) cgroups.PodPlan {
	plan := cgroups.PodPlan{QOSClass: podrules.QOSClass(pod)}
	bestEffort := plan.QOSClass == podrules.QOSBestEffort
	var appReq, initReq int64 // the app containers' cpu requests' sum, the largest init container's
	visit := func(c *corev1.Container, init bool) cgroups.ContainerPlan {
		reqCPU, limCPU, limMem := containerQuantities(c)
		if init {
			initReq = max(initReq, reqCPU)
		} else {
			appReq += reqCPU
		}
		return cgroups.ContainerPlan{Name: c.GetName(), Init: init, Resources: cgroups.ResourcesFor(reqCPU, limCPU, limMem, bestEffort)}
	}
	for _, c := range pod.GetSpec().GetInitContainers() {
		plan.InitContainers = append(plan.InitContainers, visit(c, true))
	}
	for _, c := range pod.GetSpec().GetContainers() {
		plan.Containers = append(plan.Containers, visit(c, false))
	}
	lim := podrules.PodLimits(pod)
	plan.Resources = cgroups.ResourcesFor(max(appReq, initReq), lim.MilliCPU, lim.Memory, bestEffort)
	return plan
}

// containerQuantities returns c's cpu request and limit in millicores and
// its memory limit in bytes (0 when unset: podrules.ContainerLimits); a
// missing cpu request defaults to the cpu limit, as API defaulting makes it.
func containerQuantities(c *corev1.Container) (reqCPU, limCPU, limMem int64) {
	limCPU, limMem = podrules.ContainerLimits(c)
	if s, ok := c.GetResources().GetRequests()[podrules.ResourceCPU]; ok {
		reqCPU = podrules.QuantityMilli(s)
	} else {
		reqCPU = limCPU
	}
	return reqCPU, limCPU, limMem
}
