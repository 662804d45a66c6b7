package api

import (
	"context"
	"fmt"
	"strings"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/eventsv1"
	"github.com/podflow/podflow/services/auth"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/stage"
)

// Registry gives writes of generic kinds (objects.Kind.Generic)
// kube-apiserver's semantics: services/registry's *Registry, which links
// k8s.io/kubernetes and is given by whoever composes the api process.
// Both methods replace obj with what is to be stored (defaulted, uid,
// creationTimestamp and generation set, validated) and return the
// warnings for the client, or the failure.
type Registry interface {
	PrepareCreate(ctx context.Context, user *corev1.UserInfo, subresource string, obj *corev1.Unstructured) ([]string, *corev1.Status)
	PrepareUpdate(ctx context.Context, user *corev1.UserInfo, subresource string, obj, old *corev1.Unstructured) ([]string, *corev1.Status)
}

// checkSubresource refuses a write through a subresource kind does not
// have (404, as kube-apiserver answers an unknown path) or one of a proto
// kind (their subresources are the HTTPS server's own), and anything but
// an update through one (405: a subresource neither creates nor deletes).
func checkSubresource(kind objects.Kind, verb, sub, name string) *corev1.Status {
	switch {
	case sub == "":
		return nil
	case !kind.Generic || !kind.HasSubresource(sub):
		return stage.Failure(404, eventsv1.ReasonNotFound, kind.Resource, name, "%s %q has no subresource %q", kind.Resource, name, sub)
	case verb != "update" && verb != "apply":
		return stage.Failure(405, "MethodNotAllowed", kind.Resource, name, "verb %q is not supported on %s/%s", verb, kind.Resource, sub)
	}
	return nil
}

// prepareGeneric runs the registry over a write of a generic kind:
// PrepareCreate for a new object, PrepareUpdate against the stored one.
func (s *Stage) prepareGeneric(ctx context.Context, attrs auth.Attributes, obj *corev1.Unstructured, existing objects.Object) ([]string, *corev1.Status) {
	if s.cfg.Registry == nil {
		return nil, stage.Internal(fmt.Errorf("api: no registry configured for %s %s", obj.GetApiVersion(), obj.GetKind()))
	}
	if existing == nil {
		return s.cfg.Registry.PrepareCreate(ctx, attrs.User, attrs.Subresource, obj)
	}
	old, ok := existing.(*corev1.Unstructured)
	if !ok {
		return nil, stage.Internal(fmt.Errorf("api: stored %s is a %T", attrs.Resource, existing))
	}
	return s.cfg.Registry.PrepareUpdate(ctx, attrs.User, attrs.Subresource, obj, old)
}

// withWarnings adds a write's warnings to its Status.
func withWarnings(st *corev1.Status, warnings []string) *corev1.Status {
	st.Warnings = append(st.Warnings, warnings...)
	return st
}

// checkGenericKind refuses a generic object whose apiVersion and kind are
// not those of the kind the request names: authorized for one kind, it
// would be stored as another. A custom resource may be in any version of
// its group (its definition's Registry converts it to the storage
// version).
func checkGenericKind(kind objects.Kind, obj objects.Object) *corev1.Status {
	u, ok := obj.(*corev1.Unstructured)
	if !ok || (u.GetApiVersion() == kind.APIVersion() && u.GetKind() == kind.Name) {
		return nil
	}
	if group, _, found := strings.Cut(u.GetApiVersion(), "/"); kind.Replaceable() && found && group == kind.APIGroup && u.GetKind() == kind.Name {
		return nil // a custom resource in any of its versions: the registry checks it is served
	}
	return stage.Failure(400, eventsv1.ReasonBadRequest, kind.Resource, u.GetMetadata().GetName(),
		"the object is %s %s; %s %s expected", u.GetApiVersion(), u.GetKind(), kind.APIVersion(), kind.Name)
}
