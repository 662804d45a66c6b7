package disruption

// The kube-shaped surface kube's disruption controller code
// (kube_disruption.go) calls — dc.pdbLister, dc.podLister, dc.rsLister,
// dc.dLister, dc.ssLister, dc.rcLister, dc.recorder, dc.clock and
// dc.kubeClient.PolicyV1().PodDisruptionBudgets(ns).UpdateStatus —
// implemented over the stage's informers and podflow's store. The status
// write goes through kube-apiserver's status strategy for
// PodDisruptionBudgets (services/registry) and is compared on the
// resourceVersion it was decided from: a stale copy is 409 Conflict, as
// kube-apiserver answers, and the sync is retried.

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	policy "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	v1 "k8s.io/api/core/v1"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/controller"
	"github.com/podflow/podflow/services/informer"
	"github.com/podflow/podflow/services/manifest"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/pipeline"
)

// kindLister reads the informer of one generic kind as decoded
// k8s.io/api objects of type T, each decoded once per revision. Its
// accessors carry the names kube's listers give them (ReplicaSets,
// Deployments, ...); each returns the same namespace lister.
type kindLister[T runtime.Object] struct {
	inf   *informer.Informer[*corev1.Unstructured]
	gr    schema.GroupResource
	cache controller.DecodeCache[T]
}

func newLister[T runtime.Object](inf *informer.Informer[*corev1.Unstructured], k objects.Kind) *kindLister[T] {
	return &kindLister[T]{inf: inf, gr: schema.GroupResource{Group: k.APIGroup, Resource: k.Resource}}
}

// nsLister is a kindLister's view of one namespace.
type nsLister[T runtime.Object] struct {
	l  *kindLister[T]
	ns string
}

func (l *kindLister[T]) ReplicaSets(ns string) nsLister[T]            { return nsLister[T]{l, ns} }
func (l *kindLister[T]) Deployments(ns string) nsLister[T]            { return nsLister[T]{l, ns} }
func (l *kindLister[T]) StatefulSets(ns string) nsLister[T]           { return nsLister[T]{l, ns} }
func (l *kindLister[T]) ReplicationControllers(ns string) nsLister[T] { return nsLister[T]{l, ns} }
func (l *kindLister[T]) PodDisruptionBudgets(ns string) nsLister[T]   { return nsLister[T]{l, ns} }

// Get returns the object ns/name (shared: the caller copies it before it
// changes it), NotFound when the informer has none or it does not decode.
func (n nsLister[T]) Get(name string) (T, error) {
	var zero T
	u, ok := n.l.inf.Get(n.ns, name)
	if !ok {
		return zero, apierrors.NewNotFound(n.l.gr, name)
	}
	obj, err := n.l.decode(u)
	if err != nil {
		return zero, apierrors.NewNotFound(n.l.gr, name)
	}
	return obj, nil
}

// List returns every object of ns that decodes.
func (n nsLister[T]) List() []T {
	var out []T
	for _, u := range n.l.inf.List(n.ns) {
		if obj, err := n.l.decode(u); err == nil {
			out = append(out, obj)
		}
	}
	return out
}

func (l *kindLister[T]) decode(u *corev1.Unstructured) (T, error) {
	key := controller.Key(u.GetMetadata().GetNamespace(), u.GetMetadata().GetName())
	return l.cache.Decode(key, objects.Revision(u), func() (T, error) { return fromStored[T](u) })
}

func (l *kindLister[T]) forget(ns, name string) { l.cache.Forget(controller.Key(ns, name)) }

// fromStored decodes a stored generic object into T, its resourceVersion
// the store revision.
func fromStored[T runtime.Object](u *corev1.Unstructured) (T, error) {
	var zero T
	k, err := manifest.ToKube(u)
	if err != nil {
		return zero, err
	}
	obj, ok := k.(T)
	if !ok {
		return zero, fmt.Errorf("disruption: a stored %s decodes to %T, not %T", u.GetKind(), k, zero)
	}
	acc, err := meta.Accessor(obj)
	if err != nil {
		return zero, err
	}
	acc.SetResourceVersion(strconv.FormatInt(objects.Revision(u), 10))
	return obj, nil
}

// pdbLister is dc.pdbLister.
type pdbLister struct {
	*kindLister[*policy.PodDisruptionBudget]
}

// GetPodPodDisruptionBudgets is client-go's policy/v1 lister expansion:
// the budgets of pod's namespace whose selector matches its labels (an
// empty selector matches every pod, as policy/v1 defines), an error when
// there is none.
func (l pdbLister) GetPodPodDisruptionBudgets(pod *v1.Pod) ([]*policy.PodDisruptionBudget, error) {
	var out []*policy.PodDisruptionBudget
	for _, pdb := range l.PodDisruptionBudgets(pod.Namespace).List() {
		sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
		if err != nil {
			continue
		}
		if !sel.Matches(labels.Set(pod.Labels)) {
			continue
		}
		out = append(out, pdb)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("could not find PodDisruptionBudget for pod %s in namespace %s with labels: %v", pod.Name, pod.Namespace, pod.Labels)
	}
	return out, nil
}

