package daemonset

// The kube-shaped surface kube's DaemonSet controller code (kube_*.go)
// calls — dsc.kubeClient.AppsV1().DaemonSets(ns).Get/UpdateStatus,
// ...ControllerRevisions(ns).Create/Get/Update/Delete,
// ...CoreV1().Pods(ns).Patch, dsc.crControl, dsc.historyLister,
// dsc.nodeLister, dsc.podLister, dsc.eventRecorder, dsc.expectations and
// dsc.consistencyStore — implemented over podflow's store. Every write
// goes through kube-apiserver's strategy for its kind (services/registry),
// is compared on the resourceVersion it carries (a stale copy is a 409
// Conflict, as kube-apiserver answers), and its revision is expected by
// the DaemonSet being synced (Runner.Expect), so that DaemonSet's next
// sync decides only from informers that show the write.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
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
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/klog/v2"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/controller"
	"github.com/podflow/podflow/services/manifest"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/pipeline"
)

type syncCtxKey struct{}

// syncInfo is what a sync's writes need to know of it.
type syncInfo struct {
	key     string    // the DaemonSet's key
	started time.Time // when the sync began (the controller's step in a pod's trace)
}

// withSync marks ctx as the sync of DaemonSet key.
func withSync(ctx context.Context, key string, started time.Time) context.Context {
	return context.WithValue(ctx, syncCtxKey{}, syncInfo{key: key, started: started})
}

func syncOf(ctx context.Context) (syncInfo, bool) {
	s, ok := ctx.Value(syncCtxKey{}).(syncInfo)
	return s, ok
}

// expect records that the sync's DaemonSet waits for the informer of
// kind k to reach rev (each informer shows only its kind's writes).
func (c *Controller) expect(ctx context.Context, k objects.Kind, rev int64) {
	if s, ok := syncOf(ctx); ok && rev > 0 {
		c.runner.Expect(expectKey(s.key, k), rev)
	}
}

// expectKey is the Runner key of key's expectation of kind k's informer.
func expectKey(key string, k objects.Kind) string { return k.Resource + "#" + key }

var (
	daemonSetsGR          = apps.Resource("daemonsets")
	controllerRevisionsGR = apps.Resource("controllerrevisions")
	daemonSetTM           = metav1.TypeMeta{APIVersion: "apps/v1", Kind: "DaemonSet"}
	controllerRevisionTM  = metav1.TypeMeta{APIVersion: "apps/v1", Kind: "ControllerRevision"}
)

type kubeClient struct{ c *Controller }

func (k kubeClient) AppsV1() appsClient { return appsClient(k) }
func (k kubeClient) CoreV1() coreClient { return coreClient(k) }

type appsClient struct{ c *Controller }

func (a appsClient) DaemonSets(ns string) dsClient { return dsClient{a.c, ns} }
func (a appsClient) ControllerRevisions(ns string) crClient {
	return crClient{a.c, ns}
}

// dsClient is kube's typed DaemonSet client, for what the controller does
// with it: read one fresh, write its status.
type dsClient struct {
	c  *Controller
	ns string
}

// Get reads the DaemonSet from the store (linearizable, as a client's
// GET).
func (d dsClient) Get(ctx context.Context, name string, _ metav1.GetOptions) (*apps.DaemonSet, error) {
	out := &apps.DaemonSet{}
	return out, d.c.get(ctx, objects.DaemonSets, daemonSetsGR, d.ns, name, out)
}

// UpdateStatus writes ds's status.
func (d dsClient) UpdateStatus(ctx context.Context, ds *apps.DaemonSet, _ metav1.UpdateOptions) (*apps.DaemonSet, error) {
	ds.TypeMeta = daemonSetTM
	out := &apps.DaemonSet{}
	return out, d.c.update(ctx, objects.DaemonSets, daemonSetsGR, "status", ds, out)
}

// crClient is kube's typed ControllerRevision client.
type crClient struct {
	c  *Controller
	ns string
}

// Create stores a new ControllerRevision (409 AlreadyExists when its name
// is taken: its name is the DaemonSet's and its template's hash, so two
// replicas creating it make one).
func (r crClient) Create(ctx context.Context, cr *apps.ControllerRevision, _ metav1.CreateOptions) (*apps.ControllerRevision, error) {
	cr.TypeMeta = controllerRevisionTM
	u, err := toStored(cr)
	if err != nil {
		return nil, err
	}
	if _, st := r.c.reg.PrepareCreate(ctx, pipeline.ControllerUser(pipeline.DaemonSet), "", u); st != nil {
		return nil, statusError(st)
	}
	if _, err := r.c.env.Store.Create(ctx, u); err != nil {
		if errors.Is(err, raftstore.ErrAlreadyExists) {
			return nil, apierrors.NewAlreadyExists(controllerRevisionsGR, cr.Name)
		}
		return nil, err
	}
	r.c.expect(ctx, objects.ControllerRevisions, objects.Revision(u))
	out := &apps.ControllerRevision{}
	return out, fromStored(u, out)
}

