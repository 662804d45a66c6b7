package objects

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/podflow/podflow/proto/corev1"
)

// Object is every stored kind: a proto message with Kubernetes metadata.
type Object interface {
	proto.Message
	GetMetadata() *corev1.ObjectMeta
}

// Kind describes how one kind is stored and served.
type Kind struct {
	Name       string // "Pod"
	Resource   string // "pods", as in RBAC rules and URLs
	APIGroup   string // "" for core, "rbac.authorization.k8s.io", ...
	Version    string // the served version: "v1", "v1alpha1"
	Namespaced bool
	// Generic kinds are stored as *corev1.Unstructured (metadata, and the
	// rest of the object as its Kubernetes JSON); the others have a proto
	// message of their own.
	Generic bool
	// ShortNames and Categories are the kind's names in discovery, as
	// kube-apiserver lists them ("deploy"; "all").
	ShortNames []string
	Categories []string
	// Subresources are the subresources served besides the object
	// ("status", "scale", "approval").
	Subresources []string
	prefix       string // store key prefix, ending in '/'
	newFn        func() Object
	// replaceable kinds were registered with Replace (a
	// CustomResourceDefinition's): Replace and Unregister may change or
	// remove them; the others are there for the process's life.
	replaceable bool
}

// New returns an empty object of the kind (for a generic kind, an
// Unstructured with its apiVersion and kind).
func (k Kind) New() Object { return k.newFn() }

// APIVersion is the kind's apiVersion ("v1", "apps/v1").
func (k Kind) APIVersion() string {
	if k.APIGroup == "" {
		return k.Version
	}
	return k.APIGroup + "/" + k.Version
}

// Qualified is the kind's resource qualified by its group, as kubectl
// names it ("deployments.apps"; "pods" for the core group):
// KindForResource resolves it whatever other group has a resource of
// that name.
func (k Kind) Qualified() string {
	if k.APIGroup == "" {
		return k.Resource
	}
	return k.Resource + "." + k.APIGroup
}

// Replaceable reports whether k was registered by Replace (a
// CustomResourceDefinition's kind), so that it may change or go.
func (k Kind) Replaceable() bool { return k.replaceable }

// HasSubresource reports whether sub is one of the kind's subresources.
func (k Kind) HasSubresource(sub string) bool { return slices.Contains(k.Subresources, sub) }

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

// The stored kinds with a proto message of their own. Keys follow
// Kubernetes' etcd layout so that its users recognise them (nodes are
// still "minions" there).
var (
	Pods                = newKind("Pod", "pods", "", true, "/registry/pods/", func() Object { return &corev1.Pod{} }, "po")
	Nodes               = newKind("Node", "nodes", "", false, "/registry/minions/", func() Object { return &corev1.Node{} }, "no")
	Services            = newKind("Service", "services", "", true, "/registry/services/specs/", func() Object { return &corev1.Service{} }, "svc")
	EndpointSlices      = newKind("EndpointSlice", "endpointslices", "discovery.k8s.io", true, "/registry/endpointslices/", func() Object { return &corev1.EndpointSlice{} })
	Endpoints           = newKind("Endpoints", "endpoints", "", true, "/registry/services/endpoints/", func() Object { return &corev1.Endpoints{} }, "ep")
	Namespaces          = newKind("Namespace", "namespaces", "", false, "/registry/namespaces/", func() Object { return &corev1.Namespace{} }, "ns")
	ServiceAccounts     = newKind("ServiceAccount", "serviceaccounts", "", true, "/registry/serviceaccounts/", func() Object { return &corev1.ServiceAccount{} }, "sa")
	ConfigMaps          = newKind("ConfigMap", "configmaps", "", true, "/registry/configmaps/", func() Object { return &corev1.ConfigMap{} }, "cm")
	Secrets             = newKind("Secret", "secrets", "", true, "/registry/secrets/", func() Object { return &corev1.Secret{} })
	Roles               = newKind("Role", "roles", "rbac.authorization.k8s.io", true, "/registry/roles/", func() Object { return &corev1.Role{} })
	ClusterRoles        = newKind("ClusterRole", "clusterroles", "rbac.authorization.k8s.io", false, "/registry/clusterroles/", func() Object { return &corev1.ClusterRole{} })
	RoleBindings        = newKind("RoleBinding", "rolebindings", "rbac.authorization.k8s.io", true, "/registry/rolebindings/", func() Object { return &corev1.RoleBinding{} })
	ClusterRoleBindings = newKind("ClusterRoleBinding", "clusterrolebindings", "rbac.authorization.k8s.io", false, "/registry/clusterrolebindings/", func() Object { return &corev1.ClusterRoleBinding{} })
	Events              = newKind("Event", "events", "", true, "/registry/events/", func() Object { return &corev1.Event{} }, "ev")
	LimitRanges         = newKind("LimitRange", "limitranges", "", true, "/registry/limitranges/", func() Object { return &corev1.LimitRange{} }, "limits")
	PriorityClasses     = newKind("PriorityClass", "priorityclasses", "scheduling.k8s.io", false, "/registry/priorityclasses/", func() Object { return &corev1.PriorityClass{} }, "pc")
	NodeAllocations     = newKind("NodeAllocation", "nodeallocations", "podflow.io", false, "/registry/podflow.io/nodeallocations/", func() Object { return &corev1.NodeAllocation{} })
)

