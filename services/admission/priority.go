package admission

import (
	"fmt"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/eventsv1"
)

// Kubernetes' built-in PriorityClasses, which exist without objects.
const (
	SystemClusterCritical         = "system-cluster-critical"
	SystemNodeCritical            = "system-node-critical"
	SystemClusterCriticalPriority = 2000000000
	SystemNodeCriticalPriority    = SystemClusterCriticalPriority + 1000
)

// resolvePriority is Kubernetes' Priority admission plugin: it sets
// spec.priority from spec.priorityClassName (a built-in class or one of
// classes), or, for a pod that names none, from the globalDefault class
// with the highest value, naming it. A pod naming no class while none is
// the global default keeps its priority unset (which the scheduler reads
// as 0). It returns a 403 Forbidden Status for an unknown class or a
// spec.priority that differs from the class's value.
func (m *mutator) resolvePriority(classes []*corev1.PriorityClass) *corev1.Status {
	spec := m.spec()
	name := spec.GetPriorityClassName()
	var value int32
	found := true
	switch name {
	case SystemClusterCritical:
		value = SystemClusterCriticalPriority
	case SystemNodeCritical:
		value = SystemNodeCriticalPriority
	case "":
		var def *corev1.PriorityClass
		for _, pc := range classes {
			if pc.GetGlobalDefault() && (def == nil || pc.GetValue() > def.GetValue()) {
				def = pc
			}
		}
		if def == nil {
			return nil
		}
		name, value = def.GetMetadata().GetName(), def.GetValue()
		spec.PriorityClassName = name
		m.record("spec.priorityClassName: %s (the global default)", name)
	default:
		found = false
		for _, pc := range classes {
			if pc.GetMetadata().GetName() == name {
				value, found = pc.GetValue(), true
				break
			}
		}
	}
	pod := m.pod.GetMetadata().GetName()
	if !found {
		return priorityForbidden(pod, fmt.Sprintf("no PriorityClass with name %s was found", name))
	}
	if spec.Priority != nil && spec.GetPriority() != value {
		return priorityForbidden(pod, fmt.Sprintf("the integer value of priority (%d) must not be provided in pod spec; priority admission controller computed %d from the given PriorityClass name",
			spec.GetPriority(), value))
	}
	if spec.Priority == nil {
		spec.Priority = &value
		m.record("spec.priority: %d (PriorityClass %s)", value, name)
	}
	return nil
}

func priorityForbidden(pod, msg string) *corev1.Status {
	return &corev1.Status{Status: "Failure", Code: 403, Reason: eventsv1.ReasonForbidden, Kind: "Pod", Name: pod,
		Message: fmt.Sprintf("pods %q is forbidden: %s", pod, msg)}
}
