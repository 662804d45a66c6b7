package statefulset

// What kube's StatefulSetControl (k8s.io/kubernetes/pkg/controller/statefulset)
// calls, implemented over podflow's store and pipeline: its
// StatefulPodControlObjectManager (podManager: pods created through the
// pipeline, read from the informer, identity labels written compared on
// the pod's revision, graceful deletion), its status updater
// (statusUpdater), its controller history (history: ControllerRevisions)
// and its event recorder. Every write goes through kube-apiserver's
// strategies for its kind (services/registry), is compared on the
// revision it was decided from, and is expected (Runner.Expect) by the
// StatefulSet it was made for: that set's next sync decides only from
// informers that show it.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"time"

	apps "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	kubehistory "k8s.io/kubernetes/pkg/controller/history"
	kubests "k8s.io/kubernetes/pkg/controller/statefulset"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/controller"
	"github.com/podflow/podflow/services/manifest"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/pipeline"
)

var (
	podsGR      = v1.Resource("pods")
	claimsGR    = v1.Resource("persistentvolumeclaims")
	setsGR      = apps.Resource("statefulsets")
	revisionsGR = apps.Resource("controllerrevisions")

	setTM      = metav1.TypeMeta{APIVersion: "apps/v1", Kind: "StatefulSet"}
	revisionTM = metav1.TypeMeta{APIVersion: "apps/v1", Kind: "ControllerRevision"}
)

// writeTimeout bounds a write kube's code makes without a context.
const writeTimeout = 30 * time.Second

// ErrNoClaims: podflow has no PersistentVolume provisioner, so the
// controller makes no PersistentVolumeClaims (the api refuses a
// StatefulSet with volumeClaimTemplates; this is the second check).
var ErrNoClaims = errors.New("statefulset: podflow does not support PersistentVolumeClaims: podflow has no storage provisioner")

// podManager is kube's StatefulPodControlObjectManager.
type podManager struct{ c *Controller }

var _ kubests.StatefulPodControlObjectManager = podManager{}

// CreatePod asks the pipeline for pod (admission, persistence, the same
// trace as any pod); its name <set>-<ordinal> is its idempotency key. A
// name taken is kube's 409 AlreadyExists, the pod in place expected.
func (m podManager) CreatePod(ctx context.Context, pod *v1.Pod, set *apps.StatefulSet) error {
	c, key := m.c, controller.Key(set.Namespace, set.Name)
	msg, err := manifest.FromKube(pod)
	if err != nil {
		return fmt.Errorf("pod %s/%s: %w", set.Namespace, pod.Name, err)
	}
	pp, ok := msg.(*corev1.Pod)
	if !ok {
		return fmt.Errorf("statefulset: a pod converts to %T", msg)
	}
	objects.Meta(pp).Namespace = set.Namespace
	started, _ := ctx.Value(syncStarted{}).(time.Time)
	if started.IsZero() {
		started = time.Now()
	}
	created, err := c.pods.Create(ctx, pp, started)
	var se *controller.StatusError
	switch {
	case err == nil:
		c.expect(key, objects.Pods, objects.Revision(created))
		return nil
	case errors.Is(err, controller.ErrNameTaken):
		if kv, gerr := c.env.Store.KV().Get(ctx, objects.Pods.Key(set.Namespace, pod.Name)); gerr == nil {
			c.expect(key, objects.Pods, kv.ModRevision)
		}
		return apierrors.NewAlreadyExists(podsGR, pod.Name)
	case errors.As(err, &se):
		return statusError(se.Status)
	}
	return err
}

// GetPod reads the pod from the informer.
func (m podManager) GetPod(ns, name string) (*v1.Pod, error) {
	p, ok := m.c.podInf.Get(ns, name)
	if !ok {
		return nil, apierrors.NewNotFound(podsGR, name)
	}
	return controller.KubePod(p), nil
}

