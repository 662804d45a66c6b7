package framework

import (
	"fmt"
	"maps"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/podflow/podflow/proto/corev1"
)

// Scalars are amounts of the scalar resources kube-scheduler accounts for
// besides cpu, memory, ephemeral-storage and pods (its Resource's
// ScalarResources): extended resources (example.com/gpu), hugepages-*,
// other kubernetes.io/ prefixed resources and attachable-volumes-*, each
// in units (Quantity.Value). nil is none. A Scalars held by a NodeInfo is
// never modified in place (copy on write), so that a snapshot can share
// it.
type Scalars map[string]int64

// IsScalarResource is kube-scheduler's IsScalarResourceName
// (pkg/scheduler/util): an extended resource (a domain-prefixed name
// outside kubernetes.io, not "requests."), a hugepages size, a
// kubernetes.io/ prefixed native resource or an attachable volume count.
func IsScalarResource(name string) bool {
	switch {
	case strings.HasPrefix(name, "hugepages-"), strings.HasPrefix(name, "attachable-volumes-"):
		return true
	case strings.Contains(name, "kubernetes.io/"): // prefixed native
		return true
	}
	return strings.Contains(name, "/") && !strings.HasPrefix(name, "requests.") // extended
}

// scalarList adds the scalar resources of list to into (allocated when
// needed) and returns it.
func scalarList(into Scalars, list map[string]string, add bool) (Scalars, error) {
	for name, v := range list {
		if !IsScalarResource(name) {
			continue
		}
		q, err := resource.ParseQuantity(v)
		if err != nil {
			return into, fmt.Errorf("%w: quantity %q of %q: %v", ErrInvalidObject, v, name, err)
		}
		if into == nil {
			into = Scalars{}
		}
		if add {
			into[name] += q.Value()
		} else {
			into[name] = q.Value()
		}
	}
	return into, nil
}

// NodeScalars parses a node's allocatable scalar resources (its capacity
// when it has no allocatable list, as NodeAllocatable).
func NodeScalars(node *corev1.Node) (Scalars, error) {
	list := node.GetStatus().GetAllocatable()
	if len(list) == 0 {
		list = node.GetStatus().GetCapacity()
	}
	return scalarList(nil, list, false)
}

// containerScalars is what container c requests of the scalar resources:
// a request, or the limit standing in for a missing one (Kubernetes' API
// defaulting; an extended resource's request must equal its limit).
func containerScalars(c *corev1.Container) (Scalars, error) {
	res := c.GetResources()
	out, err := scalarList(nil, res.GetRequests(), false)
	if err != nil {
		return nil, err
	}
	for name, v := range res.GetLimits() {
		if _, ok := res.GetRequests()[name]; ok || !IsScalarResource(name) {
			continue
		}
		if out, err = scalarList(out, map[string]string{name: v}, false); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// PodScalars is PodRequests for the scalar resources: the larger of the
// sum over the containers (plus sidecars) and, per resource, the largest
// init container (plus the sidecars started before it), plus the pod's
// overhead.
func PodScalars(pod *corev1.Pod) (Scalars, error) {
	var req Scalars
	add := func(into, r Scalars) Scalars {
		if len(r) == 0 {
			return into
		}
		if into == nil {
			into = Scalars{}
		}
		for k, v := range r {
			into[k] += v
		}
		return into
	}
	spec := pod.GetSpec()
	for _, c := range spec.GetContainers() {
		r, err := containerScalars(c)
		if err != nil {
			return nil, fmt.Errorf("container %q: %w", c.GetName(), err)
		}
		req = add(req, r)
	}
	var sidecars, initMax Scalars
	for _, c := range spec.GetInitContainers() {
		r, err := containerScalars(c)
		if err != nil {
			return nil, fmt.Errorf("init container %q: %w", c.GetName(), err)
		}
		if c.GetRestartPolicy() == "Always" {
			req, sidecars = add(req, r), add(sidecars, r)
			r = sidecars
		} else {
			r = add(add(nil, r), sidecars)
		}
		for k, v := range r {
			if initMax == nil {
				initMax = Scalars{}
			}
			initMax[k] = max(initMax[k], v)
		}
	}
	for k, v := range initMax {
		if v > req[k] {
			if req == nil {
				req = Scalars{}
			}
			req[k] = v
		}
	}
	// The pod's overhead, as PodRequests adds it.
	return scalarList(req, spec.GetOverhead(), true)
}

// plus returns s with o added (sub: subtracted), as a new map: s is never
// modified. Zero amounts are dropped.
func (s Scalars) plus(o Scalars, sub bool) Scalars {
	if len(o) == 0 {
		return s
	}
	out := maps.Clone(s)
	if out == nil {
		out = Scalars{}
	}
	for k, v := range o {
		if sub {
			v = -v
		}
		if out[k] += v; out[k] == 0 {
			delete(out, k)
		}
	}
	return out
}
