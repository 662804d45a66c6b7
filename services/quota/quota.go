package quota

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"time"

	k8scorev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/admission/plugin/resourcequota"
	"k8s.io/apiserver/pkg/authentication/user"
	kquota "k8s.io/apiserver/pkg/quota/v1"
	"k8s.io/apiserver/pkg/quota/v1/generic"
	"k8s.io/client-go/tools/cache"
	"k8s.io/kubernetes/pkg/quota/v1/evaluator/core"
	"k8s.io/utils/clock"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/eventsv1"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/manifest"
	"github.com/podflow/podflow/services/objects"
)

// Operations of Admit, as admission.Operation names them.
const (
	Create = string(admission.Create)
	Update = string(admission.Update)
)

// chargeAttempts bounds Admit's compare-and-swap retries under contention.
const chargeAttempts = 50

// legacyAliases are the quota names kube counts some kinds under besides
// count/<resource> (core's legacyObjectCountAliases).
var legacyAliases = map[schema.GroupResource]k8scorev1.ResourceName{
	{Resource: "configmaps"}:             k8scorev1.ResourceConfigMaps,
	{Resource: "resourcequotas"}:         k8scorev1.ResourceQuotas,
	{Resource: "replicationcontrollers"}: k8scorev1.ResourceReplicationControllers,
	{Resource: "secrets"}:                k8scorev1.ResourceSecrets,
}

// Admission charges ResourceQuotas as kube-apiserver's ResourceQuota
// admission plugin does. It is safe for concurrent use.
type Admission struct {
	store *objects.Store
	// reads are the namespaces' ResourceQuotas, linearizable (the charge
	// is compared against exactly the revisions read) and shared by the
	// writes of one namespace that ask at once.
	reads *objects.FreshReads[objects.Object]
}

// NewAdmission returns the quota admission over st.
func NewAdmission(st *objects.Store) *Admission {
	return &Admission{store: st, reads: objects.NewFreshReads(func(ctx context.Context, ns string) ([]objects.Object, error) {
		return List(ctx, st, objects.ResourceQuotas, ns)
	})}
}

// Admit checks the write of obj of kind (op Create, or Update with old
// the stored object) against the ResourceQuotas of obj's namespace and
// charges its usage to their status.used. It returns nil when the write
// may proceed, else kube's Status (403 Forbidden: "exceeded quota: ...",
// "failed quota: ...", "status unknown for quota: ...").
func (q *Admission) Admit(ctx context.Context, u *corev1.UserInfo, kind objects.Kind, op string, obj, old objects.Object) *corev1.Status {
	return q.admit(ctx, u, kind, op, obj, old, nil)
}

// Read returns ns's ResourceQuotas from a linearizable read of the store
// that starts after the call (shared with the other writes of ns that ask
// at once), for AdmitRead.
func (q *Admission) Read(ctx context.Context, ns string) ([]objects.Object, error) {
	return q.reads.Get(ctx, ns)
}

// AdmitRead is Admit given stored, the quotas of obj's namespace as a
// Read called after the write was asked for returned them: a caller
// overlaps that store read with its own work instead of waiting for it
// after. A charge is still compared against the revisions read (a quota
// changed since is read again). A quota created after the Read was called
// was created while the write was being admitted, concurrently with it,
// as one created just after Admit's own read would be.
func (q *Admission) AdmitRead(ctx context.Context, u *corev1.UserInfo, kind objects.Kind, op string, obj, old objects.Object, stored []objects.Object) *corev1.Status {
	if stored == nil {
		stored = []objects.Object{}
	}
	return q.admit(ctx, u, kind, op, obj, old, stored)
}