// UpdatePod writes what kube's UpdateStatefulPod changes on a pod — its
// identity labels (statefulset.kubernetes.io/pod-name,
// apps.kubernetes.io/pod-index) — to the stored pod, compared on the
// revision kube's copy was read at (409 Conflict when it moved). Volumes
// never change: a set has no volumeClaimTemplates in podflow.
func (m podManager) UpdatePod(pod *v1.Pod, set *apps.StatefulSet) error {
	c := m.c
	ctx, cancel := context.WithTimeout(c.baseCtx(), writeTimeout)
	defer cancel()
	p, err := objects.Mutate(ctx, c.env.Store, pod.Namespace, pod.Name, func(p *corev1.Pod) error {
		md := p.GetMetadata()
		if md.GetResourceVersion() != pod.ResourceVersion {
			return apierrors.NewConflict(podsGR, pod.Name, errors.New(objectModified))
		}
		if maps.Equal(md.GetLabels(), pod.Labels) {
			return objects.ErrNoChange
		}
		md.Labels = maps.Clone(pod.Labels)
		return nil
	})
	switch {
	case errors.Is(err, raftstore.ErrNotFound):
		return apierrors.NewNotFound(podsGR, pod.Name)
	case errors.Is(err, raftstore.ErrConflict):
		return apierrors.NewConflict(podsGR, pod.Name, errors.New(objectModified))
	case err != nil:
		return err
	}
	c.expect(controller.Key(set.Namespace, set.Name), objects.Pods, objects.Revision(p))
	return nil
}

// DeletePod starts the pod's graceful deletion (its node stops it); the
// set controlling it expects the pod marked terminating.
func (m podManager) DeletePod(pod *v1.Pod) error {
	c := m.c
	ctx, cancel := context.WithTimeout(c.baseCtx(), writeTimeout)
	defer cancel()
	p, err := c.pods.Delete(ctx, pod.Namespace, pod.Name)
	if errors.Is(err, raftstore.ErrNotFound) {
		return apierrors.NewNotFound(podsGR, pod.Name)
	}
	if err != nil {
		return err
	}
	if ref := metav1.GetControllerOfNoCopy(pod); ref != nil && ref.Kind == controllerKind.Kind {
		c.expect(controller.Key(pod.Namespace, ref.Name), objects.Pods, objects.Revision(p))
	}
	return nil
}

// CreateClaim refuses: podflow has no volumes to bind a claim to.
func (podManager) CreateClaim(claim *v1.PersistentVolumeClaim, _ *apps.StatefulSet) error {
	return apierrors.NewForbidden(claimsGR, claim.Name, ErrNoClaims)
}

// GetClaim finds none.
func (podManager) GetClaim(_, name string) (*v1.PersistentVolumeClaim, error) {
	return nil, apierrors.NewNotFound(claimsGR, name)
}

// UpdateClaim refuses, as CreateClaim.
func (podManager) UpdateClaim(claim *v1.PersistentVolumeClaim, _ *apps.StatefulSet) error {
	return apierrors.NewForbidden(claimsGR, claim.Name, ErrNoClaims)
}

// statusUpdater is kube's realStatefulSetStatusUpdater: the status
// subresource, retried on a conflict from the stored copy.
type statusUpdater struct{ c *Controller }

var _ kubests.StatefulSetStatusUpdaterInterface = statusUpdater{}

func (s statusUpdater) UpdateStatefulSetStatus(ctx context.Context, set *apps.StatefulSet, status *apps.StatefulSetStatus) error {
	c := s.c
	var err error
	for attempt := 0; attempt < 5; attempt++ {
		set.Status = *status
		set.TypeMeta = setTM
		out := &apps.StatefulSet{}
		if err = c.update(ctx, objects.StatefulSets, "status", set, out); err == nil {
			c.expect(controller.Key(set.Namespace, set.Name), objects.StatefulSets, revisionOf(out))
			return nil
		}
		if !apierrors.IsConflict(err) {
			return err
		}
		u, gerr := c.env.Store.GetKind(ctx, objects.StatefulSets, set.Namespace, set.Name)
		if gerr != nil {
			return err
		}
		fresh := &apps.StatefulSet{}
		if gerr := fromStored(u.(*corev1.Unstructured), fresh); gerr != nil {
			return err
		}
		set = fresh
	}
	return err
}

// history is kube's controller history (history.Interface) over the
// store's ControllerRevisions and their informer.
type history struct{ c *Controller }

var _ kubehistory.Interface = history{}

// ListControllerRevisions lists the revisions of parent's namespace that
// selector matches, owned by parent or by no one.
func (h history) ListControllerRevisions(parent metav1.Object, _ schema.GroupVersionKind, selector labels.Selector) ([]*apps.ControllerRevision, error) {
	var out []*apps.ControllerRevision
	for _, u := range h.c.revs.List(parent.GetNamespace()) {
		r := h.c.decodeRevision(u)
		if r == nil || !selector.Matches(labels.Set(r.Labels)) {
			continue
		}
		if ref := metav1.GetControllerOfNoCopy(r); ref == nil || ref.UID == parent.GetUID() {
			out = append(out, r)
		}
	}
	return out, nil
}

