package admission

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	"google.golang.org/protobuf/proto"
	nodev1 "k8s.io/api/node/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/podflow/podflow/proto/corev1"
)

// RuntimeClass is what admission applies of a node.k8s.io/v1
// RuntimeClass, as Kubernetes' RuntimeClass admission plugin does: its
// overhead (podFixed) becomes the pod's spec.overhead, its
// scheduling.nodeSelector is merged into the pod's and its
// scheduling.tolerations are added to the pod's.
type RuntimeClass struct {
	Name         string
	Handler      string
	Overhead     map[string]string // nil: none
	NodeSelector map[string]string
	Tolerations  []*corev1.Toleration
}

// RuntimeClassFromStore reads a RuntimeClass from its stored form (an
// Unstructured whose content is the object's JSON without metadata).
func RuntimeClassFromStore(u *corev1.Unstructured) (*RuntimeClass, error) {
	var rc nodev1.RuntimeClass
	if err := json.Unmarshal(u.GetContent(), &rc); err != nil {
		return nil, fmt.Errorf("admission: RuntimeClass %q: %w", u.GetMetadata().GetName(), err)
	}
	out := &RuntimeClass{Name: u.GetMetadata().GetName(), Handler: rc.Handler}
	if rc.Overhead != nil {
		out.Overhead = map[string]string{}
		for k, q := range rc.Overhead.PodFixed {
			out.Overhead[string(k)] = q.String()
		}
	}
	if s := rc.Scheduling; s != nil {
		out.NodeSelector = maps.Clone(s.NodeSelector)
		for _, t := range s.Tolerations {
			pt := &corev1.Toleration{Key: t.Key, Operator: string(t.Operator), Value: t.Value, Effect: string(t.Effect)}
			if t.TolerationSeconds != nil {
				pt.TolerationSeconds = proto.Int64(*t.TolerationSeconds)
			}
			out.Tolerations = append(out.Tolerations, pt)
		}
	}
	return out, nil
}

func runtimeClassForbidden(pod, msg string) *corev1.Status {
	return priorityForbidden(pod, msg)
}

// runtimeClass is the plugin's Admit: a pod naming a RuntimeClass that
// does not exist (rc nil or another's) is refused 403; else its overhead
// is set (refused when the pod sets another), its node selector merged
// (refused on a conflicting key) and its tolerations added.
func (m *mutator) runtimeClass(rc *RuntimeClass) *corev1.Status {
	spec := m.spec()
	name := spec.GetRuntimeClassName()
	pod := m.pod.GetMetadata().GetName()
	if name == "" {
		return nil
	}
	if rc == nil || rc.Name != name {
		return runtimeClassForbidden(pod, fmt.Sprintf("pod rejected: RuntimeClass %q not found", name))
	}
	if rc.Overhead != nil {
		if len(spec.Overhead) > 0 && !sameQuantities(spec.Overhead, rc.Overhead) {
			return runtimeClassForbidden(pod, "pod rejected: Pod's Overhead doesn't match RuntimeClass's defined Overhead")
		}
		if !maps.Equal(spec.Overhead, rc.Overhead) {
			spec.Overhead = maps.Clone(rc.Overhead)
			m.record("runtimeclass: set overhead from runtimeclass %s", name)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(rc.NodeSelector)) {
		v := rc.NodeSelector[k]
		if cur, ok := spec.NodeSelector[k]; ok {
			if cur != v {
				return runtimeClassForbidden(pod, fmt.Sprintf("conflict: runtimeClass.scheduling.nodeSelector[%s] = %s; pod.spec.nodeSelector[%s] = %s", k, v, k, cur))
			}
			continue
		}
		if spec.NodeSelector == nil {
			spec.NodeSelector = map[string]string{}
		}
		spec.NodeSelector[k] = v
		m.record("runtimeclass: set nodeSelector %s=%s from runtimeclass %s", k, v, name)
	}
	for _, t := range rc.Tolerations {
		if !slices.ContainsFunc(spec.Tolerations, func(p *corev1.Toleration) bool { return proto.Equal(p, t) }) {
			spec.Tolerations = append(spec.Tolerations, proto.CloneOf(t))
			m.record("runtimeclass: added toleration %s from runtimeclass %s", t.GetKey(), name)
		}
	}
	return nil
}

// validateOverhead is the plugin's Validate: a pod's overhead must be its
// RuntimeClass's, and a pod without a RuntimeClass with overhead has none.
func validateOverhead(p *corev1.Pod, rc *RuntimeClass) *corev1.Status {
	spec := p.GetSpec()
	pod := p.GetMetadata().GetName()
	if spec.GetRuntimeClassName() != "" && rc != nil && rc.Name == spec.GetRuntimeClassName() && rc.Overhead != nil {
		if !sameQuantities(spec.GetOverhead(), rc.Overhead) {
			return runtimeClassForbidden(pod, "pod rejected: Pod's Overhead doesn't match RuntimeClass's defined Overhead")
		}
		return nil
	}
	if len(spec.GetOverhead()) > 0 {
		return runtimeClassForbidden(pod, "pod rejected: Overhead provided with no RuntimeClass")
	}
	return nil
}

// sameQuantities compares two resource lists by value ("1000m" is "1").
func sameQuantities(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		w, ok := b[k]
		if !ok {
			return false
		}
		qa, errA := resource.ParseQuantity(v)
		qb, errB := resource.ParseQuantity(w)
		if errA != nil || errB != nil {
			if v != w {
				return false
			}
			continue
		}
		if qa.Cmp(qb) != 0 {
			return false
		}
	}
	return true
}
