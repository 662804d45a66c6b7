package validate

import (
	"k8s.io/apimachinery/pkg/api/validation/path"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/eventsv1"
	"github.com/podflow/podflow/services/objects"
)

// MaxDataBytes bounds a ConfigMap's data and binaryData together, and a
// Secret's data, as Kubernetes' MaxSecretSize (1 MiB).
const MaxDataBytes = 1 << 20

// nameRule is how Kubernetes validates the names of a kind: most are
// DNS-1123 subdomains; Namespaces are DNS-1123 labels, Services DNS-1035
// labels, and the RBAC kinds path segment names (no "/" or "%", not "." or
// "..").
type nameRule func(name string) []string

func pathSegment(name string) []string { return path.IsValidPathSegmentName(name) }

var nameRules = map[string]nameRule{
	objects.Namespaces.Name:          validation.IsDNS1123Label,
	objects.Services.Name:            validation.IsDNS1035Label,
	objects.Roles.Name:               pathSegment,
	objects.ClusterRoles.Name:        pathSegment,
	objects.RoleBindings.Name:        pathSegment,
	objects.ClusterRoleBindings.Name: pathSegment,
}

// Object checks what Kubernetes' validation of every kind checks
// before anything else: the name (by the kind's rule, nameRules; DNS-1123
// subdomain by default), the namespace of a namespaced object (a DNS-1123
// label), and for ConfigMaps and Secrets their data keys and total size
// (at most MaxDataBytes), Events as Event, and Endpoints' subsets (their
// port protocols defaulted to TCP first). It returns nil when obj is
// valid, else a 422 Invalid Status with one cause per problem and
// Kubernetes' message, e.g.
//
//	ConfigMap "a/b" is invalid: metadata.name: Invalid value: "a/b": a lowercase RFC 1123 subdomain must consist of ...
//
// Pods get the whole of admission.ValidatePod in the pipeline; Object covers
// their name and namespace only.
func Object(obj objects.Object) *corev1.Status {
	kind, err := objects.KindOf(obj)
	if err != nil {
		return &corev1.Status{Status: "Failure", Code: 400, Reason: eventsv1.ReasonBadRequest, Message: err.Error()}
	}
	md := obj.GetMetadata()
	var errs field.ErrorList
	namePath := field.NewPath("metadata", "name")
	rule, ok := nameRules[kind.Name]
	if !ok {
		rule = validation.IsDNS1123Subdomain
	}
	if md.GetName() == "" {
		errs = append(errs, field.Required(namePath, "name or generateName is required"))
	} else {
		errs = append(errs, By(namePath, md.GetName(), rule)...)
	}
	if kind.Namespaced && md.GetNamespace() != "" {
		errs = append(errs, DNS1123Label(field.NewPath("metadata", "namespace"), md.GetNamespace())...)
	}
	switch o := obj.(type) {
	case *corev1.ConfigMap:
		total := 0
		for k, v := range o.GetData() {
			errs = append(errs, By(field.NewPath("data").Key(k), k, validation.IsConfigMapKey)...)
			if _, dup := o.GetBinaryData()[k]; dup {
				errs = append(errs, field.Invalid(field.NewPath("data").Key(k), k, "duplicate of key present in binaryData"))
			}
			total += len(v)
		}
		for k, v := range o.GetBinaryData() {
			errs = append(errs, By(field.NewPath("binaryData").Key(k), k, validation.IsConfigMapKey)...)
			total += len(v)
		}
		if total > MaxDataBytes {
			errs = append(errs, field.TooLong(field.NewPath(""), "", MaxDataBytes))
		}
	case *corev1.Endpoints:
		errs = append(errs, endpointsErrors(o)...)
	case *corev1.Event:
		errs = append(errs, Event(o)...)
	case *corev1.Secret:
		total := 0
		for k, v := range o.GetData() {
			errs = append(errs, By(field.NewPath("data").Key(k), k, validation.IsConfigMapKey)...)
			total += len(v)
		}
		if total > MaxDataBytes {
			errs = append(errs, field.TooLong(field.NewPath("data"), "", MaxDataBytes))
		}
	}
	if len(errs) == 0 {
		return nil
	}
	return InvalidStatus(kind.Name, md.GetName(), errs)
}