// CreateControllerRevision is kube's realHistory's: the revision named
// by its parent and its hash, renamed with collisionCount while another
// revision's data holds the name.
func (h history) CreateControllerRevision(parent metav1.Object, revision *apps.ControllerRevision, collisionCount *int32) (*apps.ControllerRevision, error) {
	if collisionCount == nil {
		return nil, fmt.Errorf("collisionCount should not be nil")
	}
	c := h.c
	ctx, cancel := context.WithTimeout(c.baseCtx(), writeTimeout)
	defer cancel()
	key := controller.Key(parent.GetNamespace(), parent.GetName())
	clone := revision.DeepCopy()
	clone.TypeMeta = revisionTM
	for {
		hash := kubehistory.HashControllerRevision(revision, collisionCount)
		clone.Name = kubehistory.ControllerRevisionName(parent.GetName(), hash)
		clone.Namespace = parent.GetNamespace()
		u, err := toStored(clone)
		if err != nil {
			return nil, err
		}
		if _, st := c.reg.PrepareCreate(ctx, pipeline.ControllerUser(pipeline.StatefulSet), "", u); st != nil {
			return nil, statusError(st)
		}
		_, err = c.env.Store.Create(ctx, u)
		if errors.Is(err, raftstore.ErrAlreadyExists) {
			existing, gerr := c.env.Store.GetKind(ctx, objects.ControllerRevisions, clone.Namespace, clone.Name)
			if gerr != nil {
				return nil, gerr
			}
			exists := &apps.ControllerRevision{}
			if err := fromStored(existing.(*corev1.Unstructured), exists); err != nil {
				return nil, err
			}
			if bytes.Equal(exists.Data.Raw, canonicalJSON(clone.Data.Raw)) {
				c.expect(key, objects.ControllerRevisions, objects.Revision(existing))
				return exists, nil
			}
			*collisionCount++
			continue
		}
		if err != nil {
			return nil, err
		}
		c.expect(key, objects.ControllerRevisions, objects.Revision(u))
		out := &apps.ControllerRevision{}
		return out, fromStored(u, out)
	}
}

// DeleteControllerRevision deletes an old revision (revisionHistoryLimit).
func (h history) DeleteControllerRevision(revision *apps.ControllerRevision) error {
	c := h.c
	ctx, cancel := context.WithTimeout(c.baseCtx(), writeTimeout)
	defer cancel()
	rev, err := c.env.Store.Delete(ctx, objects.ControllerRevisions, revision.Namespace, revision.Name, 0)
	if errors.Is(err, raftstore.ErrNotFound) {
		return apierrors.NewNotFound(revisionsGR, revision.Name)
	}
	if err == nil {
		h.expectFor(revision, rev)
	}
	return err
}

// UpdateControllerRevision sets revision's Revision number (a rollback to
// an earlier template makes its revision the newest), retried on a
// conflict from the stored copy.
func (h history) UpdateControllerRevision(revision *apps.ControllerRevision, newRevision int64) (*apps.ControllerRevision, error) {
	c := h.c
	ctx, cancel := context.WithTimeout(c.baseCtx(), writeTimeout)
	defer cancel()
	clone := revision.DeepCopy()
	var err error
	for attempt := 0; attempt < 5; attempt++ {
		if clone.Revision == newRevision {
			return clone, nil
		}
		clone.Revision = newRevision
		clone.TypeMeta = revisionTM
		out := &apps.ControllerRevision{}
		if err = c.update(ctx, objects.ControllerRevisions, "", clone, out); err == nil {
			h.expectFor(out, revisionOf(out))
			return out, nil
		}
		if !apierrors.IsConflict(err) {
			return clone, err
		}
		u, gerr := c.env.Store.GetKind(ctx, objects.ControllerRevisions, clone.Namespace, clone.Name)
		if gerr != nil {
			return clone, err
		}
		clone = &apps.ControllerRevision{}
		if gerr := fromStored(u.(*corev1.Unstructured), clone); gerr != nil {
			return clone, err
		}
	}
	return clone, err
}

