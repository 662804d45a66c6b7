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
// spec.priority and spec.preemptionPolicy from spec.priorityClassName (a
// built-in class or one of classes), or, for a pod that names none, from the globalDefault class
// with the highest value, naming it. A pod naming no class while none is
// the global default keeps its priority unset (which the scheduler reads
// as 0, and its preemptionPolicy as PreemptLowerPriority). It returns a
// 403 Forbidden Status for an unknown class or a spec.priority or
// spec.preemptionPolicy that differs from the class's.
func (m *mutator) resolvePriority(classes []*corev1.PriorityClass) *corev1.Status {
	spec := m.spec()
	name := spec.GetPriorityClassName()
	var value int32
	policy := PreemptLowerPriority
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
		name, value, policy = def.GetMetadata().GetName(), def.GetValue(), classPolicy(def)
		spec.PriorityClassName = name
		m.record("spec.priorityClassName: %s (the global default)", name)
	default:
		found = false
		for _, pc := range classes {
			if pc.GetMetadata().GetName() == name {
				value, policy, found = pc.GetValue(), classPolicy(pc), true
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
	if spec.PreemptionPolicy != nil && spec.GetPreemptionPolicy() != policy {
		return priorityForbidden(pod, fmt.Sprintf("the string value of PreemptionPolicy (%s) must not be provided in pod spec; priority admission controller computed %s from the given PriorityClass name",
			spec.GetPreemptionPolicy(), policy))
	}
	if spec.Priority == nil {
		spec.Priority = &value
		m.record("spec.priority: %d (PriorityClass %s)", value, name)
	}
	if spec.PreemptionPolicy == nil {
		spec.PreemptionPolicy = &policy
		m.record("spec.preemptionPolicy: %s (PriorityClass %s)", policy, name)
	}
	return nil
}

// Preemption policies (PriorityClass and pod spec.preemptionPolicy).
const (
	PreemptLowerPriority = "PreemptLowerPriority"
	PreemptNever         = "Never"
)

// classPolicy is a PriorityClass's preemptionPolicy, PreemptLowerPriority
// when unset.
func classPolicy(pc *corev1.PriorityClass) string {
	if pc.PreemptionPolicy == nil {
		return PreemptLowerPriority
	}
	return pc.GetPreemptionPolicy()
}

func priorityForbidden(pod, msg string) *corev1.Status {
	return &corev1.Status{Status: "Failure", Code: 403, Reason: eventsv1.ReasonForbidden, Kind: "Pod", Name: pod,
		Message: fmt.Sprintf("pods %q is forbidden: %s", pod, msg)}
}
