package apiserver

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"google.golang.org/protobuf/proto"
	k8scorev1 "k8s.io/api/core/v1"
	k8sdiscoveryv1 "k8s.io/api/discovery/v1"
	k8seventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/podflow/podflow/services/crd"
	"github.com/podflow/podflow/services/manifest"
	"github.com/podflow/podflow/services/objects"
)

// resource is one REST resource the server serves.
type resource struct {
	group, version string
	name           string // "pods"
	kind           string // "Pod"
	namespaced     bool
	shortNames     []string
	categories     []string
	verbs          []string
	store          objects.Kind // where it lives; zero for virtual resources
	readOnly       bool         // a view of another resource (events.k8s.io)
	metrics        bool         // metrics.k8s.io: read from the nodes (metrics.go)
	// view converts the stored object's Kubernetes form for this
	// resource's group version (events.k8s.io/v1 from core/v1 Events).
	view func(runtime.Object) (runtime.Object, error)
	// unview converts a written body of this resource's group version to
	// the stored kind's Kubernetes form (events.k8s.io/v1 to core/v1), so
	// that a view takes writes; nil: a view is read-only.
	unview func(body []byte) ([]byte, error)
	// cr is the served version of a custom resource (customresources.go);
	// nil for the built-in kinds.
	cr *crd.Version
}

func (r *resource) groupVersion() string {
	if r.group == "" {
		return r.version
	}
	return r.group + "/" + r.version
}

// cacheKey names r's Kubernetes forms in caches: its group version, and
// for a custom resource the revision of its definition too (a new
// default or schema changes what a stored object reads as).
func (r *resource) cacheKey() string {
	if r.cr != nil {
		return r.groupVersion() + "@" + strconv.FormatInt(r.cr.Definition().Revision, 10)
	}
	return r.groupVersion()
}

// generic reports whether r is a generic kind's (stored as Unstructured,
// served with kube-apiserver's strategies, printers and subresources).
func (r *resource) generic() bool { return r.store.Generic && !r.readOnly }

var (
	crudVerbs = []string{"create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"}
	readVerbs = []string{"get", "list", "watch"}
)

// The served resources, by group version then resource name. They are
// the kinds objects registered when the package was initialised (a kind
// registered later is not served).
var resources = map[string]map[string]*resource{}

// kubeGroupOrder is kube-apiserver's order of /apis; groups it does not
// name follow in alphabetical order, then podflow's own and metrics.
var kubeGroupOrder = []string{"apiregistration.k8s.io", "apps", "events.k8s.io", "authentication.k8s.io", "authorization.k8s.io",
	"autoscaling", "batch", "certificates.k8s.io", "networking.k8s.io", "policy", "rbac.authorization.k8s.io", "storage.k8s.io",
	"admissionregistration.k8s.io", "apiextensions.k8s.io", "scheduling.k8s.io", "coordination.k8s.io", "node.k8s.io",
	"discovery.k8s.io", "flowcontrol.apiserver.k8s.io"}

// groupOrder is the order of /apis (core first in /api): every served
// group.
var groupOrder []string

// groupVersions maps each served group to its one version.
var groupVersions = map[string]string{}

func addResource(r *resource) {
	gv := r.groupVersion()
	if resources[gv] == nil {
		resources[gv] = map[string]*resource{}
	}
	resources[gv][r.name] = r
	groupVersions[r.group] = r.version
}

func init() {
	for _, k := range objects.Kinds() {
		if k.Name == objects.NodeAllocations.Name {
			continue // internal accounting, not an API
		}
		addResource(&resource{group: k.APIGroup, version: k.Version, name: k.Resource, kind: k.Name,
			namespaced: k.Namespaced, shortNames: k.ShortNames, categories: k.Categories, verbs: crudVerbs, store: k})
	}
	addResource(&resource{group: "events.k8s.io", version: "v1", name: "events", kind: "Event", namespaced: true,
		shortNames: []string{"ev"}, verbs: crudVerbs, store: objects.Events, readOnly: true, view: eventsV1, unview: eventsFromV1})
	addResource(&resource{group: "authentication.k8s.io", version: "v1", name: "selfsubjectreviews",
		kind: "SelfSubjectReview", verbs: []string{"create"}})
	addResource(&resource{group: "authentication.k8s.io", version: "v1", name: "tokenreviews",
		kind: "TokenReview", verbs: []string{"create"}})
	addResource(&resource{group: "authorization.k8s.io", version: "v1", name: "subjectaccessreviews",
		kind: "SubjectAccessReview", verbs: []string{"create"}})
	addResource(&resource{group: "authorization.k8s.io", version: "v1", name: "localsubjectaccessreviews",
		kind: "LocalSubjectAccessReview", namespaced: true, verbs: []string{"create"}})
	addResource(&resource{group: "authorization.k8s.io", version: "v1", name: "selfsubjectaccessreviews",
		kind: "SelfSubjectAccessReview", verbs: []string{"create"}})
	addResource(&resource{group: "authorization.k8s.io", version: "v1", name: "selfsubjectrulesreviews",
		kind: "SelfSubjectRulesReview", verbs: []string{"create"}})
	// metrics.k8s.io: the nodes' readings (metrics.go), not stored.
	addResource(&resource{group: "metrics.k8s.io", version: "v1beta1", name: "pods", kind: "PodMetrics", namespaced: true,
		verbs: []string{"get", "list"}, readOnly: true, metrics: true})
	addResource(&resource{group: "metrics.k8s.io", version: "v1beta1", name: "nodes", kind: "NodeMetrics",
		verbs: []string{"get", "list"}, readOnly: true, metrics: true})
	groupOrder = orderGroups(groupVersions)
}

