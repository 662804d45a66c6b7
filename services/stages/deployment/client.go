package deployment

// The kube-shaped surface kube's deployment controller code
// (kube_*.go) calls: dc.client.AppsV1().Deployments(ns).UpdateStatus,
// ...ReplicaSets(ns).Create/Update/Delete, dc.rsLister, dc.rsControl and
// dc.eventRecorder, implemented over podflow's store. Every write goes
// through kube-apiserver's strategies for the kind (services/registry:
// defaults, validation, generation bumps, status kept on spec writes and
// spec on status writes), is compared on the resourceVersion it carries
// (a stale copy is a 409 Conflict, as kube-apiserver answers), and its
// revision is expected by the Deployment being synced (Runner.Expect), so
// its next sync decides only from informers that show the write.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	apps "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/strategicpatch"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/manifest"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/pipeline"
)

type syncKey struct{}

// withKey marks ctx as the sync of Deployment key: the writes made under
// it are expected by key.
func withKey(ctx context.Context, key string) context.Context {
	return context.WithValue(ctx, syncKey{}, key)
}

// expect records that the sync's Deployment waits for the informer of
// kind k to reach rev (each informer shows only its kind's writes).
func (c *Controller) expect(ctx context.Context, k objects.Kind, rev int64) {
	if key, ok := ctx.Value(syncKey{}).(string); ok && rev > 0 {
		c.runner.Expect(expectKey(key, k), rev)
	}
}

// expectKey is the Runner key of key's expectation of kind k's informer.
func expectKey(key string, k objects.Kind) string { return k.Resource + "#" + key }

var (
	replicaSetsGR = apps.Resource("replicasets")
	deploymentTM  = metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"}
	replicaSetTM  = metav1.TypeMeta{APIVersion: "apps/v1", Kind: "ReplicaSet"}
)

type kubeClient struct{ c *Controller }

func (k kubeClient) AppsV1() appsClient { return appsClient(k) }

type appsClient struct{ c *Controller }

func (a appsClient) Deployments(ns string) deploymentClient { return deploymentClient{a.c, ns} }
func (a appsClient) ReplicaSets(ns string) rsClient         { return rsClient{a.c, ns} }

type deploymentClient struct {
	c  *Controller
	ns string
}

// Update writes d's spec and metadata (a rollback's template).
func (d deploymentClient) Update(ctx context.Context, dep *apps.Deployment, _ metav1.UpdateOptions) (*apps.Deployment, error) {
	out := &apps.Deployment{}
	err := d.c.update(ctx, objects.Deployments, "", withType(dep, deploymentTM), out)
	return out, err
}

// UpdateStatus writes d's status.
func (d deploymentClient) UpdateStatus(ctx context.Context, dep *apps.Deployment, _ metav1.UpdateOptions) (*apps.Deployment, error) {
	out := &apps.Deployment{}
	err := d.c.update(ctx, objects.Deployments, "status", withType(dep, deploymentTM), out)
	return out, err
}

type rsClient struct {
	c  *Controller
	ns string
}

// Create stores a new ReplicaSet (409 AlreadyExists when its name is
// taken: the new ReplicaSet's name is its Deployment's and its template's
// hash, so two replicas creating it make one).
func (r rsClient) Create(ctx context.Context, rs *apps.ReplicaSet, _ metav1.CreateOptions) (*apps.ReplicaSet, error) {
	u, err := toStored(withType(rs, replicaSetTM))
	if err != nil {
		return nil, err
	}
	if _, st := r.c.reg.PrepareCreate(ctx, pipeline.ControllerUser(pipeline.Deployment), "", u); st != nil {
		return nil, statusError(st)
	}
	if _, err := r.c.env.Store.Create(ctx, u); err != nil {
		if errors.Is(err, raftstore.ErrAlreadyExists) {
			return nil, apierrors.NewAlreadyExists(replicaSetsGR, rs.Name)
		}
		return nil, err
	}
	r.c.expect(ctx, objects.ReplicaSets, objects.Revision(u))
	out := &apps.ReplicaSet{}
	return out, fromStored(u, out)
}

