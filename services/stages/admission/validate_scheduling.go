package admission

import (
	"fmt"

	"k8s.io/apimachinery/pkg/api/validate/content"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/validate"
)

// The scheduling fields beyond node affinity: topology spread constraints,
// pod (anti-)affinity terms and scheduling gates, checked as Kubernetes'
// ValidatePodSpec does.

var (
	unsatisfiableActions = []string{"DoNotSchedule", "ScheduleAnyway"}
	inclusionPolicies    = []string{"Honor", "Ignore"}
	labelSelectorOps     = []string{"In", "NotIn", "Exists", "DoesNotExist"}
)

const notPositive = "must be greater than zero"

func validateSchedulingFields(p *field.Path, spec *corev1.PodSpec) field.ErrorList {
	var errs field.ErrorList
	if len(spec.GetTopologySpreadConstraints()) > 0 {
		errs = append(errs, validateTopologySpread(p.Child("topologySpreadConstraints"), spec.GetTopologySpreadConstraints())...)
	}
	if gates := spec.GetSchedulingGates(); len(gates) > 0 {
		seen := make(map[string]bool, len(gates))
		for i, g := range gates {
			gp := p.Child("schedulingGates").Index(i).Child("name")
			for _, msg := range validation.IsQualifiedName(g.GetName()) {
				errs = append(errs, field.Invalid(gp, g.GetName(), msg))
			}
			if seen[g.GetName()] {
				errs = append(errs, field.Duplicate(gp, g.GetName()))
			}
			seen[g.GetName()] = true
		}
	}
	a := spec.GetAffinity()
	if pa := a.GetPodAffinity(); pa != nil {
		errs = append(errs, validatePodAffinityTerms(p.Child("affinity", "podAffinity"),
			pa.GetRequiredDuringSchedulingIgnoredDuringExecution(), pa.GetPreferredDuringSchedulingIgnoredDuringExecution())...)
	}
	if pa := a.GetPodAntiAffinity(); pa != nil {
		errs = append(errs, validatePodAffinityTerms(p.Child("affinity", "podAntiAffinity"),
			pa.GetRequiredDuringSchedulingIgnoredDuringExecution(), pa.GetPreferredDuringSchedulingIgnoredDuringExecution())...)
	}
	return errs
}

func validateTopologySpread(p *field.Path, cs []*corev1.TopologySpreadConstraint) field.ErrorList {
	var errs field.ErrorList
	seen := map[[2]string]bool{}
	for i, c := range cs {
		cp := p.Index(i)
		if c.GetMaxSkew() <= 0 {
			errs = append(errs, field.Invalid(cp.Child("maxSkew"), c.GetMaxSkew(), notPositive))
		}
		errs = append(errs, topologyKey(cp.Child("topologyKey"), c.GetTopologyKey())...)
		errs = append(errs, oneOf(cp, c.GetWhenUnsatisfiable(), unsatisfiableActions, "whenUnsatisfiable")...)
		if c.MinDomains != nil {
			switch {
			case c.GetMinDomains() <= 0:
				errs = append(errs, field.Invalid(cp.Child("minDomains"), c.GetMinDomains(), notPositive))
			case c.GetWhenUnsatisfiable() != "DoNotSchedule":
				errs = append(errs, field.Invalid(cp.Child("minDomains"), c.GetMinDomains(),
					fmt.Sprintf("can only use minDomains if whenUnsatisfiable=DoNotSchedule, not %s", c.GetWhenUnsatisfiable())))
			}
		}
		if c.NodeAffinityPolicy != nil {
			errs = append(errs, oneOf(cp, c.GetNodeAffinityPolicy(), inclusionPolicies, "nodeAffinityPolicy")...)
		}
		if c.NodeTaintsPolicy != nil {
			errs = append(errs, oneOf(cp, c.GetNodeTaintsPolicy(), inclusionPolicies, "nodeTaintsPolicy")...)
		}
		errs = append(errs, validateLabelSelector(cp.Child("labelSelector"), c.GetLabelSelector())...)
		for j, k := range c.GetMatchLabelKeys() {
			for _, msg := range content.IsLabelKey(k) {
				errs = append(errs, field.Invalid(cp.Child("matchLabelKeys").Index(j), k, msg))
			}
		}
		pair := [2]string{c.GetTopologyKey(), c.GetWhenUnsatisfiable()}
		if seen[pair] {
			errs = append(errs, field.Duplicate(cp, fmt.Sprintf("{%v, %v}", pair[0], pair[1])))
		}
		seen[pair] = true
	}
	return errs
}