// orderGroups lists the named groups of served in kube-apiserver's order.
func orderGroups(served map[string]string) []string {
	var out, rest []string
	for _, g := range kubeGroupOrder {
		if _, ok := served[g]; ok {
			out = append(out, g)
		}
	}
	for g := range served {
		if g != "" && !slices.Contains(kubeGroupOrder, g) && g != "metrics.k8s.io" {
			rest = append(rest, g)
		}
	}
	sort.Strings(rest)
	out = append(out, rest...)
	if _, ok := served["metrics.k8s.io"]; ok {
		out = append(out, "metrics.k8s.io")
	}
	return out
}

// lookupResource finds a resource by group version and name.
func lookupResource(gv, name string) *resource {
	return resources[gv][name]
}

// subresourceVerbs are the verbs of a generic kind's subresources.
var subresourceVerbs = []string{"get", "patch", "update"}

// subresources are r's subresources as discovery lists them: each one's
// name ("deployments/scale"), the kind it answers with and its verbs.
func (r *resource) subresources() []metav1.APIResource {
	var out []metav1.APIResource
	if r.name == "pods" && r.group == "" {
		return []metav1.APIResource{
			{Name: "pods/status", Namespaced: true, Kind: "Pod", Verbs: []string{"get"}},
			{Name: "pods/log", Namespaced: true, Kind: "Pod", Verbs: []string{"get"}},
			{Name: "pods/exec", Namespaced: true, Kind: "PodExecOptions", Verbs: []string{"create", "get"}},
			{Name: "pods/attach", Namespaced: true, Kind: "PodAttachOptions", Verbs: []string{"create", "get"}},
			{Name: "pods/ephemeralcontainers", Namespaced: true, Kind: "Pod", Verbs: []string{"get", "patch", "update"}},
			{Name: "pods/eviction", Namespaced: true, Group: "policy", Version: "v1", Kind: "Eviction", Verbs: []string{"create"}},
			{Name: "pods/proxy", Namespaced: true, Kind: "PodProxyOptions", Verbs: proxyVerbs},
		}
	}
	if r.cr != nil {
		return r.crSubresources()
	}
	if r.name == "services" && r.group == "" {
		return []metav1.APIResource{{Name: "services/proxy", Namespaced: true, Kind: "ServiceProxyOptions", Verbs: proxyVerbs}}
	}
	if r.name == "nodes" && r.group == "" {
		return []metav1.APIResource{{Name: "nodes/status", Kind: "Node", Verbs: []string{"get", "patch", "update"}}}
	}
	if r.name == "namespaces" && r.group == "" {
		return []metav1.APIResource{
			{Name: "namespaces/finalize", Kind: "Namespace", Verbs: []string{"update"}},
			{Name: "namespaces/status", Kind: "Namespace", Verbs: []string{"get", "patch", "update"}},
		}
	}
	if !r.generic() {
		return nil
	}
	for _, sub := range r.store.Subresources {
		ar := metav1.APIResource{Name: r.name + "/" + sub, Namespaced: r.namespaced, Kind: r.kind, Verbs: subresourceVerbs}
		if sub == "scale" {
			ar.Group, ar.Version, ar.Kind = "autoscaling", "v1", "Scale"
		}
		out = append(out, ar)
	}
	return out
}

