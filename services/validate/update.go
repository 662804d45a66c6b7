package validate

import (
	"maps"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/objects"
)

// immutableWhenSet is kube-apiserver's detail for a field of an immutable
// ConfigMap or Secret.
const immutableWhenSet = "field is immutable when `immutable` is set"

// roleRef is the internal rbac.RoleRef kube-apiserver's validation reports
// a changed roleRef with (its JSON, untagged).
type roleRef struct {
	APIGroup string
	Kind     string
	Name     string
}

// ObjectUpdate checks what kube-apiserver's update validation of a kind
// refuses to change, for the proto kinds: an immutable ConfigMap's or
// Secret's data (and the immutable flag itself), a Secret's type, a role
// binding's roleRef, a PriorityClass's value and preemptionPolicy. old
// is the stored object. It returns nil when the update is allowed, else a 422 Invalid Status with kube-apiserver's
// messages, e.g.
//
//	ConfigMap "settings" is invalid: data: Forbidden: field is immutable when `immutable` is set
func ObjectUpdate(obj, old objects.Object) *corev1.Status {
	var errs field.ErrorList
	switch o := obj.(type) {
	case *corev1.ConfigMap:
		p, _ := old.(*corev1.ConfigMap)
		if p.GetImmutable() {
			if !o.GetImmutable() {
				errs = append(errs, field.Forbidden(field.NewPath("immutable"), immutableWhenSet))
			}
			if !maps.Equal(o.GetData(), p.GetData()) {
				errs = append(errs, field.Forbidden(field.NewPath("data"), immutableWhenSet))
			}
			if !maps.EqualFunc(o.GetBinaryData(), p.GetBinaryData(), slices.Equal) {
				errs = append(errs, field.Forbidden(field.NewPath("binaryData"), immutableWhenSet))
			}
		}
	case *corev1.Secret:
		p, _ := old.(*corev1.Secret)
		if secretType(o) != secretType(p) {
			errs = append(errs, field.Invalid(field.NewPath("type"), secretType(o), "field is immutable"))
		}
		if p.GetImmutable() {
			if !o.GetImmutable() {
				errs = append(errs, field.Forbidden(field.NewPath("immutable"), immutableWhenSet))
			}
			if !maps.EqualFunc(o.GetData(), p.GetData(), slices.Equal) {
				errs = append(errs, field.Forbidden(field.NewPath("data"), immutableWhenSet))
			}
		}
	case *corev1.RoleBinding:
		p, _ := old.(*corev1.RoleBinding)
		errs = append(errs, roleRefUnchanged(o.GetRoleRef(), p.GetRoleRef())...)
	case *corev1.ClusterRoleBinding:
		p, _ := old.(*corev1.ClusterRoleBinding)
		errs = append(errs, roleRefUnchanged(o.GetRoleRef(), p.GetRoleRef())...)
	case *corev1.PriorityClass:
		p, _ := old.(*corev1.PriorityClass)
		errs = append(errs, priorityClassUpdate(o, p)...)
	}
	if len(errs) == 0 {
		return nil
	}
	k, _ := objects.KindOf(obj)
	st := InvalidStatus(k.Name, obj.GetMetadata().GetName(), errs)
	if k.APIGroup != "" { // kube-apiserver names the kind with its group
		st.Message = strings.Replace(st.Message, k.Name, k.Name+"."+k.APIGroup, 1)
	}
	return st
}

// secretType is a Secret's type as stored: Opaque by default.
func secretType(s *corev1.Secret) string {
	if t := s.GetType(); t != "" {
		return t
	}
	return "Opaque"
}

// priorityClassUpdate is kube's ValidatePriorityClassUpdate
// (pkg/apis/scheduling/validation) past the metadata: value and
// preemptionPolicy are immutable. An unset preemptionPolicy is the
// PreemptLowerPriority kube's defaulting gives it.
func priorityClassUpdate(pc, old *corev1.PriorityClass) field.ErrorList {
	var errs field.ErrorList
	if pc.GetValue() != old.GetValue() {
		errs = append(errs, field.Forbidden(field.NewPath("value"), "may not be changed in an update."))
	}
	if policy := preemptionPolicy(pc); policy != preemptionPolicy(old) {
		errs = append(errs, field.Invalid(field.NewPath("preemptionPolicy"), policy, "field is immutable"))
	}
	return errs
}

func preemptionPolicy(pc *corev1.PriorityClass) string {
	if pc.PreemptionPolicy == nil {
		return "PreemptLowerPriority"
	}
	return pc.GetPreemptionPolicy()
}

func roleRefUnchanged(ref, old *corev1.RoleRef) field.ErrorList {
	n := roleRef{APIGroup: ref.GetApiGroup(), Kind: ref.GetKind(), Name: ref.GetName()}
	if n == (roleRef{APIGroup: old.GetApiGroup(), Kind: old.GetKind(), Name: old.GetName()}) {
		return nil
	}
	return field.ErrorList{field.Invalid(field.NewPath("roleRef"), n, "field is immutable")}
}