// admit is Admit, with the namespace's quotas read already when read is
// not nil.
func (q *Admission) admit(ctx context.Context, u *corev1.UserInfo, kind objects.Kind, op string, obj, old objects.Object, read []objects.Object) *corev1.Status {
	ns := obj.GetMetadata().GetNamespace()
	if !kind.Namespaced || ns == "" {
		return nil
	}
	gr := schema.GroupResource{Group: kind.APIGroup, Resource: kind.Resource}
	ev := evaluatorFor(gr, nil)
	// attrs converts obj (and old) to their Kubernetes form, and whether
	// the kind's evaluator charges this write.
	attrs := func() (admission.Attributes, *corev1.Status) {
		kobj, err := toKube(obj)
		if err != nil {
			return nil, internal(err)
		}
		var kold runtime.Object
		if old != nil {
			if kold, err = toKube(old); err != nil {
				return nil, internal(err)
			}
		}
		gvk := schema.GroupVersionKind{Group: kind.APIGroup, Version: kind.Version, Kind: kind.Name}
		a := admission.NewAttributesRecord(kobj, kold, gvk, ns, obj.GetMetadata().GetName(), gr.WithVersion(kind.Version), "",
			admission.Operation(op), nil, false, userOf(u))
		if !ev.Handles(a) {
			return nil, nil
		}
		return a, nil
	}
	var a admission.Attributes
	if op != Create {
		// Whether an update is charged depends on the objects (a pod's
		// scope, a claim's size): known before any read of the quotas.
		var st *corev1.Status
		if a, st = attrs(); a == nil {
			return st
		}
	}
	// Most namespaces have no quota, which the read says before a created
	// object (every evaluator charges creations) is converted.
	stored, err := read, error(nil)
	if stored == nil {
		if stored, err = q.reads.Get(ctx, ns); err != nil {
			return internal(err)
		}
	}
	if len(stored) == 0 {
		return nil
	}
	if a == nil {
		var st *corev1.Status
		if a, st = attrs(); a == nil {
			return st
		}
	}
	for attempt := range chargeAttempts {
		if attempt > 0 {
			if stored, err = q.reads.Get(ctx, ns); err != nil {
				return internal(err)
			}
		}
		quotas, err := kubeQuotas(stored)
		if err != nil {
			return internal(err)
		}
		if len(quotas) == 0 {
			return nil
		}
		out, err := resourcequota.CheckRequest(quotas, a, ev, nil)
		if err != nil {
			return statusOf(err)
		}
		txn := objects.Txn{}
		for i := range out {
			if kquota.Equals(out[i].Status.Used, quotas[i].Status.Used) {
				continue
			}
			next, err := FromKube(&out[i])
			if err != nil {
				return internal(err)
			}
			txn = txn.Compare(next, objects.Revision(stored[i])).Put(next)
		}
		if txn.Empty() {
			return nil
		}
		_, err = q.store.Commit(ctx, txn)
		if err == nil {
			return nil
		}
		if !errors.Is(err, raftstore.ErrConflict) {
			return internal(err)
		}
		// Another admission or the controller wrote a quota: read again.
		select {
		case <-time.After(time.Duration(1+rand.IntN(5*(attempt+1))) * time.Millisecond):
		case <-ctx.Done():
			return internal(ctx.Err())
		}
	}
	return &corev1.Status{Status: "Failure", Code: http.StatusConflict, Reason: eventsv1.ReasonConflict, Kind: kind.Resource,
		Name: obj.GetMetadata().GetName(), Message: fmt.Sprintf("Operation cannot be fulfilled on resourcequotas: the quotas of namespace %s changed %d times while charging this request; try again", ns, chargeAttempts)}
}

// kubeQuotas converts stored ResourceQuotas to kube's type (copies: the
// stored objects are shared with other writes).
func kubeQuotas(stored []objects.Object) ([]k8scorev1.ResourceQuota, error) {
	out := make([]k8scorev1.ResourceQuota, 0, len(stored))
	for _, o := range stored {
		u, ok := o.(*corev1.Unstructured)
		if !ok {
			return nil, fmt.Errorf("quota: a stored ResourceQuota decodes to %T", o)
		}
		rq, err := ToKubeQuota(u)
		if err != nil {
			return nil, err
		}
		out = append(out, *rq)
	}
	return out, nil
}

// ToKubeQuota converts a stored ResourceQuota to kube's type.
func ToKubeQuota(u *corev1.Unstructured) (*k8scorev1.ResourceQuota, error) {
	ko, err := manifest.ToKube(u)
	if err != nil {
		return nil, err
	}
	rq, ok := ko.(*k8scorev1.ResourceQuota)
	if !ok {
		return nil, fmt.Errorf("quota: a stored ResourceQuota converts to %T", ko)
	}
	return rq, nil
}

// FromKube converts a ResourceQuota back to its stored form.
func FromKube(rq *k8scorev1.ResourceQuota) (*corev1.Unstructured, error) {
	rq.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "ResourceQuota"}
	m, err := manifest.FromKube(rq)
	if err != nil {
		return nil, err
	}
	u, ok := m.(*corev1.Unstructured)
	if !ok {
		return nil, fmt.Errorf("quota: a ResourceQuota converts to %T", m)
	}
	return u, nil
}

// List reads every object of kind in namespace ns from the store.
func List(ctx context.Context, st *objects.Store, kind objects.Kind, ns string) ([]objects.Object, error) {
	kvs, _, err := st.KV().List(ctx, kind.Prefix(ns))
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", kind.Resource, err)
	}
	out := make([]objects.Object, 0, len(kvs))
	for _, kv := range kvs {
		o := kind.New()
		if err := objects.Decode(kv, o); err != nil {
			return nil, err
		}
		out = append(out, o)
	}
	return out, nil
}

// toKube converts obj to its Kubernetes type.
func toKube(obj objects.Object) (runtime.Object, error) {
	return manifest.ToKube(obj)
}