// Update writes rs's spec and metadata (a scale, the revision
// annotations).
func (r rsClient) Update(ctx context.Context, rs *apps.ReplicaSet, _ metav1.UpdateOptions) (*apps.ReplicaSet, error) {
	out := &apps.ReplicaSet{}
	err := r.c.update(ctx, objects.ReplicaSets, "", withType(rs, replicaSetTM), out)
	return out, err
}

// Delete removes an old ReplicaSet (revisionHistoryLimit; only ones with
// no pods are deleted).
func (r rsClient) Delete(ctx context.Context, name string, _ metav1.DeleteOptions) error {
	rev, err := r.c.env.Store.Delete(ctx, objects.ReplicaSets, r.ns, name, 0)
	if errors.Is(err, raftstore.ErrNotFound) {
		return apierrors.NewNotFound(replicaSetsGR, name)
	}
	if err == nil {
		r.c.expect(ctx, objects.ReplicaSets, rev)
	}
	return err
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
	grs := k.Resource
	old, err := c.env.Store.GetKind(ctx, k, ns, name)
	if errors.Is(err, raftstore.ErrNotFound) {
		return apierrors.NewNotFound(apps.Resource(grs), name)
	}
	if err != nil {
		return err
	}
	if old.GetMetadata().GetResourceVersion() != acc.GetResourceVersion() || old.GetMetadata().GetUid() != string(acc.GetUID()) {
		return apierrors.NewConflict(apps.Resource(grs), name, errors.New(objectModified))
	}
	u, err := toStored(obj)
	if err != nil {
		return err
	}
	oldU := old.(*corev1.Unstructured)
	if _, st := c.reg.PrepareUpdate(ctx, pipeline.ControllerUser(pipeline.Deployment), subresource, u, oldU); st != nil {
		return statusError(st)
	}
	objects.SetRevision(u, objects.Revision(oldU))
	if _, err := c.env.Store.Update(ctx, u); err != nil {
		switch {
		case errors.Is(err, raftstore.ErrConflict):
			return apierrors.NewConflict(apps.Resource(grs), name, errors.New(objectModified))
		case errors.Is(err, raftstore.ErrNotFound):
			return apierrors.NewNotFound(apps.Resource(grs), name)
		}
		return err
	}
	c.expect(ctx, k, objects.Revision(u))
	return fromStored(u, out)
}

// objectModified is kube-apiserver's message for a stale write.
const objectModified = "the object has been modified; please apply your changes to the latest version and try again"

// withType sets a kube object's TypeMeta (kube's code builds new objects
// without it).
func withType[T interface {
	runtime.Object
	*apps.Deployment | *apps.ReplicaSet
}](o T, tm metav1.TypeMeta) T {
	switch v := any(o).(type) {
	case *apps.Deployment:
		v.TypeMeta = tm
	case *apps.ReplicaSet:
		v.TypeMeta = tm
	}
	return o
}

func toStored(obj runtime.Object) (*corev1.Unstructured, error) {
	m, err := manifest.FromKube(obj)
	if err != nil {
		return nil, err
	}
	u, ok := m.(*corev1.Unstructured)
	if !ok {
		return nil, fmt.Errorf("deployment: %T is stored as %T", obj, m)
	}
	if acc, err := meta.Accessor(obj); err == nil && acc.GetResourceVersion() != "" {
		u.Metadata.ResourceVersion = acc.GetResourceVersion()
	}
	return u, nil
}