func (r crClient) Get(ctx context.Context, name string, _ metav1.GetOptions) (*apps.ControllerRevision, error) {
	out := &apps.ControllerRevision{}
	return out, r.c.get(ctx, objects.ControllerRevisions, controllerRevisionsGR, r.ns, name, out)
}

func (r crClient) Update(ctx context.Context, cr *apps.ControllerRevision, _ metav1.UpdateOptions) (*apps.ControllerRevision, error) {
	cr.TypeMeta = controllerRevisionTM
	out := &apps.ControllerRevision{}
	return out, r.c.update(ctx, objects.ControllerRevisions, controllerRevisionsGR, "", cr, out)
}

func (r crClient) Delete(ctx context.Context, name string, _ metav1.DeleteOptions) error {
	rev, err := r.c.env.Store.Delete(ctx, objects.ControllerRevisions, r.ns, name, 0)
	if errors.Is(err, raftstore.ErrNotFound) {
		return apierrors.NewNotFound(controllerRevisionsGR, name)
	}
	if err == nil {
		r.c.expect(ctx, objects.ControllerRevisions, rev)
	}
	return err
}

type coreClient struct{ c *Controller }

func (k coreClient) Pods(ns string) podClient { return podClient{k.c, ns} }

type podClient struct {
	c  *Controller
	ns string
}

