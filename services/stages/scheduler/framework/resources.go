package framework

import (
	"fmt"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/podrules"
)

// Resource names, as in Kubernetes.
const (
	ResourceCPU              = podrules.ResourceCPU
	ResourceMemory           = podrules.ResourceMemory
	ResourceEphemeralStorage = podrules.ResourceEphemeralStorage
	ResourcePods             = podrules.ResourcePods
)

// The requests a container is assumed to make for scoring when it names
// none (kube-scheduler's DefaultMilliCPURequest and DefaultMemoryRequest),
// so that best-effort pods still spread.
const (
	DefaultMilliCPURequest int64 = 100               // 0.1 core
	DefaultMemoryRequest   int64 = 200 * 1024 * 1024 // 200 MiB
)

// Resources is an amount of the resources the scheduler accounts for.
type Resources = podrules.Resources

// nonMissing is what scoring takes as a container's missing cpu and memory
// requests.
var nonMissing = podrules.PodResourcesOptions{
	NonMissingContainerRequests: &podrules.Resources{MilliCPU: DefaultMilliCPURequest, Memory: DefaultMemoryRequest},
}

// PodRequests computes what a pod requests as Kubernetes does
// (podrules.PodRequests): the larger of the sum over its containers (plus
// sidecars, init containers with restartPolicy Always) and, for each
// resource, the largest init container (plus the sidecars started before
// it), plus the pod's overhead (spec.overhead, its RuntimeClass's), as
// kube-scheduler's resourcehelper.PodRequests adds it for the fit and the
// node's accounting alike. nonZero is the same computation with each
// container's missing cpu and memory requests taken as
// DefaultMilliCPURequest and DefaultMemoryRequest, which the scoring uses.
// A quantity that does not parse is ErrInvalidObject.
func PodRequests(pod *corev1.Pod) (req, nonZero Resources, err error) {
	over, err := podOverhead(pod)
	if err != nil {
		return req, nonZero, err
	}
	r, err := podrules.PodRequests(pod, podrules.PodResourcesOptions{})
	if err != nil {
		return req, nonZero, fmt.Errorf("%w: %w", ErrInvalidObject, err)
	}
	r.Add(over)
	if namesCPUAndMemory(pod) {
		// No request is missing: the second pass would parse every
		// quantity again for the same sums.
		return r, r, nil
	}
	nz, err := podrules.PodRequests(pod, nonMissing)
	if err != nil {
		return req, nonZero, fmt.Errorf("%w: %w", ErrInvalidObject, err)
	}
	nz.Add(over)
	return r, nz, nil
}

// podOverhead is pod's spec.overhead of cpu, memory and ephemeral-storage
// (admission copies it from the pod's RuntimeClass).
func podOverhead(pod *corev1.Pod) (Resources, error) {
	o := pod.GetSpec().GetOverhead()
	if len(o) == 0 {
		return Resources{}, nil
	}
	r, err := podrules.ParseResourceList(o)
	if err != nil {
		return Resources{}, fmt.Errorf("%w: overhead: %w", ErrInvalidObject, err)
	}
	r.Pods = 0 // a pod counts once, whatever its overhead says
	return r, nil
}

// namesCPUAndMemory reports whether every container and init container
// names a cpu and a memory request, or a limit that stands in for it
// (podrules.ContainerRequests): then nonMissing changes nothing and
// PodRequests' nonZero is its req.
func namesCPUAndMemory(pod *corev1.Pod) bool {
	spec := pod.GetSpec()
	for _, cs := range [2][]*corev1.Container{spec.GetContainers(), spec.GetInitContainers()} {
		for _, c := range cs {
			res := c.GetResources()
			if !namesResource(res, ResourceCPU) || !namesResource(res, ResourceMemory) {
				return false
			}
		}
	}
	return true
}

func namesResource(res *corev1.ResourceRequirements, name string) bool {
	if _, ok := res.GetRequests()[name]; ok {
		return true
	}
	_, ok := res.GetLimits()[name]
	return ok
}

// NodeAllocatable parses a node's allocatable resources; a node with no
// allocatable list uses its capacity, as Kubernetes' API defaulting does.
func NodeAllocatable(node *corev1.Node) (Resources, error) {
	list := node.GetStatus().GetAllocatable()
	if len(list) == 0 {
		list = node.GetStatus().GetCapacity()
	}
	r, err := podrules.ParseResourceList(list)
	if err != nil {
		return r, fmt.Errorf("%w: node %q allocatable: %w", ErrInvalidObject, node.GetMetadata().GetName(), err)
	}
	return r, nil
}
