package objects

import (
	"fmt"
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/podflow/podflow/proto/corev1"
)

// Object is every stored kind: a proto message with Kubernetes metadata.
type Object interface {
	proto.Message
	GetMetadata() *corev1.ObjectMeta
}

// Kind describes how one kind is stored.
type Kind struct {
	Name       string // "Pod"
	Resource   string // "pods", as in RBAC rules and URLs
	APIGroup   string // "" for core, "rbac.authorization.k8s.io", ...
	Namespaced bool
	prefix     string // store key prefix, ending in '/'
	newFn      func() Object
}

// New returns an empty object of the kind.
func (k Kind) New() Object { return k.newFn() }

// Prefix returns the store key prefix of the kind in namespace ns ("" for
// every namespace, and for cluster-scoped kinds).
func (k Kind) Prefix(ns string) string {
	if k.Namespaced && ns != "" {
		return k.prefix + ns + "/"
	}
	return k.prefix
}

// Key returns the store key of the object ns/name (ns ignored for
// cluster-scoped kinds).
func (k Kind) Key(ns, name string) string {
	if k.Namespaced {
		return k.prefix + ns + "/" + name
	}
	return k.prefix + name
}

// The stored kinds. Keys follow Kubernetes' etcd layout so that its users
// recognise them (nodes are still "minions" there).
var (
	Pods                = newKind("Pod", "pods", "", true, "/registry/pods/", func() Object { return &corev1.Pod{} })
	Nodes               = newKind("Node", "nodes", "", false, "/registry/minions/", func() Object { return &corev1.Node{} })
	Services            = newKind("Service", "services", "", true, "/registry/services/specs/", func() Object { return &corev1.Service{} })
	EndpointSlices      = newKind("EndpointSlice", "endpointslices", "discovery.k8s.io", true, "/registry/endpointslices/", func() Object { return &corev1.EndpointSlice{} })
	Endpoints           = newKind("Endpoints", "endpoints", "", true, "/registry/services/endpoints/", func() Object { return &corev1.Endpoints{} })
	Namespaces          = newKind("Namespace", "namespaces", "", false, "/registry/namespaces/", func() Object { return &corev1.Namespace{} })
	ServiceAccounts     = newKind("ServiceAccount", "serviceaccounts", "", true, "/registry/serviceaccounts/", func() Object { return &corev1.ServiceAccount{} })
	ConfigMaps          = newKind("ConfigMap", "configmaps", "", true, "/registry/configmaps/", func() Object { return &corev1.ConfigMap{} })
	Secrets             = newKind("Secret", "secrets", "", true, "/registry/secrets/", func() Object { return &corev1.Secret{} })
	Roles               = newKind("Role", "roles", "rbac.authorization.k8s.io", true, "/registry/roles/", func() Object { return &corev1.Role{} })
	ClusterRoles        = newKind("ClusterRole", "clusterroles", "rbac.authorization.k8s.io", false, "/registry/clusterroles/", func() Object { return &corev1.ClusterRole{} })
	RoleBindings        = newKind("RoleBinding", "rolebindings", "rbac.authorization.k8s.io", true, "/registry/rolebindings/", func() Object { return &corev1.RoleBinding{} })
	ClusterRoleBindings = newKind("ClusterRoleBinding", "clusterrolebindings", "rbac.authorization.k8s.io", false, "/registry/clusterrolebindings/", func() Object { return &corev1.ClusterRoleBinding{} })
	Events              = newKind("Event", "events", "", true, "/registry/events/", func() Object { return &corev1.Event{} })
	LimitRanges         = newKind("LimitRange", "limitranges", "", true, "/registry/limitranges/", func() Object { return &corev1.LimitRange{} })
	SidecarPolicies     = newKind("SidecarPolicy", "sidecarpolicies", "podflow.io", true, "/registry/podflow.io/sidecarpolicies/", func() Object { return &corev1.SidecarPolicy{} })
	PriorityClasses     = newKind("PriorityClass", "priorityclasses", "scheduling.k8s.io", false, "/registry/priorityclasses/", func() Object { return &corev1.PriorityClass{} })
	NodeAllocations     = newKind("NodeAllocation", "nodeallocations", "podflow.io", false, "/registry/podflow.io/nodeallocations/", func() Object { return &corev1.NodeAllocation{} })
)

var (
	byMessage  = map[protoreflect.FullName]Kind{}
	byResource = map[string]Kind{}
	kinds      []Kind
)

func newKind(name, resource, group string, namespaced bool, prefix string, newFn func() Object) Kind {
	k := Kind{Name: name, Resource: resource, APIGroup: group, Namespaced: namespaced, prefix: prefix, newFn: newFn}
	byMessage[newFn().ProtoReflect().Descriptor().FullName()] = k
	byResource[resource] = k
	kinds = append(kinds, k)
	return k
}

// Kinds lists every stored kind.
func Kinds() []Kind { return append([]Kind(nil), kinds...) }

// KindOf returns the kind of a stored object.
func KindOf(m proto.Message) (Kind, error) {
	k, ok := byMessage[m.ProtoReflect().Descriptor().FullName()]
	if !ok {
		return Kind{}, fmt.Errorf("%w: %s", ErrUnknownKind, m.ProtoReflect().Descriptor().FullName())
	}
	return k, nil
}

// KindForResource returns the kind of a resource name ("pods", "pod",
// "Pod", "po" and the other kubectl short names).
func KindForResource(r string) (Kind, error) {
	r = strings.ToLower(r)
	if k, ok := byResource[r]; ok {
		return k, nil
	}
	if k, ok := byResource[r+"s"]; ok {
		return k, nil
	}
	if alias, ok := shortNames[r]; ok {
		return byResource[alias], nil
	}
	for _, k := range kinds {
		if strings.ToLower(k.Name) == r {
			return k, nil
		}
	}
	return Kind{}, fmt.Errorf("%w: %q", ErrUnknownKind, r)
}

var shortNames = map[string]string{
	"po": "pods", "no": "nodes", "svc": "services", "ns": "namespaces", "sa": "serviceaccounts",
	"cm": "configmaps", "ev": "events", "limits": "limitranges", "endpointslice": "endpointslices",
	"ep": "endpointslices", "pc": "priorityclasses",
}

// KeyOf returns the store key of obj.
func KeyOf(obj Object) (string, error) {
	k, err := KindOf(obj)
	if err != nil {
		return "", err
	}
	md := obj.GetMetadata()
	if md.GetName() == "" {
		return "", fmt.Errorf("%w: %s has no metadata.name", ErrInvalid, k.Name)
	}
	if k.Namespaced && md.GetNamespace() == "" {
		return "", fmt.Errorf("%w: %s %q has no metadata.namespace", ErrInvalid, k.Name, md.GetName())
	}
	return k.Key(md.GetNamespace(), md.GetName()), nil
}