func validatePodAffinityTerms(p *field.Path, req []*corev1.PodAffinityTerm, pref []*corev1.WeightedPodAffinityTerm) field.ErrorList {
	var errs field.ErrorList
	for i, t := range req {
		errs = append(errs, validatePodAffinityTerm(p.Child("requiredDuringSchedulingIgnoredDuringExecution").Index(i), t)...)
	}
	for i, w := range pref {
		wp := p.Child("preferredDuringSchedulingIgnoredDuringExecution").Index(i)
		if w.GetWeight() < 1 || w.GetWeight() > 100 {
			errs = append(errs, field.Invalid(wp.Child("weight"), w.GetWeight(), validation.InclusiveRangeError(1, 100)))
		}
		errs = append(errs, validatePodAffinityTerm(wp.Child("podAffinityTerm"), w.GetPodAffinityTerm())...)
	}
	return errs
}

func validatePodAffinityTerm(p *field.Path, t *corev1.PodAffinityTerm) field.ErrorList {
	errs := validateLabelSelector(p.Child("labelSelector"), t.GetLabelSelector())
	errs = append(errs, validateLabelSelector(p.Child("namespaceSelector"), t.GetNamespaceSelector())...)
	for i, ns := range t.GetNamespaces() {
		errs = append(errs, validate.DNS1123Label(p.Child("namespaces").Index(i), ns)...)
	}
	errs = append(errs, topologyKey(p.Child("topologyKey"), t.GetTopologyKey())...)
	for _, keys := range []struct {
		name string
		keys []string
	}{{"matchLabelKeys", t.GetMatchLabelKeys()}, {"mismatchLabelKeys", t.GetMismatchLabelKeys()}} {
		for i, k := range keys.keys {
			for _, msg := range content.IsLabelKey(k) {
				errs = append(errs, field.Invalid(p.Child(keys.name).Index(i), k, msg))
			}
		}
	}
	return errs
}

func topologyKey(p *field.Path, key string) field.ErrorList {
	if key == "" {
		return field.ErrorList{field.Required(p, "can not be empty")}
	}
	var errs field.ErrorList
	for _, msg := range content.IsLabelKey(key) {
		errs = append(errs, field.Invalid(p, key, msg))
	}
	return errs
}

// validateLabelSelector is metav1validation.ValidateLabelSelector.
func validateLabelSelector(p *field.Path, s *corev1.LabelSelector) field.ErrorList {
	if s == nil {
		return nil
	}
	errs := labels(p.Child("matchLabels"), s.GetMatchLabels())
	for i, r := range s.GetMatchExpressions() {
		rp := p.Child("matchExpressions").Index(i)
		switch r.GetOperator() {
		case "In", "NotIn":
			if len(r.GetValues()) == 0 {
				errs = append(errs, field.Required(rp.Child("values"), "must be specified when `operator` is 'In' or 'NotIn'"))
			}
		case "Exists", "DoesNotExist":
			if len(r.GetValues()) > 0 {
				errs = append(errs, field.Forbidden(rp.Child("values"), "may not be specified when `operator` is 'Exists' or 'DoesNotExist'"))
			}
		default:
			errs = append(errs, field.NotSupported(rp.Child("operator"), r.GetOperator(), labelSelectorOps))
		}
		for _, msg := range content.IsLabelKey(r.GetKey()) {
			errs = append(errs, field.Invalid(rp.Child("key"), r.GetKey(), msg))
		}
		for j, v := range r.GetValues() {
			for _, msg := range content.IsLabelValue(v) {
				errs = append(errs, field.Invalid(rp.Child("values").Index(j), v, msg))
			}
		}
	}
	return errs
}
