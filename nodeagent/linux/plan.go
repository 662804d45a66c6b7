package linux

import (
	"k8s.io/apimachinery/pkg/api/resource"

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
//   - the pod-level cgroup gets the larger of the sum of the app containers
//     and the largest init container (init containers run one at a time
//     before the app containers), and a cpu or memory limit only when every
//     container has one;
//   - every pod and container gets cgroups.DefaultPodPidsLimit.
//
// PlanPod is pure: it reads only pod and never fails; quantities that do not
// parse count as unset (admission rejects them before a pod gets here).
func PlanPod(pod *corev1.Pod) cgroups.PodPlan {
	plan := cgroups.PodPlan{QOSClass: podrules.QOSClass(pod)}
	bestEffort := plan.QOSClass == podrules.QOSBestEffort
	type sums struct {
		reqCPU, limCPU, limMem int64
		allCPU, allMem         bool
	}
	app := sums{allCPU: true, allMem: true}
	var initMax sums
	initMax.allCPU, initMax.allMem = true, true
	visit := func(c *corev1.Container, init bool) cgroups.ContainerPlan {
		reqCPU, limCPU, limMem := containerQuantities(c)
		cp := cgroups.ContainerPlan{Name: c.GetName(), Init: init}
		cp.Resources = cgroups.ResourcesFor(reqCPU, limCPU, limMem, bestEffort)
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
	plan.Resources = cgroups.ResourcesFor(reqCPU, limCPU, limMem, bestEffort)
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
