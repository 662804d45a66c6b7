package validate

import (
	"fmt"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/podflow/podflow/proto/corev1"
)

// Kubernetes' bounds of an Event's fields (pkg/apis/core/validation).
const (
	ReportingInstanceLengthLimit = 128
	ActionLengthLimit            = 128
	ReasonLengthLimit            = 128
	NoteLengthLimit              = 1024
)

// Event is kube-apiserver's validation of a core/v1 Event written through
// the v1 API (legacyValidateEvent, which ValidateEventCreate and
// ValidateEventUpdate run for v1): an Event of an old client (no
// eventTime) must be in its involved object's namespace (for a
// cluster-scoped object: in no namespace or default); a new Event (with
// eventTime) may name a cluster-scoped object only from default or
// kube-system, and must say who reports it, from which instance, what it
// did and why, within Kubernetes' lengths.
func Event(e *corev1.Event) field.ErrorList {
	var errs field.ErrorList
	ns, involved := e.GetMetadata().GetNamespace(), e.GetInvolvedObject().GetNamespace()
	mismatch := func() {
		errs = append(errs, field.Invalid(field.NewPath("involvedObject", "namespace"), involved, "does not match event.namespace"))
	}
	if e.GetEventTime() == nil || e.GetEventTime().AsTime().IsZero() {
		if involved == "" {
			if ns != "" && ns != "default" {
				mismatch()
			}
		} else if ns != involved {
			mismatch()
		}
		return errs
	}
	if involved == "" && ns != "default" && ns != "kube-system" {
		mismatch()
	}
	reporting := field.NewPath("reportingComponent") // the v1 name of reportingController
	if e.GetReportingComponent() == "" {
		errs = append(errs, field.Required(reporting, ""))
	}
	for _, msg := range validation.IsQualifiedName(e.GetReportingComponent()) {
		errs = append(errs, field.Invalid(reporting, e.GetReportingComponent(), msg))
	}
	if e.GetReportingInstance() == "" {
		errs = append(errs, field.Required(field.NewPath("reportingInstance"), ""))
	}
	if len(e.GetReportingInstance()) > ReportingInstanceLengthLimit {
		errs = append(errs, field.Invalid(field.NewPath("reportingInstance"), "", fmt.Sprintf("can have at most %v characters", ReportingInstanceLengthLimit)))
	}
	if e.GetAction() == "" {
		errs = append(errs, field.Required(field.NewPath("action"), ""))
	}
	if len(e.GetAction()) > ActionLengthLimit {
		errs = append(errs, field.Invalid(field.NewPath("action"), "", fmt.Sprintf("can have at most %v characters", ActionLengthLimit)))
	}
	if e.GetReason() == "" {
		errs = append(errs, field.Required(field.NewPath("reason"), ""))
	}
	if len(e.GetReason()) > ReasonLengthLimit {
		errs = append(errs, field.Invalid(field.NewPath("reason"), "", fmt.Sprintf("can have at most %v characters", ReasonLengthLimit)))
	}
	if len(e.GetMessage()) > NoteLengthLimit {
		errs = append(errs, field.Invalid(field.NewPath("message"), "", fmt.Sprintf("can have at most %v characters", NoteLengthLimit)))
	}
	return errs
}