// evaluatorFor returns kube's evaluator of gr: the pods', services' and
// persistentvolumeclaims' own, else an object count (with its legacy
// alias). f lists a resource's objects (UsageStats); nil for admission,
// which needs only Usage.
func evaluatorFor(gr schema.GroupResource, f kquota.ListerForResourceFunc) kquota.Evaluator {
	if f == nil {
		f = func(gvr schema.GroupVersionResource) (cache.GenericLister, error) {
			return nil, fmt.Errorf("quota: no lister for %s in admission", gvr)
		}
	}
	switch gr {
	case schema.GroupResource{Resource: "pods"}:
		return core.NewPodEvaluator(f, clock.RealClock{})
	case schema.GroupResource{Resource: "services"}:
		return core.NewServiceEvaluator(f)
	case schema.GroupResource{Resource: "persistentvolumeclaims"}:
		return core.NewPersistentVolumeClaimEvaluator(f)
	}
	return generic.NewObjectCountEvaluator(gr, generic.ListResourceUsingListerFunc(f, gr.WithVersion("v1")), legacyAliases[gr])
}

// Usage computes what status.hard and status.used of rq should be from
// the objects of its namespace in the store now, as kube's quota
// controller (syncResourceQuota): hard is spec.hard, used covers exactly
// the resources of hard.
func Usage(ctx context.Context, st *objects.Store, rq *k8scorev1.ResourceQuota) (hard, used k8scorev1.ResourceList, err error) {
	lister := func(gvr schema.GroupVersionResource) (cache.GenericLister, error) {
		for _, k := range objects.Kinds() {
			if k.Namespaced && k.APIGroup == gvr.Group && k.Resource == gvr.Resource {
				return storeLister{ctx: ctx, st: st, kind: k}, nil
			}
		}
		return nil, fmt.Errorf("quota: no stored kind for %s", gvr)
	}
	var evs []kquota.Evaluator
	for _, k := range objects.Kinds() {
		if k.Namespaced {
			evs = append(evs, evaluatorFor(schema.GroupResource{Group: k.APIGroup, Resource: k.Resource}, lister))
		}
	}
	hard = kquota.Add(k8scorev1.ResourceList{}, rq.Spec.Hard)
	used, err = kquota.CalculateUsage(rq.Namespace, rq.Spec.Scopes, hard, generic.NewRegistry(evs), rq.Spec.ScopeSelector)
	if err != nil {
		return nil, nil, err
	}
	return hard, kquota.Mask(used, kquota.ResourceNames(hard)), nil
}

// storeLister is a cache.GenericLister over one kind's objects in the
// store, as kube's Usage reads them from informers.
type storeLister struct {
	ctx  context.Context
	st   *objects.Store
	kind objects.Kind
	ns   string
}

var _ cache.GenericLister = storeLister{}

func (l storeLister) List(sel labels.Selector) ([]runtime.Object, error) {
	objs, err := List(l.ctx, l.st, l.kind, l.ns)
	if err != nil {
		return nil, err
	}
	out := make([]runtime.Object, 0, len(objs))
	for _, o := range objs {
		if sel != nil && !sel.Matches(labels.Set(o.GetMetadata().GetLabels())) {
			continue
		}
		ko, err := toKube(o)
		if err != nil {
			return nil, err
		}
		out = append(out, ko)
	}
	return out, nil
}

func (l storeLister) Get(name string) (runtime.Object, error) {
	o, err := l.st.GetKind(l.ctx, l.kind, l.ns, name)
	if err != nil {
		return nil, err
	}
	return toKube(o)
}

func (l storeLister) ByNamespace(ns string) cache.GenericNamespaceLister {
	l.ns = ns
	return l
}

// userOf is the admission user of a podflow user.
func userOf(u *corev1.UserInfo) user.Info {
	if u == nil {
		return nil
	}
	return &user.DefaultInfo{Name: u.GetUsername(), UID: u.GetUid(), Groups: u.GetGroups()}
}

// statusOf converts an admission error to podflow's Status.
func statusOf(err error) *corev1.Status {
	var se apierrors.APIStatus
	if !errors.As(err, &se) {
		// CheckRequest's few plain errors ("insufficient quota to match
		// these scopes") are refusals too.
		return &corev1.Status{Status: "Failure", Code: http.StatusForbidden, Reason: eventsv1.ReasonForbidden, Message: err.Error()}
	}
	s := se.Status()
	st := &corev1.Status{Status: metav1.StatusFailure, Message: s.Message, Reason: string(s.Reason), Code: s.Code}
	if d := s.Details; d != nil {
		st.Name, st.Kind = d.Name, d.Kind
	}
	if st.Code == 0 {
		st.Code = http.StatusInternalServerError
	}
	return st
}

func internal(err error) *corev1.Status {
	return &corev1.Status{Status: "Failure", Code: http.StatusInternalServerError, Reason: eventsv1.ReasonInternalError,
		Message: "Internal error occurred: resource quota evaluation: " + strings.TrimSpace(err.Error())}
}