// fromStored decodes u into out (a *apps.Deployment or *apps.ReplicaSet),
// its resourceVersion the store revision.
func fromStored(u *corev1.Unstructured, out runtime.Object) error {
	k, err := manifest.ToKube(u)
	if err != nil {
		return err
	}
	switch o := out.(type) {
	case *apps.Deployment:
		d, ok := k.(*apps.Deployment)
		if !ok {
			return fmt.Errorf("deployment: a stored %s decodes to %T", u.GetKind(), k)
		}
		*o = *d
		o.ResourceVersion = strconv.FormatInt(objects.Revision(u), 10)
	case *apps.ReplicaSet:
		rs, ok := k.(*apps.ReplicaSet)
		if !ok {
			return fmt.Errorf("deployment: a stored %s decodes to %T", u.GetKind(), k)
		}
		*o = *rs
		o.ResourceVersion = strconv.FormatInt(objects.Revision(u), 10)
	}
	return nil
}

// statusError is a registry refusal as the error kube's client returns.
func statusError(st *corev1.Status) error {
	return &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: st.GetCode(),
		Reason: metav1.StatusReason(st.GetReason()), Message: st.GetMessage()}}
}

// rsLister is dc.rsLister: the ReplicaSet informer, decoded.
type rsLister struct{ c *Controller }

func (l rsLister) ReplicaSets(ns string) rsNamespaceLister { return rsNamespaceLister{l.c, ns} }

type rsNamespaceLister struct {
	c  *Controller
	ns string
}

func (l rsNamespaceLister) Get(name string) (*apps.ReplicaSet, error) {
	u, ok := l.c.sets.Get(l.ns, name)
	if !ok {
		return nil, apierrors.NewNotFound(replicaSetsGR, name)
	}
	rs := l.c.decodeRS(u)
	if rs == nil {
		return nil, fmt.Errorf("deployment: ReplicaSet %s/%s does not decode", l.ns, name)
	}
	return rs, nil
}

// rsControl is dc.rsControl: it applies the ownerReference patches of
// kube's ReplicaSetControllerRefManager (adoption and release, strategic
// merge patches whose metadata.uid is a precondition) to the stored
// ReplicaSet, compared on its revision.
type rsControl struct{ c *Controller }

func (r rsControl) PatchReplicaSet(ctx context.Context, ns, name string, data []byte) error {
	var pre struct {
		Metadata struct {
			UID string `json:"uid"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(data, &pre); err != nil {
		return apierrors.NewBadRequest(err.Error())
	}
	old, err := r.c.env.Store.GetKind(ctx, objects.ReplicaSets, ns, name)
	if errors.Is(err, raftstore.ErrNotFound) {
		return apierrors.NewNotFound(replicaSetsGR, name)
	}
	if err != nil {
		return err
	}
	oldU := old.(*corev1.Unstructured)
	if pre.Metadata.UID != "" && pre.Metadata.UID != oldU.GetMetadata().GetUid() {
		return apierrors.NewConflict(replicaSetsGR, name, fmt.Errorf("Precondition failed: UID in precondition: %s, UID in object meta: %s", pre.Metadata.UID, oldU.GetMetadata().GetUid()))
	}
	cur := &apps.ReplicaSet{}
	if err := fromStored(oldU, cur); err != nil {
		return err
	}
	orig, err := json.Marshal(cur)
	if err != nil {
		return err
	}
	patched, err := strategicpatch.StrategicMergePatch(orig, data, apps.ReplicaSet{})
	if err != nil {
		return apierrors.NewBadRequest(err.Error())
	}
	next := &apps.ReplicaSet{}
	if err := json.Unmarshal(patched, next); err != nil {
		return err
	}
	next.ResourceVersion = cur.ResourceVersion
	return r.c.update(ctx, objects.ReplicaSets, "", withType(next, replicaSetTM), &apps.ReplicaSet{})
}

// recorder is dc.eventRecorder: kube's Events about a Deployment.
type recorder struct{ c *Controller }

func (r recorder) Eventf(obj runtime.Object, typ, reason, format string, args ...any) {
	acc, err := meta.Accessor(obj)
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(r.c.baseCtx(), 5*time.Second)
	defer cancel()
	r.c.events.Record(ctx, "apps/v1", "Deployment", acc.GetNamespace(), acc.GetName(), string(acc.GetUID()), typ, reason, fmt.Sprintf(format, args...))
}