// podLister is dc.podLister: the pod informer, as kube Pods.
type podLister struct{ c *Controller }

func (l podLister) Pods(ns string) podNamespaceLister { return podNamespaceLister{l.c, ns} }

type podNamespaceLister struct {
	c  *Controller
	ns string
}

// List returns the pods of the namespace sel matches (controller.KubePod:
// identity, labels, owners, phase and conditions — what the controller
// reads).
func (l podNamespaceLister) List(sel labels.Selector) ([]*v1.Pod, error) {
	var out []*v1.Pod
	for _, p := range l.c.podInf.List(l.ns) {
		if sel.Matches(labels.Set(p.GetMetadata().GetLabels())) {
			out = append(out, controller.KubePod(p))
		}
	}
	return out, nil
}

// realClock is dc.clock (tests replace Controller.now).
type realClock struct{ c *Controller }

func (k realClock) Now() time.Time                  { return k.c.now() }
func (k realClock) Since(t time.Time) time.Duration { return k.c.now().Sub(t) }

// recorder is dc.recorder: Events about budgets and pods.
type recorder struct{ c *Controller }

func (r recorder) Eventf(obj runtime.Object, typ, reason, format string, args ...any) {
	r.Event(obj, typ, reason, fmt.Sprintf(format, args...))
}

func (r recorder) Event(obj runtime.Object, typ, reason, message string) {
	acc, err := meta.Accessor(obj)
	if err != nil {
		return
	}
	apiVersion, kind := "policy/v1", "PodDisruptionBudget"
	if _, ok := obj.(*v1.Pod); ok {
		apiVersion, kind = "v1", "Pod"
	}
	ctx, cancel := context.WithTimeout(r.c.baseCtx(), 5*time.Second)
	defer cancel()
	r.c.events.Record(ctx, apiVersion, kind, acc.GetNamespace(), acc.GetName(), string(acc.GetUID()), typ, reason, message)
}

// kubeClient is dc.kubeClient: PolicyV1().PodDisruptionBudgets(ns).UpdateStatus.
type kubeClient struct{ c *Controller }

func (k kubeClient) PolicyV1() policyClient { return policyClient(k) }

type policyClient struct{ c *Controller }

func (p policyClient) PodDisruptionBudgets(ns string) pdbClient { return pdbClient(p) }

type pdbClient struct{ c *Controller }

var (
	pdbGR = policy.Resource("poddisruptionbudgets")
	pdbTM = metav1.TypeMeta{APIVersion: "policy/v1", Kind: "PodDisruptionBudget"}
)

// objectModified is kube-apiserver's message for a stale write.
const objectModified = "the object has been modified; please apply your changes to the latest version and try again"

// UpdateStatus writes pdb's status through the status strategy, compared
// on pdb's resourceVersion, and has the budget's next sync wait for the
// informer to show it.
func (p pdbClient) UpdateStatus(ctx context.Context, pdb *policy.PodDisruptionBudget, _ metav1.UpdateOptions) (*policy.PodDisruptionBudget, error) {
	c := p.c
	old, err := c.env.Store.GetKind(ctx, objects.PodDisruptionBudgets, pdb.Namespace, pdb.Name)
	if errors.Is(err, raftstore.ErrNotFound) {
		return nil, apierrors.NewNotFound(pdbGR, pdb.Name)
	}
	if err != nil {
		return nil, err
	}
	oldU := old.(*corev1.Unstructured)
	if oldU.GetMetadata().GetResourceVersion() != pdb.ResourceVersion || oldU.GetMetadata().GetUid() != string(pdb.UID) {
		return nil, apierrors.NewConflict(pdbGR, pdb.Name, errors.New(objectModified))
	}
	in := pdb.DeepCopy()
	in.TypeMeta = pdbTM
	m, err := manifest.FromKube(in)
	if err != nil {
		return nil, err
	}
	u, ok := m.(*corev1.Unstructured)
	if !ok {
		return nil, fmt.Errorf("disruption: a PodDisruptionBudget is stored as %T", m)
	}
	u.Metadata.ResourceVersion = pdb.ResourceVersion
	if _, st := c.reg.PrepareUpdate(ctx, pipeline.ControllerUser(pipeline.Disruption), "status", u, oldU); st != nil {
		return nil, &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: st.GetCode(),
			Reason: metav1.StatusReason(st.GetReason()), Message: st.GetMessage()}}
	}
	objects.SetRevision(u, objects.Revision(oldU))
	if _, err := c.env.Store.Update(ctx, u); err != nil {
		switch {
		case errors.Is(err, raftstore.ErrConflict):
			return nil, apierrors.NewConflict(pdbGR, pdb.Name, errors.New(objectModified))
		case errors.Is(err, raftstore.ErrNotFound):
			return nil, apierrors.NewNotFound(pdbGR, pdb.Name)
		}
		return nil, err
	}
	c.runner.Expect(controller.Key(pdb.Namespace, pdb.Name), objects.Revision(u))
	return fromStored[*policy.PodDisruptionBudget](u)
}