// AdoptControllerRevision makes an orphan revision parent's.
func (h history) AdoptControllerRevision(parent metav1.Object, parentKind schema.GroupVersionKind, revision *apps.ControllerRevision) (*apps.ControllerRevision, error) {
	if owner := metav1.GetControllerOfNoCopy(revision); owner != nil {
		return nil, fmt.Errorf("attempt to adopt revision owned by %v", owner)
	}
	return h.mutateOwners(revision, func(refs []metav1.OwnerReference) ([]metav1.OwnerReference, error) {
		if metav1.GetControllerOfNoCopy(&metav1.ObjectMeta{OwnerReferences: refs}) != nil {
			return nil, fmt.Errorf("attempt to adopt revision %s owned by another controller", revision.Name)
		}
		out := make([]metav1.OwnerReference, 0, len(refs)+1)
		for _, r := range refs {
			if r.UID != parent.GetUID() {
				out = append(out, r)
			}
		}
		return append(out, *metav1.NewControllerRef(parent, parentKind)), nil
	}, parent)
}

// ReleaseControllerRevision removes parent's reference from revision; a
// revision gone or not parent's is nil, nil (kube's).
func (h history) ReleaseControllerRevision(parent metav1.Object, revision *apps.ControllerRevision) (*apps.ControllerRevision, error) {
	out, err := h.mutateOwners(revision, func(refs []metav1.OwnerReference) ([]metav1.OwnerReference, error) {
		var kept []metav1.OwnerReference
		for _, r := range refs {
			if r.UID != parent.GetUID() {
				kept = append(kept, r)
			}
		}
		if len(kept) == len(refs) {
			return nil, errNotOwned
		}
		return kept, nil
	}, parent)
	if apierrors.IsNotFound(err) || errors.Is(err, errNotOwned) {
		return nil, nil
	}
	return out, err
}

var errNotOwned = errors.New("statefulset: not the revision's owner")

// mutateOwners rewrites the stored revision's ownerReferences with f, on
// the revision it was read at (uid checked: a revision deleted and made
// again is not the one kube's code decided about).
func (h history) mutateOwners(revision *apps.ControllerRevision, f func([]metav1.OwnerReference) ([]metav1.OwnerReference, error), parent metav1.Object) (*apps.ControllerRevision, error) {
	c := h.c
	ctx, cancel := context.WithTimeout(c.baseCtx(), writeTimeout)
	defer cancel()
	u, err := c.env.Store.GetKind(ctx, objects.ControllerRevisions, revision.Namespace, revision.Name)
	if errors.Is(err, raftstore.ErrNotFound) {
		return nil, apierrors.NewNotFound(revisionsGR, revision.Name)
	}
	if err != nil {
		return nil, err
	}
	cur := &apps.ControllerRevision{}
	if err := fromStored(u.(*corev1.Unstructured), cur); err != nil {
		return nil, err
	}
	if revision.UID != "" && cur.UID != revision.UID {
		return nil, apierrors.NewConflict(revisionsGR, revision.Name, fmt.Errorf("Precondition failed: UID in precondition: %s, UID in object meta: %s", revision.UID, cur.UID))
	}
	refs, err := f(cur.OwnerReferences)
	if err != nil {
		return nil, err
	}
	cur.OwnerReferences = refs
	cur.TypeMeta = revisionTM
	out := &apps.ControllerRevision{}
	if err := c.update(ctx, objects.ControllerRevisions, "", cur, out); err != nil {
		return nil, err
	}
	c.expect(controller.Key(parent.GetNamespace(), parent.GetName()), objects.ControllerRevisions, revisionOf(out))
	return out, nil
}

// expectFor makes the StatefulSet controlling revision expect rev.
func (h history) expectFor(revision *apps.ControllerRevision, rev int64) {
	if ref := metav1.GetControllerOfNoCopy(revision); ref != nil && ref.Kind == controllerKind.Kind {
		h.c.expect(controller.Key(revision.Namespace, ref.Name), objects.ControllerRevisions, rev)
	}
}

// update stores obj (a kube object of kind k carrying the resourceVersion
// it was read at) through the registry's strategy of subresource, and
// decodes the stored result into out.
func (c *Controller) update(ctx context.Context, k objects.Kind, subresource string, obj runtime.Object, out runtime.Object) error {
	acc, err := meta.Accessor(obj)
	if err != nil {
		return err
	}
	ns, name := acc.GetNamespace(), acc.GetName()
	gr := schema.GroupResource{Group: k.APIGroup, Resource: k.Resource}
	old, err := c.env.Store.GetKind(ctx, k, ns, name)
	if errors.Is(err, raftstore.ErrNotFound) {
		return apierrors.NewNotFound(gr, name)
	}
	if err != nil {
		return err
	}
	if old.GetMetadata().GetResourceVersion() != acc.GetResourceVersion() || old.GetMetadata().GetUid() != string(acc.GetUID()) {
		return apierrors.NewConflict(gr, name, errors.New(objectModified))
	}
	u, err := toStored(obj)
	if err != nil {
		return err
	}
	oldU := old.(*corev1.Unstructured)
	if _, st := c.reg.PrepareUpdate(ctx, pipeline.ControllerUser(pipeline.StatefulSet), subresource, u, oldU); st != nil {
		return statusError(st)
	}
	objects.SetRevision(u, objects.Revision(oldU))
	if _, err := c.env.Store.Update(ctx, u); err != nil {
		switch {
		case errors.Is(err, raftstore.ErrConflict):
			return apierrors.NewConflict(gr, name, errors.New(objectModified))
		case errors.Is(err, raftstore.ErrNotFound):
			return apierrors.NewNotFound(gr, name)
		}
		return err
	}
	return fromStored(u, out)
}