// Patch applies the merge patch of kube's dedupCurHistories: a pod's
// labels (the only patch the controller makes), compared on write.
func (p podClient) Patch(ctx context.Context, name string, pt types.PatchType, data []byte, _ metav1.PatchOptions, _ ...string) (*v1.Pod, error) {
	if pt != types.MergePatchType {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("daemonset: patch type %s is not supported", pt))
	}
	var patch struct {
		Metadata struct {
			Labels map[string]*string `json:"labels"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(data, &patch); err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	pod, err := objects.Mutate(ctx, p.c.env.Store, p.ns, name, func(pod *corev1.Pod) error {
		md := pod.GetMetadata()
		if md.Labels == nil {
			md.Labels = map[string]string{}
		}
		for k, v := range patch.Metadata.Labels {
			if v == nil {
				delete(md.Labels, k)
			} else {
				md.Labels[k] = *v
			}
		}
		return nil
	})
	if errors.Is(err, raftstore.ErrNotFound) {
		return nil, apierrors.NewNotFound(v1.Resource("pods"), name)
	}
	if err != nil {
		return nil, err
	}
	p.c.expect(ctx, objects.Pods, objects.Revision(pod))
	return controller.KubePod(pod), nil
}

// get reads ns/name of kind k into out.
func (c *Controller) get(ctx context.Context, k objects.Kind, gr schema.GroupResource, ns, name string, out runtime.Object) error {
	o, err := c.env.Store.GetKind(ctx, k, ns, name)
	if errors.Is(err, raftstore.ErrNotFound) {
		return apierrors.NewNotFound(gr, name)
	}
	if err != nil {
		return err
	}
	return fromStored(o.(*corev1.Unstructured), out)
}

// update stores obj (a kube object of kind k carrying the resourceVersion
// it was read at) through the registry's strategy of subresource, and
// decodes the stored result into out.
func (c *Controller) update(ctx context.Context, k objects.Kind, gr schema.GroupResource, subresource string, obj, out runtime.Object) error {
	acc, err := meta.Accessor(obj)
	if err != nil {
		return err
	}
	ns, name := acc.GetNamespace(), acc.GetName()
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
	if _, st := c.reg.PrepareUpdate(ctx, pipeline.ControllerUser(pipeline.DaemonSet), subresource, u, oldU); st != nil {
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
	c.expect(ctx, k, objects.Revision(u))
	return fromStored(u, out)
}

// objectModified is kube-apiserver's message for a stale write.
const objectModified = "the object has been modified; please apply your changes to the latest version and try again"

func toStored(obj runtime.Object) (*corev1.Unstructured, error) {
	m, err := manifest.FromKube(obj)
	if err != nil {
		return nil, err
	}
	u, ok := m.(*corev1.Unstructured)
	if !ok {
		return nil, fmt.Errorf("daemonset: %T is stored as %T", obj, m)
	}
	if acc, err := meta.Accessor(obj); err == nil && acc.GetResourceVersion() != "" {
		u.Metadata.ResourceVersion = acc.GetResourceVersion()
	}
	return u, nil
}

// fromStored decodes u into out (a *apps.DaemonSet or
// *apps.ControllerRevision), its resourceVersion the store revision.
func fromStored(u *corev1.Unstructured, out runtime.Object) error {
	k, err := manifest.ToKube(u)
	if err != nil {
		return err
	}
	if reflect.TypeOf(k) != reflect.TypeOf(out) {
		return fmt.Errorf("daemonset: a stored %s decodes to %T, not %T", u.GetKind(), k, out)
	}
	reflect.ValueOf(out).Elem().Set(reflect.ValueOf(k).Elem())
	acc, err := meta.Accessor(out)
	if err != nil {
		return err
	}
	acc.SetResourceVersion(strconv.FormatInt(objects.Revision(u), 10))
	return nil
}

// statusError is a registry refusal as the error kube's client returns.
func statusError(st *corev1.Status) error {
	return &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: st.GetCode(),
		Reason: metav1.StatusReason(st.GetReason()), Message: st.GetMessage()}}
}

// crControl is dsc.crControl: it applies the ownerReference patches of
// kube's ControllerRevisionControllerRefManager (adoption and release,
// strategic merge patches whose metadata.uid is a precondition) to the
// stored ControllerRevision, compared on its revision.
type crControl struct{ c *Controller }

func (r crControl) PatchControllerRevision(ctx context.Context, ns, name string, data []byte) error {
	var pre struct {
		Metadata struct {
			UID string `json:"uid"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(data, &pre); err != nil {
		return apierrors.NewBadRequest(err.Error())
	}
	cur := &apps.ControllerRevision{}
	if err := r.c.get(ctx, objects.ControllerRevisions, controllerRevisionsGR, ns, name, cur); err != nil {
		return err
	}
	if pre.Metadata.UID != "" && pre.Metadata.UID != string(cur.UID) {
		return apierrors.NewConflict(controllerRevisionsGR, name, fmt.Errorf("Precondition failed: UID in precondition: %s, UID in object meta: %s", pre.Metadata.UID, cur.UID))
	}
	orig, err := json.Marshal(cur)
	if err != nil {
		return err
	}
	patched, err := strategicpatch.StrategicMergePatch(orig, data, apps.ControllerRevision{})
	if err != nil {
		return apierrors.NewBadRequest(err.Error())
	}
	next := &apps.ControllerRevision{}
	if err := json.Unmarshal(patched, next); err != nil {
		return err
	}
	next.ResourceVersion = cur.ResourceVersion
	next.TypeMeta = controllerRevisionTM
	return r.c.update(ctx, objects.ControllerRevisions, controllerRevisionsGR, "", next, &apps.ControllerRevision{})
}

// historyLister is dsc.historyLister: the ControllerRevision informer,
// decoded.
type historyLister struct{ c *Controller }

func (l historyLister) ControllerRevisions(ns string) historyNamespaceLister {
	return historyNamespaceLister{l.c, ns}
}

type historyNamespaceLister struct {
	c  *Controller
	ns string
}

func (l historyNamespaceLister) List(sel labels.Selector) ([]*apps.ControllerRevision, error) {
	var out []*apps.ControllerRevision
	for _, u := range l.c.crInf.List(l.ns) {
		if cr := l.c.decodeCR(u); cr != nil && sel.Matches(labels.Set(cr.Labels)) {
			out = append(out, cr)
		}
	}
	return out, nil
}

// nodeLister is dsc.nodeLister: the Node informer, converted.
type nodeLister struct{ c *Controller }

func (l nodeLister) Get(name string) (*v1.Node, error) {
	n, ok := l.c.nodeInf.Get("", name)
	if !ok {
		return nil, apierrors.NewNotFound(v1.Resource("nodes"), name)
	}
	return kubeNode(n), nil
}

// podLister is dsc.podLister: the pod informer, converted.
type podLister struct{ c *Controller }

func (l podLister) Pods(ns string) podNamespaceLister { return podNamespaceLister{l.c, ns} }

type podNamespaceLister struct {
	c  *Controller
	ns string
}

func (l podNamespaceLister) Get(name string) (*v1.Pod, error) {
	p, ok := l.c.podInf.Get(l.ns, name)
	if !ok {
		return nil, apierrors.NewNotFound(v1.Resource("pods"), name)
	}
	return kubePod(p), nil
}

// recorder is dsc.eventRecorder: kube's Events about a DaemonSet.
type recorder struct{ c *Controller }

func (r recorder) Eventf(obj runtime.Object, typ, reason, format string, args ...any) {
	acc, err := meta.Accessor(obj)
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(r.c.baseCtx(), 5*time.Second)
	defer cancel()
	r.c.events.Record(ctx, "apps/v1", "DaemonSet", acc.GetNamespace(), acc.GetName(), string(acc.GetUID()), typ, reason, fmt.Sprintf(format, args...))
}

// expectations is dsc.expectations: a DaemonSet's pod creations and
// deletions are observed once the pod informer reached their revisions
// (controller.Runner.Expect), kube's ControllerExpectations made exact.
type expectations struct{ c *Controller }

func (e expectations) SatisfiedExpectations(_ klog.Logger, key string) bool {
	return e.c.runner.Satisfied(expectKey(key, objects.Pods), e.c.podInf.Revision())
}

// consistencyStore is dsc.consistencyStore (kube's
// StaleControllerConsistencyDaemonSet): the DaemonSet's next sync waits
// until the informer of what it wrote reached the write.
type consistencyStore struct{ c *Controller }

func (s consistencyStore) WroteAt(nn types.NamespacedName, _ types.UID, gr schema.GroupResource, rv string) {
	rev, err := strconv.ParseInt(rv, 10, 64)
	if err != nil || rev <= 0 {
		return
	}
	k := objects.DaemonSets
	if gr.Resource == "pods" {
		k = objects.Pods
	}
	s.c.runner.Expect(expectKey(controller.Key(nn.Namespace, nn.Name), k), rev)
}