// GenericKind describes a kind registered as data (Register): stored as
// *corev1.Unstructured under Prefix, which ends in '/'.
type GenericKind struct {
	Group, Version, Kind, Resource string
	Namespaced                     bool
	Prefix                         string
	ShortNames, Categories         []string
	Subresources                   []string
}

// The generic built-in kinds: every one that kube-apiserver serves and
// podflow stores as data (their API semantics come from kube-apiserver's
// own strategies, services/registry). Prefixes are kube-apiserver's etcd
// keys (k8s.io/kubernetes test/integration/etcd/data.go).
var (
	Deployments                       = mustRegister(GenericKind{Group: "apps", Version: "v1", Kind: "Deployment", Resource: "deployments", Namespaced: true, Prefix: "/registry/deployments/", ShortNames: []string{"deploy"}, Categories: all, Subresources: statusScale})
	ReplicaSets                       = mustRegister(GenericKind{Group: "apps", Version: "v1", Kind: "ReplicaSet", Resource: "replicasets", Namespaced: true, Prefix: "/registry/replicasets/", ShortNames: []string{"rs"}, Categories: all, Subresources: statusScale})
	StatefulSets                      = mustRegister(GenericKind{Group: "apps", Version: "v1", Kind: "StatefulSet", Resource: "statefulsets", Namespaced: true, Prefix: "/registry/statefulsets/", ShortNames: []string{"sts"}, Categories: all, Subresources: statusScale})
	DaemonSets                        = mustRegister(GenericKind{Group: "apps", Version: "v1", Kind: "DaemonSet", Resource: "daemonsets", Namespaced: true, Prefix: "/registry/daemonsets/", ShortNames: []string{"ds"}, Categories: all, Subresources: status})
	ControllerRevisions               = mustRegister(GenericKind{Group: "apps", Version: "v1", Kind: "ControllerRevision", Resource: "controllerrevisions", Namespaced: true, Prefix: "/registry/controllerrevisions/"})
	Jobs                              = mustRegister(GenericKind{Group: "batch", Version: "v1", Kind: "Job", Resource: "jobs", Namespaced: true, Prefix: "/registry/jobs/", Categories: all, Subresources: status})
	CronJobs                          = mustRegister(GenericKind{Group: "batch", Version: "v1", Kind: "CronJob", Resource: "cronjobs", Namespaced: true, Prefix: "/registry/cronjobs/", ShortNames: []string{"cj"}, Categories: all, Subresources: status})
	PodDisruptionBudgets              = mustRegister(GenericKind{Group: "policy", Version: "v1", Kind: "PodDisruptionBudget", Resource: "poddisruptionbudgets", Namespaced: true, Prefix: "/registry/poddisruptionbudgets/", ShortNames: []string{"pdb"}, Subresources: status})
	ReplicationControllers            = mustRegister(GenericKind{Version: "v1", Kind: "ReplicationController", Resource: "replicationcontrollers", Namespaced: true, Prefix: "/registry/controllers/", ShortNames: []string{"rc"}, Categories: all, Subresources: statusScale})
	PodTemplates                      = mustRegister(GenericKind{Version: "v1", Kind: "PodTemplate", Resource: "podtemplates", Namespaced: true, Prefix: "/registry/podtemplates/"})
	ResourceQuotas                    = mustRegister(GenericKind{Version: "v1", Kind: "ResourceQuota", Resource: "resourcequotas", Namespaced: true, Prefix: "/registry/resourcequotas/", ShortNames: []string{"quota"}, Subresources: status})
	PersistentVolumes                 = mustRegister(GenericKind{Version: "v1", Kind: "PersistentVolume", Resource: "persistentvolumes", Prefix: "/registry/persistentvolumes/", ShortNames: []string{"pv"}, Subresources: status})
	PersistentVolumeClaims            = mustRegister(GenericKind{Version: "v1", Kind: "PersistentVolumeClaim", Resource: "persistentvolumeclaims", Namespaced: true, Prefix: "/registry/persistentvolumeclaims/", ShortNames: []string{"pvc"}, Subresources: status})
	Leases                            = mustRegister(GenericKind{Group: "coordination.k8s.io", Version: "v1", Kind: "Lease", Resource: "leases", Namespaced: true, Prefix: "/registry/leases/"})
	RuntimeClasses                    = mustRegister(GenericKind{Group: "node.k8s.io", Version: "v1", Kind: "RuntimeClass", Resource: "runtimeclasses", Prefix: "/registry/runtimeclasses/"})
	MutatingWebhookConfigurations     = mustRegister(GenericKind{Group: admissionGroup, Version: "v1", Kind: "MutatingWebhookConfiguration", Resource: "mutatingwebhookconfigurations", Prefix: "/registry/mutatingwebhookconfigurations/", Categories: apiExtensions})
	ValidatingWebhookConfigurations   = mustRegister(GenericKind{Group: admissionGroup, Version: "v1", Kind: "ValidatingWebhookConfiguration", Resource: "validatingwebhookconfigurations", Prefix: "/registry/validatingwebhookconfigurations/", Categories: apiExtensions})
	ValidatingAdmissionPolicies       = mustRegister(GenericKind{Group: admissionGroup, Version: "v1", Kind: "ValidatingAdmissionPolicy", Resource: "validatingadmissionpolicies", Prefix: "/registry/validatingadmissionpolicies/", Categories: apiExtensions, Subresources: status})
	ValidatingAdmissionPolicyBindings = mustRegister(GenericKind{Group: admissionGroup, Version: "v1", Kind: "ValidatingAdmissionPolicyBinding", Resource: "validatingadmissionpolicybindings", Prefix: "/registry/validatingadmissionpolicybindings/", Categories: apiExtensions})
	CustomResourceDefinitions         = mustRegister(GenericKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition", Resource: "customresourcedefinitions", Prefix: "/registry/apiextensions.k8s.io/customresourcedefinitions/", ShortNames: []string{"crd", "crds"}, Categories: apiExtensions, Subresources: status})
	Ingresses                         = mustRegister(GenericKind{Group: networkingGroup, Version: "v1", Kind: "Ingress", Resource: "ingresses", Namespaced: true, Prefix: "/registry/ingress/", ShortNames: []string{"ing"}, Subresources: status})
	IngressClasses                    = mustRegister(GenericKind{Group: networkingGroup, Version: "v1", Kind: "IngressClass", Resource: "ingressclasses", Prefix: "/registry/ingressclasses/"})
	NetworkPolicies                   = mustRegister(GenericKind{Group: networkingGroup, Version: "v1", Kind: "NetworkPolicy", Resource: "networkpolicies", Namespaced: true, Prefix: "/registry/networkpolicies/", ShortNames: []string{"netpol"}})
	ServiceCIDRs                      = mustRegister(GenericKind{Group: networkingGroup, Version: "v1", Kind: "ServiceCIDR", Resource: "servicecidrs", Prefix: "/registry/servicecidrs/", Subresources: status})
	IPAddresses                       = mustRegister(GenericKind{Group: networkingGroup, Version: "v1", Kind: "IPAddress", Resource: "ipaddresses", Prefix: "/registry/ipaddresses/", ShortNames: []string{"ip"}})
	StorageClasses                    = mustRegister(GenericKind{Group: storageGroup, Version: "v1", Kind: "StorageClass", Resource: "storageclasses", Prefix: "/registry/storageclasses/", ShortNames: []string{"sc"}})
	CSIDrivers                        = mustRegister(GenericKind{Group: storageGroup, Version: "v1", Kind: "CSIDriver", Resource: "csidrivers", Prefix: "/registry/csidrivers/"})
	CSINodes                          = mustRegister(GenericKind{Group: storageGroup, Version: "v1", Kind: "CSINode", Resource: "csinodes", Prefix: "/registry/csinodes/"})
	VolumeAttachments                 = mustRegister(GenericKind{Group: storageGroup, Version: "v1", Kind: "VolumeAttachment", Resource: "volumeattachments", Prefix: "/registry/volumeattachments/", Subresources: status})
	CSIStorageCapacities              = mustRegister(GenericKind{Group: storageGroup, Version: "v1", Kind: "CSIStorageCapacity", Resource: "csistoragecapacities", Namespaced: true, Prefix: "/registry/csistoragecapacities/"})
	CertificateSigningRequests        = mustRegister(GenericKind{Group: "certificates.k8s.io", Version: "v1", Kind: "CertificateSigningRequest", Resource: "certificatesigningrequests", Prefix: "/registry/certificatesigningrequests/", ShortNames: []string{"csr"}, Subresources: []string{"status", "approval"}})
	FlowSchemas                       = mustRegister(GenericKind{Group: flowcontrolGroup, Version: "v1", Kind: "FlowSchema", Resource: "flowschemas", Prefix: "/registry/flowschemas/", Subresources: status})
	PriorityLevelConfigurations       = mustRegister(GenericKind{Group: flowcontrolGroup, Version: "v1", Kind: "PriorityLevelConfiguration", Resource: "prioritylevelconfigurations", Prefix: "/registry/prioritylevelconfigurations/", Subresources: status})
	HorizontalPodAutoscalers          = mustRegister(GenericKind{Group: "autoscaling", Version: "v2", Kind: "HorizontalPodAutoscaler", Resource: "horizontalpodautoscalers", Namespaced: true, Prefix: "/registry/horizontalpodautoscalers/", ShortNames: []string{"hpa"}, Categories: all, Subresources: status})
	APIServices                       = mustRegister(GenericKind{Group: "apiregistration.k8s.io", Version: "v1", Kind: "APIService", Resource: "apiservices", Prefix: "/registry/apiregistration.k8s.io/apiservices/", Categories: apiExtensions, Subresources: status})
)

const (
	admissionGroup   = "admissionregistration.k8s.io"
	networkingGroup  = "networking.k8s.io"
	storageGroup     = "storage.k8s.io"
	flowcontrolGroup = "flowcontrol.apiserver.k8s.io"
)

var (
	all           = []string{"all"} // kubectl get all
	apiExtensions = []string{"api-extensions"}
	status        = []string{"status"}
	statusScale   = []string{"status", "scale"}
)

// registry is every stored kind. Built-in kinds are registered at package
// initialisation; generic kinds may also be registered at run time
// (Register), so every read takes the lock.
var registry = struct {
	mu          sync.RWMutex
	byMessage   map[protoreflect.FullName]Kind // kinds with a proto of their own
	byGK        map[[2]string]Kind             // generic kinds by group and kind
	byResource  map[string]Kind                // by resource name: the first registered
	byQualified map[string]Kind                // by resource.group
	byPrefix    map[string]Kind
	kinds       []Kind
	gen         atomic.Uint64
}{
	byMessage: map[protoreflect.FullName]Kind{}, byGK: map[[2]string]Kind{}, byResource: map[string]Kind{},
	byQualified: map[string]Kind{}, byPrefix: map[string]Kind{},
}

// shortNames maps short names to resources, lower case, first wins
// (guarded by registry.mu).
var shortNames = map[string]string{"limits": "limitranges", "endpointslice": "endpointslices", "ep": "endpointslices"}

func newKind(name, resource, group string, namespaced bool, prefix string, newFn func() Object, short ...string) Kind {
	k := Kind{Name: name, Resource: resource, APIGroup: group, Version: "v1", Namespaced: namespaced, ShortNames: short,
		prefix: prefix, newFn: newFn}
	if name == "Pod" || name == "Service" {
		k.Categories = all
	}
	if err := add(k, newFn().ProtoReflect().Descriptor().FullName()); err != nil {
		panic(err)
	}
	return k
}

func mustRegister(g GenericKind) Kind {
	k, err := Register(g)
	if err != nil {
		panic(err)
	}
	return k
}

// Register adds a generic kind (a CustomResourceDefinition's, at run
// time; the built-in generic kinds at initialisation). Its resource must
// be new within its group, its prefix must share no beginning with
// another kind's, and its names must be lower case. It is safe for
// concurrent use with every other function of the package.
func Register(g GenericKind) (Kind, error) {
	k, err := newGeneric(g)
	if err != nil {
		return Kind{}, err
	}
	return k, add(k, "")
}

// newGeneric checks g and makes its Kind.
func newGeneric(g GenericKind) (Kind, error) {
	switch {
	case g.Kind == "" || g.Resource == "" || g.Version == "":
		return Kind{}, fmt.Errorf("%w: generic kind %+v needs a kind, resource and version", ErrInvalid, g)
	case g.Resource != strings.ToLower(g.Resource):
		return Kind{}, fmt.Errorf("%w: resource %q is not lower case", ErrInvalid, g.Resource)
	case !strings.HasPrefix(g.Prefix, "/registry/") || !strings.HasSuffix(g.Prefix, "/"):
		return Kind{}, fmt.Errorf("%w: store prefix %q must start with /registry/ and end in /", ErrInvalid, g.Prefix)
	}
	apiVersion := g.Version
	if g.Group != "" {
		apiVersion = g.Group + "/" + g.Version
	}
	k := Kind{Name: g.Kind, Resource: g.Resource, APIGroup: g.Group, Version: g.Version, Namespaced: g.Namespaced, Generic: true,
		ShortNames: g.ShortNames, Categories: g.Categories, Subresources: g.Subresources, prefix: g.Prefix}
	k.newFn = func() Object { return &corev1.Unstructured{ApiVersion: apiVersion, Kind: g.Kind} }
	return k, nil
}

// CustomResourcePrefix is the store prefix of a custom resource's objects,
// kube-apiserver's: /registry/<group>/<resource>/.
func CustomResourcePrefix(group, resource string) string {
	return "/registry/" + group + "/" + resource + "/"
}

// Replace registers a generic kind that may later change or go (a
// CustomResourceDefinition's: its storage version, names and
// subresources change with the definition): a kind registered by Replace
// with the same group and kind, or the same resource and group, is
// replaced; any other clash is refused as Register refuses it. It is safe
// for concurrent use.
func Replace(g GenericKind) (Kind, error) {
	r := &registry
	r.mu.Lock()
	defer r.mu.Unlock()
	var old []Kind
	for _, k := range r.kinds {
		if k.APIGroup == g.Group && (k.Name == g.Kind || k.Resource == g.Resource) {
			if !k.replaceable {
				return Kind{}, fmt.Errorf("%w: %s is a built-in kind", ErrInvalid, k.Qualified())
			}
			old = append(old, k)
		}
	}
	for _, k := range old {
		removeLocked(k)
	}
	k, err := newGeneric(g)
	if err == nil {
		k.replaceable = true
		err = addLocked(k, "")
	}
	if err != nil {
		for _, k := range old { // put back what was there
			_ = addLocked(k, "")
		}
		return Kind{}, err
	}
	return k, nil
}

// Unregister removes the kind of group and kind registered by Replace; it
// reports whether there was one. It is safe for concurrent use.
func Unregister(group, kind string) bool {
	r := &registry
	r.mu.Lock()
	defer r.mu.Unlock()
	k, ok := r.byGK[[2]string{group, kind}]
	if !ok || !k.replaceable {
		return false
	}
	removeLocked(k)
	return true
}

// removeLocked drops k from every index (registry.mu held).
func removeLocked(k Kind) {
	r := &registry
	delete(r.byGK, [2]string{k.APIGroup, k.Name})
	delete(r.byQualified, k.Qualified())
	delete(r.byPrefix, k.prefix)
	r.kinds = slices.DeleteFunc(r.kinds, func(o Kind) bool { return o.Qualified() == k.Qualified() })
	if cur, ok := r.byResource[k.Resource]; ok && cur.Qualified() == k.Qualified() {
		delete(r.byResource, k.Resource)
		for _, o := range r.kinds { // the next registered of that name
			if o.Resource == k.Resource {
				r.byResource[k.Resource] = o
				break
			}
		}
	}
	for s, q := range shortNames {
		if q == k.Qualified() {
			delete(shortNames, s)
		}
	}
	r.gen.Add(1)
}

func add(k Kind, msg protoreflect.FullName) error {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	return addLocked(k, msg)
}

// addLocked indexes k (registry.mu held).
func addLocked(k Kind, msg protoreflect.FullName) error {
	r := &registry
	if _, dup := r.byQualified[k.Qualified()]; dup {
		return fmt.Errorf("%w: %s is registered already", ErrInvalid, k.Qualified())
	}
	if k.Generic {
		if _, dup := r.byGK[[2]string{k.APIGroup, k.Name}]; dup {
			return fmt.Errorf("%w: kind %s of group %q is registered already", ErrInvalid, k.Name, k.APIGroup)
		}
	}
	for p, other := range r.byPrefix {
		if strings.HasPrefix(p, k.prefix) || strings.HasPrefix(k.prefix, p) {
			return fmt.Errorf("%w: store prefix %q of %s overlaps %q of %s", ErrInvalid, k.prefix, k.Qualified(), p, other.Qualified())
		}
	}
	if k.Generic {
		r.byGK[[2]string{k.APIGroup, k.Name}] = k
	} else {
		r.byMessage[msg] = k
	}
	if _, ok := r.byResource[k.Resource]; !ok {
		r.byResource[k.Resource] = k
	}
	r.byQualified[k.Qualified()] = k
	r.byPrefix[k.prefix] = k
	for _, s := range k.ShortNames {
		if _, ok := shortNames[s]; !ok {
			shortNames[s] = k.Qualified()
		}
	}
	r.kinds = append(r.kinds, k)
	r.gen.Add(1)
	return nil
}

// Kinds lists every stored kind, in the order they were registered.
func Kinds() []Kind {
	registry.mu.RLock()
	defer registry.mu.RUnlock()
	return slices.Clone(registry.kinds)
}

// Generation counts registrations: a caller that derives tables from
// Kinds rebuilds them when it changed.
func Generation() uint64 { return registry.gen.Load() }

// KindOf returns the kind of a stored object: by its message, or for an
// Unstructured by the group of its apiVersion and its kind.
func KindOf(m proto.Message) (Kind, error) {
	registry.mu.RLock()
	defer registry.mu.RUnlock()
	if u, ok := m.(*corev1.Unstructured); ok {
		group, _, _ := strings.Cut(u.GetApiVersion(), "/")
		if !strings.Contains(u.GetApiVersion(), "/") {
			group = ""
		}
		k, ok := registry.byGK[[2]string{group, u.GetKind()}]
		if !ok {
			return Kind{}, fmt.Errorf("%w: %s %s", ErrUnknownKind, u.GetApiVersion(), u.GetKind())
		}
		return k, nil
	}
	k, ok := registry.byMessage[m.ProtoReflect().Descriptor().FullName()]
	if !ok {
		return Kind{}, fmt.Errorf("%w: %s", ErrUnknownKind, m.ProtoReflect().Descriptor().FullName())
	}
	return k, nil
}

// KindForResource returns the kind of a resource name ("pods", "pod",
// "Pod", "po" and the other kubectl short names), optionally qualified by
// its group ("deployments.apps", "deploy.apps").
func KindForResource(r string) (Kind, error) {
	registry.mu.RLock()
	defer registry.mu.RUnlock()
	r = strings.ToLower(r)
	if k, ok := registry.byQualified[r]; ok {
		return k, nil
	}
	name, group, qualified := strings.Cut(r, ".")
	match := func(k Kind) bool { return !qualified || k.APIGroup == group }
	if k, ok := registry.byResource[name]; ok && match(k) {
		return k, nil
	}
	if k, ok := registry.byResource[name+"s"]; ok && match(k) {
		return k, nil
	}
	if q, ok := shortNames[name]; ok {
		if k, ok := registry.byQualified[q]; ok && match(k) {
			return k, nil
		}
		if k, ok := registry.byResource[q]; ok && match(k) {
			return k, nil
		}
	}
	for _, k := range registry.kinds {
		if (strings.ToLower(k.Name) == name || k.Resource == name || slices.Contains(k.ShortNames, name)) && match(k) {
			return k, nil
		}
	}
	return Kind{}, fmt.Errorf("%w: %q", ErrUnknownKind, r)
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