// apiResourceList is the discovery document of one group version.
func apiResourceList(gv string) *metav1.APIResourceList {
	l := &metav1.APIResourceList{TypeMeta: metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"}, GroupVersion: gv}
	names := make([]string, 0, len(resources[gv]))
	for n := range resources[gv] {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		r := resources[gv][n]
		l.APIResources = append(l.APIResources, metav1.APIResource{
			Name: r.name, SingularName: strings.ToLower(r.kind), Namespaced: r.namespaced, Kind: r.kind,
			Verbs: r.verbs, ShortNames: r.shortNames, Categories: r.categories,
		})
		l.APIResources = append(l.APIResources, r.subresources()...)
	}
	return l
}

func apiGroup(group string) metav1.APIGroup {
	version := groupVersions[group]
	if version == "" {
		version = "v1"
	}
	gvd := metav1.GroupVersionForDiscovery{GroupVersion: group + "/" + version, Version: version}
	return metav1.APIGroup{TypeMeta: metav1.TypeMeta{Kind: "APIGroup", APIVersion: "v1"}, Name: group,
		Versions: []metav1.GroupVersionForDiscovery{gvd}, PreferredVersion: gvd}
}

func apiGroupList() *metav1.APIGroupList {
	l := &metav1.APIGroupList{TypeMeta: metav1.TypeMeta{Kind: "APIGroupList", APIVersion: "v1"}}
	for _, g := range groupOrder {
		l.Groups = append(l.Groups, apiGroup(g))
	}
	return l
}

// toKube converts a stored object to its Kubernetes form for r.
func (r *resource) toKube(m proto.Message) (runtime.Object, error) {
	if r.cr != nil {
		om, ok := m.(objectMessage)
		if !ok {
			return nil, fmt.Errorf("apiserver: a custom resource stored as %T", m)
		}
		return r.crToKube(om)
	}
	obj, err := manifest.ToKube(m)
	if err != nil {
		return nil, err
	}
	defaults(obj)
	if r.view != nil {
		return r.view(obj)
	}
	return obj, nil
}

// defaults applies the API server's defaulting that clients rely on and
// podflow's stored objects may lack (kubectl describe service dereferences
// every EndpointSlice port's name).
func defaults(o runtime.Object) {
	// kube's SetDefaults_Secret and SetDefaults_NamespaceStatus (field
	// selectors read these values).
	switch o := o.(type) {
	case *k8scorev1.Secret:
		if o.Type == "" {
			o.Type = k8scorev1.SecretTypeOpaque
		}
	case *k8scorev1.Namespace:
		if o.Status.Phase == "" {
			o.Status.Phase = k8scorev1.NamespaceActive
		}
	}
	if sl, ok := o.(*k8sdiscoveryv1.EndpointSlice); ok {
		for i := range sl.Ports {
			if sl.Ports[i].Name == nil {
				sl.Ports[i].Name = new(string)
			}
			if sl.Ports[i].Protocol == nil {
				tcp := k8scorev1.ProtocolTCP
				sl.Ports[i].Protocol = &tcp
			}
		}
	}
}

// eventsFromV1 converts an events.k8s.io/v1 Event's JSON to core/v1, as
// the API server's conversion (Convert_v1_Event_To_core_Event) does.
func eventsFromV1(body []byte) ([]byte, error) {
	var in k8seventsv1.Event
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, err
	}
	out := &k8scorev1.Event{
		TypeMeta:            metav1.TypeMeta{Kind: "Event", APIVersion: "v1"},
		ObjectMeta:          in.ObjectMeta,
		InvolvedObject:      in.Regarding,
		Reason:              in.Reason,
		Message:             in.Note,
		Source:              in.DeprecatedSource,
		FirstTimestamp:      in.DeprecatedFirstTimestamp,
		LastTimestamp:       in.DeprecatedLastTimestamp,
		Count:               in.DeprecatedCount,
		Type:                in.Type,
		EventTime:           in.EventTime,
		Related:             in.Related,
		Action:              in.Action,
		ReportingController: in.ReportingController,
		ReportingInstance:   in.ReportingInstance,
	}
	if in.Series != nil {
		out.Series = &k8scorev1.EventSeries{Count: in.Series.Count, LastObservedTime: in.Series.LastObservedTime}
	}
	return json.Marshal(out)
}

// eventsV1 converts a core/v1 Event to events.k8s.io/v1, as the API
// server's conversion does.
func eventsV1(o runtime.Object) (runtime.Object, error) {
	e, ok := o.(*k8scorev1.Event)
	if !ok {
		return nil, fmt.Errorf("eventsV1: %T is not an Event", o)
	}
	out := &k8seventsv1.Event{
		TypeMeta:                 metav1.TypeMeta{Kind: "Event", APIVersion: "events.k8s.io/v1"},
		ObjectMeta:               e.ObjectMeta,
		EventTime:                e.EventTime,
		ReportingController:      e.ReportingController,
		ReportingInstance:        e.ReportingInstance,
		Action:                   e.Action,
		Reason:                   e.Reason,
		Regarding:                e.InvolvedObject,
		Related:                  e.Related,
		Note:                     e.Message,
		Type:                     e.Type,
		DeprecatedSource:         e.Source,
		DeprecatedFirstTimestamp: e.FirstTimestamp,
		DeprecatedLastTimestamp:  e.LastTimestamp,
		DeprecatedCount:          e.Count,
	}
	if out.ReportingController == "" {
		out.ReportingController = e.Source.Component
	}
	if out.ReportingInstance == "" {
		out.ReportingInstance = e.Source.Host
	}
	if e.Series != nil {
		out.Series = &k8seventsv1.EventSeries{Count: e.Series.Count, LastObservedTime: e.Series.LastObservedTime}
	}
	return out, nil
}
