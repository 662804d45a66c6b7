package manifest

import (
	"reflect"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	"k8s.io/apimachinery/pkg/runtime"

	pf "github.com/podflow/podflow/proto/corev1"
)

// kind ties a manifest apiVersion/kind to its proto message and, for
// Kubernetes kinds, its k8s.io/api type.
type kind struct {
	apiVersion, kind string
	newProto         func() proto.Message
	newKube          func() runtime.Object
	shape            reflect.Type // Go struct whose json tags name the fields
}

func kubeKind[P proto.Message, K any, KP interface {
	*K
	runtime.Object
}](apiVersion, name string, newProto func() P) *kind {
	return &kind{
		apiVersion: apiVersion,
		kind:       name,
		newProto:   func() proto.Message { return newProto() },
		newKube:    func() runtime.Object { return KP(new(K)) },
		shape:      reflect.TypeFor[K](),
	}
}

var kinds = []*kind{
	kubeKind[*pf.Pod, corev1.Pod]("v1", "Pod", func() *pf.Pod { return new(pf.Pod) }),
	kubeKind[*pf.Node, corev1.Node]("v1", "Node", func() *pf.Node { return new(pf.Node) }),
	kubeKind[*pf.Service, corev1.Service]("v1", "Service", func() *pf.Service { return new(pf.Service) }),
	kubeKind[*pf.Endpoints, corev1.Endpoints]("v1", "Endpoints", func() *pf.Endpoints { return new(pf.Endpoints) }),
	kubeKind[*pf.EndpointSlice, discoveryv1.EndpointSlice]("discovery.k8s.io/v1", "EndpointSlice", func() *pf.EndpointSlice { return new(pf.EndpointSlice) }),
	kubeKind[*pf.Namespace, corev1.Namespace]("v1", "Namespace", func() *pf.Namespace { return new(pf.Namespace) }),
	kubeKind[*pf.ServiceAccount, corev1.ServiceAccount]("v1", "ServiceAccount", func() *pf.ServiceAccount { return new(pf.ServiceAccount) }),
	kubeKind[*pf.ConfigMap, corev1.ConfigMap]("v1", "ConfigMap", func() *pf.ConfigMap { return new(pf.ConfigMap) }),
	kubeKind[*pf.Secret, corev1.Secret]("v1", "Secret", func() *pf.Secret { return new(pf.Secret) }),
	kubeKind[*pf.Role, rbacv1.Role]("rbac.authorization.k8s.io/v1", "Role", func() *pf.Role { return new(pf.Role) }),
	kubeKind[*pf.ClusterRole, rbacv1.ClusterRole]("rbac.authorization.k8s.io/v1", "ClusterRole", func() *pf.ClusterRole { return new(pf.ClusterRole) }),
	kubeKind[*pf.RoleBinding, rbacv1.RoleBinding]("rbac.authorization.k8s.io/v1", "RoleBinding", func() *pf.RoleBinding { return new(pf.RoleBinding) }),
	kubeKind[*pf.ClusterRoleBinding, rbacv1.ClusterRoleBinding]("rbac.authorization.k8s.io/v1", "ClusterRoleBinding", func() *pf.ClusterRoleBinding { return new(pf.ClusterRoleBinding) }),
	kubeKind[*pf.Event, corev1.Event]("v1", "Event", func() *pf.Event { return new(pf.Event) }),
	kubeKind[*pf.LimitRange, corev1.LimitRange]("v1", "LimitRange", func() *pf.LimitRange { return new(pf.LimitRange) }),
	kubeKind[*pf.PriorityClass, schedulingv1.PriorityClass]("scheduling.k8s.io/v1", "PriorityClass", func() *pf.PriorityClass { return new(pf.PriorityClass) }),
}

var (
	kindByGVK   = map[[2]string]*kind{}
	kindByProto = map[protoreflect.FullName]*kind{}
	kindByKube  = map[reflect.Type]*kind{}
)

func init() {
	for _, k := range kinds {
		kindByGVK[[2]string{k.apiVersion, k.kind}] = k
		kindByProto[k.newProto().ProtoReflect().Descriptor().FullName()] = k
		if k.newKube != nil {
			kindByKube[reflect.TypeOf(k.newKube())] = k
		}
	}
}

// KindOf returns the apiVersion and kind a manifest of m carries, or two
// empty strings if m is not a kind this package converts.
func KindOf(m proto.Message) (apiVersion, kind string) {
	if m == nil {
		return "", ""
	}
	if u, ok := m.(*pf.Unstructured); ok {
		return u.GetApiVersion(), u.GetKind()
	}
	k := kindByProto[m.ProtoReflect().Descriptor().FullName()]
	if k == nil {
		return "", ""
	}
	return k.apiVersion, k.kind
}

// Kinds lists the apiVersion/kind pairs Decode accepts, as
// "apiVersion/Kind" ("v1/Pod", "rbac.authorization.k8s.io/v1/Role").
func Kinds() []string {
	out := make([]string, len(kinds))
	for i, k := range kinds {
		out[i] = k.apiVersion + "/" + k.kind
	}
	return append(out, genericKinds()...)
}
