package podrules

import (
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/podflow/podflow/proto/corev1"
)

// Resource names, as in Kubernetes.
const (
	ResourceCPU              = "cpu"
	ResourceMemory           = "memory"
	ResourceEphemeralStorage = "ephemeral-storage"
	ResourcePods             = "pods"
)

// ErrInvalidQuantity: a resource list holds a quantity that does not parse
// (resource.ParseQuantity). The error text names the resource and value.
var ErrInvalidQuantity = errors.New("podrules: invalid quantity")

// Resources is an amount of the resources podflow accounts for.
type Resources struct {
	MilliCPU         int64
	Memory           int64 // bytes
	EphemeralStorage int64 // bytes
	Pods             int64 // only meaningful as allocatable
}

// Add adds o to r.
func (r *Resources) Add(o Resources) {
	r.MilliCPU += o.MilliCPU
	r.Memory += o.Memory
	r.EphemeralStorage += o.EphemeralStorage
	r.Pods += o.Pods
}

// Sub subtracts o from r.
func (r *Resources) Sub(o Resources) {
	r.MilliCPU -= o.MilliCPU
	r.Memory -= o.Memory
	r.EphemeralStorage -= o.EphemeralStorage
	r.Pods -= o.Pods
}

// Max raises each of r's resources to o's where o's is larger.
func (r *Resources) Max(o Resources) {
	r.MilliCPU = max(r.MilliCPU, o.MilliCPU)
	r.Memory = max(r.Memory, o.Memory)
	r.EphemeralStorage = max(r.EphemeralStorage, o.EphemeralStorage)
	r.Pods = max(r.Pods, o.Pods)
}

// ParseResourceList reads the resources podflow knows from a resource list
// (cpu in millicores, the others in units); other names are ignored. A
// quantity that does not parse is ErrInvalidQuantity.
func ParseResourceList(list map[string]string) (Resources, error) {
	r, _, _, err := parseList(list)
	return r, err
}

// parseList is ParseResourceList that also reports whether cpu and memory
// were named at all (a named zero is not "missing").
func parseList(list map[string]string) (r Resources, hasCPU, hasMem bool, err error) {
	for name, v := range list {
		switch name {
		case ResourceCPU, ResourceMemory, ResourceEphemeralStorage, ResourcePods:
		default:
			continue
		}
		q, perr := resource.ParseQuantity(v)
		if perr != nil {
			return r, false, false, fmt.Errorf("%w %q of %q: %v", ErrInvalidQuantity, v, name, perr)
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

// PodResourcesOptions tunes PodRequests, as k8s.io/component-helpers
// resource.PodResourcesOptions does.
type PodResourcesOptions struct {
	// NonMissingContainerRequests, when not nil, is taken as the cpu
	// (MilliCPU) and memory request of each container that requests none
	// (after defaulting from limits); kube-scheduler's scoring uses 100m and
	// 200Mi so that best-effort pods still spread. Its other fields are
	// ignored.
	NonMissingContainerRequests *Resources
}

// ContainerRequests returns what container c requests: each request it
// names, and for a resource with a limit but no request, the limit, as
// Kubernetes' API defaulting sets it; pods is always 0.
func ContainerRequests(c *corev1.Container, opts PodResourcesOptions) (Resources, error) {
	res := c.GetResources()
	req, hasCPU, hasMem, err := parseList(res.GetRequests())
	if err != nil {
		return req, fmt.Errorf("container %q requests: %w", c.GetName(), err)
	}
	if lim := res.GetLimits(); len(lim) > 0 {
		l, lCPU, lMem, err := parseList(lim)
		if err != nil {
			return req, fmt.Errorf("container %q limits: %w", c.GetName(), err)
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
	if nm := opts.NonMissingContainerRequests; nm != nil {
		if !hasCPU {
			req.MilliCPU = nm.MilliCPU
		}
		if !hasMem {
			req.Memory = nm.Memory
		}
	}
	return req, nil
}

// PodRequests computes what pod requests as Kubernetes does
// (k8s.io/component-helpers resource.PodRequests): the larger of the sum
// over its containers (plus sidecars, init containers with restartPolicy
// Always) and, for each resource, the largest init container (plus the
// sidecars started before it).
func PodRequests(pod *corev1.Pod, opts PodResourcesOptions) (Resources, error) {
	var req Resources
	spec := pod.GetSpec()
	for _, c := range spec.GetContainers() {
		r, err := ContainerRequests(c, opts)
		if err != nil {
			return req, err
		}
		req.Add(r)
	}
	var sidecars, initMax Resources
	for _, c := range spec.GetInitContainers() {
		r, err := ContainerRequests(c, opts)
		if err != nil {
			return req, err
		}
		if c.GetRestartPolicy() == "Always" {
			// A sidecar keeps running beside the containers.
			req.Add(r)
			sidecars.Add(r)
			r = sidecars
		} else {
			r.Add(sidecars)
		}
		initMax.Max(r)
	}
	req.Max(initMax)
	return req, nil
}
