package scheduler

import (
	"fmt"

	"github.com/podflow/podflow/proto/corev1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// Resource names, as in Kubernetes.
const (
	ResourceCPU              = "cpu"
	ResourceMemory           = "memory"
	ResourceEphemeralStorage = "ephemeral-storage"
	ResourcePods             = "pods"
)

// The requests a container is assumed to make for scoring when it names
// none (kube-scheduler's DefaultMilliCPURequest and DefaultMemoryRequest),
// so that best-effort pods still spread.
const (
	DefaultMilliCPURequest int64 = 100               // 0.1 core
	DefaultMemoryRequest   int64 = 200 * 1024 * 1024 // 200 MiB
)

// Resources is an amount of the resources the scheduler accounts for.
type Resources struct {
	MilliCPU         int64
	Memory           int64 // bytes
	EphemeralStorage int64 // bytes
	Pods             int64 // only meaningful as allocatable
}

func (r *Resources) add(o Resources) {
	r.MilliCPU += o.MilliCPU
	r.Memory += o.Memory
	r.EphemeralStorage += o.EphemeralStorage
	r.Pods += o.Pods
}

func (r *Resources) sub(o Resources) {
	r.MilliCPU -= o.MilliCPU
	r.Memory -= o.Memory
	r.EphemeralStorage -= o.EphemeralStorage
	r.Pods -= o.Pods
}

func (r *Resources) max(o Resources) {
	r.MilliCPU = max(r.MilliCPU, o.MilliCPU)
	r.Memory = max(r.Memory, o.Memory)
	r.EphemeralStorage = max(r.EphemeralStorage, o.EphemeralStorage)
	r.Pods = max(r.Pods, o.Pods)
}

func parseQuantity(name, value string) (resource.Quantity, error) {
	q, err := resource.ParseQuantity(value)
	if err != nil {
		return q, fmt.Errorf("%w: quantity %q of %q: %v", ErrInvalidObject, value, name, err)
	}
	return q, nil
}

// parseList reads the resources the scheduler knows from a resource list;
// others are ignored. hasCPU and hasMem report whether cpu and memory were
// named at all (a named zero is not "missing").
func parseList(list map[string]string) (r Resources, hasCPU, hasMem bool, err error) {
	for name, v := range list {
		var q resource.Quantity
		switch name {
		case ResourceCPU, ResourceMemory, ResourceEphemeralStorage, ResourcePods:
			if q, err = parseQuantity(name, v); err != nil {
				return r, false, false, err
			}
		default:
			continue
		}
		switch name {
		case ResourceCPU:
			r.MilliCPU, hasCPU = q.MilliValue(), true
		case ResourceMemory:
			r.Memory, hasMem = q.Value(), true
		case ResourceEphemeralStorage:
			r.EphemeralStorage = q.Value()
		case ResourcePods:
			r.Pods = q.Value()
		}
	}
	return r, hasCPU, hasMem, nil
}

// containerRequests returns a container's requests and its requests with
// the scoring defaults for missing cpu and memory. A resource with a limit
// but no request requests its limit, as Kubernetes' API defaulting sets it.
func containerRequests(c *corev1.Container) (req, nonZero Resources, err error) {
	res := c.GetResources()
	req, hasCPU, hasMem, err := parseList(res.GetRequests())
	if err != nil {
		return req, nonZero, fmt.Errorf("container %q requests: %w", c.GetName(), err)
	}
	if lim := res.GetLimits(); len(lim) > 0 {
		l, lCPU, lMem, err := parseList(lim)
		if err != nil {
			return req, nonZero, fmt.Errorf("container %q limits: %w", c.GetName(), err)
		}
		reqs := res.GetRequests()
		if _, ok := reqs[ResourceCPU]; !ok && lCPU {
			req.MilliCPU, hasCPU = l.MilliCPU, true
		}
		if _, ok := reqs[ResourceMemory]; !ok && lMem {
			req.Memory, hasMem = l.Memory, true
		}
		if _, ok := reqs[ResourceEphemeralStorage]; !ok {
			if _, ok := lim[ResourceEphemeralStorage]; ok {
				req.EphemeralStorage = l.EphemeralStorage
			}
		}
	}
	req.Pods = 0
	nonZero = req
	if !hasCPU {
		nonZero.MilliCPU = DefaultMilliCPURequest
	}
	if !hasMem {
		nonZero.Memory = DefaultMemoryRequest
	}
	return req, nonZero, nil
}

// PodRequests computes what a pod requests as Kubernetes does: the larger of
// the sum over its containers (plus sidecars, init containers with
// restartPolicy Always) and, for each resource, the largest init container
// (plus the sidecars started before it). nonZero is the same computation
// with each container's missing cpu and memory requests taken as
// DefaultMilliCPURequest and DefaultMemoryRequest, which the scoring uses.
func PodRequests(pod *corev1.Pod) (req, nonZero Resources, err error) {
	spec := pod.GetSpec()
	for _, c := range spec.GetContainers() {
		r, nz, err := containerRequests(c)
		if err != nil {
			return req, nonZero, err
		}
		req.add(r)
		nonZero.add(nz)
	}
	var sidecars, sidecarsNZ, initMax, initMaxNZ Resources
	for _, c := range spec.GetInitContainers() {
		r, nz, err := containerRequests(c)
		if err != nil {
			return req, nonZero, err
		}
		if c.GetRestartPolicy() == "Always" {
			// A sidecar keeps running beside the containers.
			req.add(r)
			nonZero.add(nz)
			sidecars.add(r)
			sidecarsNZ.add(nz)
			r, nz = sidecars, sidecarsNZ
		} else {
			r.add(sidecars)
			nz.add(sidecarsNZ)
		}
		initMax.max(r)
		initMaxNZ.max(nz)
	}
	req.max(initMax)
	nonZero.max(initMaxNZ)
	return req, nonZero, nil
}

// NodeAllocatable parses a node's allocatable resources; a node with no
// allocatable list uses its capacity, as Kubernetes' API defaulting does.
func NodeAllocatable(node *corev1.Node) (Resources, error) {
	list := node.GetStatus().GetAllocatable()
	if len(list) == 0 {
		list = node.GetStatus().GetCapacity()
	}
	r, _, _, err := parseList(list)
	if err != nil {
		return r, fmt.Errorf("node %q allocatable: %w", node.GetMetadata().GetName(), err)
	}
	return r, nil
}