// objectModified is kube-apiserver's message for a stale write.
const objectModified = "the object has been modified; please apply your changes to the latest version and try again"

func revisionOf(obj metav1.Object) int64 {
	n, _ := strconv.ParseInt(obj.GetResourceVersion(), 10, 64)
	return n
}

func toStored(obj runtime.Object) (*corev1.Unstructured, error) {
	m, err := manifest.FromKube(obj)
	if err != nil {
		return nil, err
	}
	u, ok := m.(*corev1.Unstructured)
	if !ok {
		return nil, fmt.Errorf("statefulset: %T is stored as %T", obj, m)
	}
	if acc, err := meta.Accessor(obj); err == nil && acc.GetResourceVersion() != "" {
		u.Metadata.ResourceVersion = acc.GetResourceVersion()
	}
	return u, nil
}

// fromStored decodes u into out (a *apps.StatefulSet or
// *apps.ControllerRevision), its resourceVersion the store revision; a
// revision's data is in canonical JSON (canonicalJSON), as kube's code
// makes it, so that it compares equal byte for byte.
func fromStored(u *corev1.Unstructured, out runtime.Object) error {
	k, err := manifest.ToKube(u)
	if err != nil {
		return err
	}
	rv := strconv.FormatInt(objects.Revision(u), 10)
	switch o := out.(type) {
	case *apps.StatefulSet:
		s, ok := k.(*apps.StatefulSet)
		if !ok {
			return fmt.Errorf("statefulset: a stored %s decodes to %T", u.GetKind(), k)
		}
		*o = *s
		o.ResourceVersion = rv
	case *apps.ControllerRevision:
		r, ok := k.(*apps.ControllerRevision)
		if !ok {
			return fmt.Errorf("statefulset: a stored %s decodes to %T", u.GetKind(), k)
		}
		*o = *r
		o.ResourceVersion = rv
		o.Data.Raw = canonicalJSON(o.Data.Raw)
		o.Data.Object = nil
	default:
		return fmt.Errorf("statefulset: cannot decode into %T", out)
	}
	return nil
}

// canonicalJSON is raw compact with its object keys sorted and its
// numbers as written: what encoding/json makes of the maps kube's
// getPatch marshals. raw that is not JSON is returned as it is.
func canonicalJSON(raw []byte) []byte {
	if len(raw) == 0 {
		return raw
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return raw
	}
	out, err := json.Marshal(v)
	if err != nil {
		return raw
	}
	return out
}

// statusError is a registry refusal as the error kube's client returns.
func statusError(st *corev1.Status) error {
	return &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: st.GetCode(),
		Reason: metav1.StatusReason(st.GetReason()), Message: st.GetMessage()}}
}

// recorder is kube's event recorder for the StatefulSet control's Events
// (SuccessfulCreate, SuccessfulDelete, FailedCreate, RecreatingFailedPod,
// ...), through the controller's spam filter.
type recorder struct{ c *Controller }

func (r recorder) Event(obj runtime.Object, typ, reason, message string) {
	acc, err := meta.Accessor(obj)
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(r.c.baseCtx(), 5*time.Second)
	defer cancel()
	r.c.events.Record(ctx, "apps/v1", controllerKind.Kind, acc.GetNamespace(), acc.GetName(), string(acc.GetUID()), typ, reason, message)
}

func (r recorder) Eventf(obj runtime.Object, typ, reason, format string, args ...any) {
	r.Event(obj, typ, reason, fmt.Sprintf(format, args...))
}

func (r recorder) AnnotatedEventf(obj runtime.Object, _ map[string]string, typ, reason, format string, args ...any) {
	r.Event(obj, typ, reason, fmt.Sprintf(format, args...))
}
