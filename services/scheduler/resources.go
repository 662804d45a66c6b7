package scheduler

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
// it). nonZero is the same computation with each container's missing cpu
// and memory requests taken as DefaultMilliCPURequest and
// DefaultMemoryRequest, which the scoring uses. A quantity that does not
// parse is ErrInvalidObject.
func PodRequests(pod *corev1.Pod) (req, nonZero Resources, err error) {
	r, err := podrules.PodRequests(pod, podrules.PodResourcesOptions{})
	if err != nil {
		return req, nonZero, fmt.Errorf("%w: %w", ErrInvalidObject, err)
	}
	nz, err := podrules.PodRequests(pod, nonMissing)
	if err != nil {
		return req, nonZero, fmt.Errorf("%w: %w", ErrInvalidObject, err)
	}
	return r, nz, nil
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
