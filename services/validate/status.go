package validate

import (
	"fmt"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/eventsv1"
)

// InvalidStatus is the 422 Invalid Status of errs, worded as Kubernetes'.
func InvalidStatus(kind, name string, errs field.ErrorList) *corev1.Status {
	st := &corev1.Status{
		Status:  "Failure",
		Code:    422,
		Reason:  eventsv1.ReasonInvalid,
		Kind:    kind,
		Name:    name,
		Message: fmt.Sprintf("%s %q is invalid: %v", kind, name, errs.ToAggregate()),
	}
	for _, e := range errs {
		st.Causes = append(st.Causes, &corev1.StatusCause{Type: string(e.Type), Message: e.ErrorBody(), Field: e.Field})
	}
	return st
}

// By reports each of rule's complaints about v as Invalid at p.
func By(p *field.Path, v string, rule func(string) []string) field.ErrorList {
	var errs field.ErrorList
	for _, msg := range rule(v) {
		errs = append(errs, field.Invalid(p, v, msg))
	}
	return errs
}

// DNS1123Label reports v at p unless it is a DNS-1123 label.
func DNS1123Label(p *field.Path, v string) field.ErrorList {
	return By(p, v, validation.IsDNS1123Label)
}

// DNS1123Subdomain reports v at p unless it is a DNS-1123 subdomain.
func DNS1123Subdomain(p *field.Path, v string) field.ErrorList {
	return By(p, v, validation.IsDNS1123Subdomain)
}
