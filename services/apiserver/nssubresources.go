package apiserver

// namespaces/status (get, update, patch) and namespaces/finalize
// (update), as kube-apiserver's namespace StatusREST and FinalizeREST:
// a status write changes the status (and metadata) and keeps the spec; a
// finalize write changes spec.finalizers (and metadata) and keeps the
// status. The api stage's namespace update keeps both, so these write the
// store here, compare-and-swap at the revision the request was built
// from; the namespace controller sees the change (a terminating
// namespace whose finalizers are emptied is removed).

import (
	"context"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/validate"
)

// namespaceSubresource reports whether req is a namespace subresource
// request this file serves (others are 404 or 405 as any subresource).
func namespaceSubresource(req *request) bool {
	if req.res.name != "namespaces" || req.res.group != "" || req.name == "" {
		return false
	}
	switch req.sub {
	case "status":
		return req.verb == "get" || req.verb == "update" || req.verb == "patch"
	case "finalize":
		return req.verb == "update"
	}
	return false
}

// standardFinalizers are the finalizer names that need no domain
// (kube's helper.IsStandardFinalizerName).
var standardFinalizers = []string{"kubernetes", "orphan", "foregroundDeletion"}

// updateNamespaceSub writes next (built from current by the request) as
// the status or finalize subresource does.
func (s *Server) updateNamespaceSub(ctx context.Context, req *request, current, next *corev1.Namespace, dry bool) (*corev1.Status, proto.Message) {
	name := current.GetMetadata().GetName()
	out := proto.CloneOf(next)
	keepSystemFields(out, current)
	md := objects.Meta(out)
	md.ResourceVersion = current.GetMetadata().GetResourceVersion()
	var errs field.ErrorList
	switch req.sub {
	case "status": // namespaceStatusStrategy, ValidateNamespaceStatusUpdate
		out.Spec = proto.CloneOf(current.GetSpec())
		phase := out.GetStatus().GetPhase()
		if md.GetDeletionTimestamp() == nil {
			if phase != "Active" {
				errs = append(errs, field.Invalid(field.NewPath("status", "Phase"), phase, "may only be 'Active' if `deletionTimestamp` is empty"))
			}
		} else if phase != "Terminating" {
			errs = append(errs, field.Invalid(field.NewPath("status", "Phase"), phase, "may only be 'Terminating' if `deletionTimestamp` is not empty"))
		}
	case "finalize": // namespaceFinalizeStrategy, ValidateNamespaceFinalizeUpdate
		out.Status = proto.CloneOf(current.GetStatus())
		p := field.NewPath("spec", "finalizers")
		for i, f := range out.GetSpec().GetFinalizers() {
			errs = append(errs, apimachineryvalidation.ValidateFinalizerName(f, p.Index(i))...)
			if !strings.Contains(f, "/") && !slices.Contains(standardFinalizers, f) {
				errs = append(errs, field.Invalid(p.Index(i), f, "name is neither a standard finalizer name nor is it fully qualified"))
			}
		}
	}
	if len(errs) > 0 {
		return validate.InvalidStatus("Namespace", name, errs), nil
	}
	return s.writeSubresource(ctx, req, "namespaces", name, out, dry)
}
