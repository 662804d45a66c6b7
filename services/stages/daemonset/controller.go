package daemonset

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"time"

	"golang.org/x/sync/errgroup"
	apps "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/klog/v2"
	podutil "k8s.io/kubernetes/pkg/api/v1/pod"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/controller"
	"github.com/podflow/podflow/services/events"
	"github.com/podflow/podflow/services/informer"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/pipeline"
	"github.com/podflow/podflow/services/registry"
	"github.com/podflow/podflow/services/stage"
)

// controllerKind is the kind of the controller's objects (kube's).
var controllerKind = apps.SchemeGroupVersion.WithKind("DaemonSet")

// Reasons of the controller's Events (kube's).
const (
	SelectingAllReason       = "SelectingAll"
	FailedPlacementReason    = "FailedPlacement"
	FailedDaemonPodReason    = "FailedDaemonPod"
	SucceededDaemonPodReason = "SucceededDaemonPod"
)

// StatusUpdateRetries limits the retries of a status write (kube's).
const StatusUpdateRetries = 1

// Config configures the controller.
type Config struct {
	// Controller configures the replica's Runner (work queue, Leases).
	Controller controller.Config
	// BurstReplicas bounds the pods one sync creates or deletes (kube's
	// 250); the next sync does the rest.
	BurstReplicas int
	// MaxInFlight bounds the creations one sync has in flight at once
	// (controller.SlowStart's window; default 250).
	MaxInFlight int
	// FailedPodBackoff and FailedPodMaxBackoff bound how often a failed
	// daemon pod on one node is replaced (kube-controller-manager's 1s
	// and 15m).
	FailedPodBackoff, FailedPodMaxBackoff time.Duration
}

// DefaultConfig returns the defaults for a replica of the stage.
func DefaultConfig(replica string) Config {
	return Config{Controller: controller.DefaultConfig(pipeline.DaemonSet, replica), BurstReplicas: 250, MaxInFlight: 250,
		FailedPodBackoff: time.Second, FailedPodMaxBackoff: 15 * time.Minute}
}

// Validate checks the Config.
func (c Config) Validate() error {
	switch {
	case c.Controller.Stage != pipeline.DaemonSet:
		return fmt.Errorf("daemonset: stage %q is not %s", c.Controller.Stage, pipeline.DaemonSet)
	case c.BurstReplicas < 1 || c.MaxInFlight < 1:
		return fmt.Errorf("daemonset: BurstReplicas (%d) and MaxInFlight (%d) must be at least 1", c.BurstReplicas, c.MaxInFlight)
	case c.FailedPodBackoff <= 0 || c.FailedPodMaxBackoff < c.FailedPodBackoff:
		return fmt.Errorf("daemonset: FailedPodBackoff (%s) must be positive and at most FailedPodMaxBackoff (%s)", c.FailedPodBackoff, c.FailedPodMaxBackoff)
	}
	return c.Controller.Validate()
}

// Controller is one replica of the DaemonSet controller stage. Its fields
// kubeClient, crControl, historyLister, nodeLister, podLister,
// eventRecorder, expectations, consistencyStore and failedPodsBackoff are
// what kube's DaemonSetsController's methods (kube_*.go) use.
type Controller struct {
	env    stage.Env
	cfg    Config
	runner *controller.Runner
	pods   *controller.Pods
	reg    *registry.Registry
	dsInf  *informer.Informer[*corev1.Unstructured]
	crInf  *informer.Informer[*corev1.Unstructured]
	podInf *informer.Informer[*corev1.Pod]
	// lazy runs podInf only while there is a DaemonSet: kube's pod
	// handlers drop a pod no DaemonSet controls or selects.
	lazy    *informer.Lazy
	nodeInf *informer.Informer[*corev1.Node]
	events  *controller.Events
	log     *slog.Logger

	kubeClient        kubeClient
	crControl         crControl
	historyLister     historyLister
	nodeLister        nodeLister
	podLister         podLister
	eventRecorder     recorder
	expectations      expectations
	consistencyStore  consistencyStore
	failedPodsBackoff *flowcontrol.Backoff
	burstReplicas     int
	// gone holds the names of daemon pods deleted in the last
	// goneNamesFor: podNameFor does not give them to a replacement.
	gone *controller.GoneNames

	daemonSets controller.DecodeCache[*apps.DaemonSet]
	revisions  controller.DecodeCache[*apps.ControllerRevision]
}

var (
	_ stage.Handler    = (*Controller)(nil)
	_ stage.Starter    = (*Controller)(nil)
	_ stage.Reconciler = (*Controller)(nil)
)

// New returns a replica of the controller acting with env's identity; req
// carries its pod requests to the api stage (controller.NATSRequester).
func New(env stage.Env, cfg Config, req controller.Requester) (*Controller, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := env.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.Controller.Log == nil {
		cfg.Controller.Log = log
	}
	c := &Controller{env: env, cfg: cfg, reg: registry.Default(), log: log, pods: controller.NewPods(env, req),
		burstReplicas:     cfg.BurstReplicas,
		failedPodsBackoff: flowcontrol.NewBackOff(cfg.FailedPodBackoff, cfg.FailedPodMaxBackoff),
		gone:              controller.NewGoneNames(goneNamesFor)}
	c.kubeClient, c.crControl, c.historyLister, c.nodeLister, c.podLister = kubeClient{c}, crControl{c}, historyLister{c}, nodeLister{c}, podLister{c}
	c.eventRecorder, c.expectations, c.consistencyStore = recorder{c}, expectations{c}, consistencyStore{c}
	c.events = &controller.Events{Recorder: &events.Recorder{Store: env.Store, Component: "daemonset-controller", Instance: env.Replica}}
	var err error
	if c.runner, err = controller.New(env.Store, cfg.Controller, c.syncKey, c.keys); err != nil {
		return nil, err
	}
	if c.dsInf, err = informer.NewKind(env.Store, objects.DaemonSets, "", informer.Handlers[*corev1.Unstructured]{
		OnAdd: func(u *corev1.Unstructured) {
			c.lazy.Poke()
			c.runner.Add(keyOf(u.GetMetadata()))
		},
		OnUpdate: func(_, u *corev1.Unstructured) { c.runner.Add(keyOf(u.GetMetadata())) },
		OnDelete: func(u *corev1.Unstructured) {
			c.lazy.Poke()
			key := keyOf(u.GetMetadata())
			c.daemonSets.Forget(key)
			for _, k := range []objects.Kind{objects.DaemonSets, objects.ControllerRevisions, objects.Pods} {
				c.runner.Forget(expectKey(key, k))
			}
			c.runner.Add(key)
		},
	}); err != nil {
		return nil, err
	}
	if c.crInf, err = informer.NewKind(env.Store, objects.ControllerRevisions, "", informer.Handlers[*corev1.Unstructured]{
		OnAdd:    func(u *corev1.Unstructured) { c.historyChanged(nil, u) },
		OnUpdate: func(old, u *corev1.Unstructured) { c.historyChanged(old, u) },
		OnDelete: func(u *corev1.Unstructured) {
			c.historyChanged(u, nil)
			c.revisions.Forget(keyOf(u.GetMetadata()))
		},
	}); err != nil {
		return nil, err
	}
	if c.podInf, err = controller.NewPodInformer(env.Store, controllerKind.Kind, informer.Handlers[*corev1.Pod]{
		OnAdd:    func(p *corev1.Pod) { c.podChanged(nil, p) },
		OnUpdate: func(old, p *corev1.Pod) { c.podChanged(old, p) },
		OnDelete: func(p *corev1.Pod) {
			if ref := controller.ControllerOf(p.GetMetadata()); ref != nil && ref.GetKind() == controllerKind.Kind {
				c.gone.Add(p.GetMetadata().GetNamespace(), p.GetMetadata().GetName(), time.Now())
			}
			c.podChanged(p, nil)
		},
	}); err != nil {
		return nil, err
	}
	if c.lazy, err = c.runner.LazyPods(c.podInf, func() bool { return c.dsInf.Len() > 0 }, c.dsInf); err != nil {
		return nil, err
	}
	if c.nodeInf, err = informer.New[*corev1.Node](env.Store, "", informer.Handlers[*corev1.Node]{
		OnAdd: func(*corev1.Node) { c.queueAll() },
		OnUpdate: func(old, n *corev1.Node) {
			if !shouldIgnoreNodeUpdate(old, n) {
				c.queueAll()
			}
		},
		OnDelete: func(*corev1.Node) { c.queueAll() }, // its pods go (podsOnRemovedNodes)
	}); err != nil {
		return nil, err
	}
	return c, nil
}

func keyOf(md *corev1.ObjectMeta) string { return controller.Key(md.GetNamespace(), md.GetName()) }

// Handle is never called: the stage consumes no events.
func (c *Controller) Handle(context.Context, *bus.Delivery) error {
	return bus.Permanent(errors.New("daemonset: the controller consumes no events"))
}

// Start runs the informers, the Lease and the workers on g; it returns
// once the informers are synced.
func (c *Controller) Start(ctx context.Context, g *errgroup.Group) error {
	var infs informer.Group
	infs.Add(c.dsInf, c.crInf, c.lazy, c.nodeInf)
	if err := c.runner.Start(ctx, g, &infs); err != nil {
		return err
	}
	// kube's backoff GC: forget the failed-pod backoffs of nodes quiet for
	// twice the longest backoff.
	g.Go(func() error {
		t := time.NewTicker(BackoffGCInterval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-t.C:
				c.failedPodsBackoff.GC()
			}
		}
	})
	return nil
}

// BackoffGCInterval is how often the failed-pod backoffs are collected
// (kube's).
const BackoffGCInterval = time.Minute

// Reconcile queues every DaemonSet.
func (c *Controller) Reconcile(ctx context.Context) error { return c.runner.Reconcile(ctx) }

// Runner is the replica's Runner (tests read its Members).
func (c *Controller) Runner() *controller.Runner { return c.runner }

func (c *Controller) keys() []string { return controller.InformerKeys(c.dsInf) }

func (c *Controller) queueAll() {
	for _, k := range c.keys() {
		c.runner.Add(k)
	}
}

// baseCtx is Start's context (Background before Start).
func (c *Controller) baseCtx() context.Context { return c.runner.Context() }

// decode returns u decoded into a new T through cache, once per revision
// (shared: the caller copies before it changes it); nil when it does not
// decode.
func decode[T any, P interface {
	*T
	runtime.Object
}](c *Controller, cache *controller.DecodeCache[P], kind string, u *corev1.Unstructured) P {
	key := keyOf(u.GetMetadata())
	obj, err := cache.Decode(key, objects.Revision(u), func() (P, error) {
		obj := P(new(T))
		return obj, fromStored(u, obj)
	})
	if err != nil {
		c.log.Warn("undecodable "+kind, "key", key, "err", err)
		return nil
	}
	return obj
}

func (c *Controller) decodeDS(u *corev1.Unstructured) *apps.DaemonSet {
	return decode(c, &c.daemonSets, "DaemonSet", u)
}

func (c *Controller) decodeCR(u *corev1.Unstructured) *apps.ControllerRevision {
	return decode(c, &c.revisions, "ControllerRevision", u)
}

// daemonSet returns the DaemonSet ns/name from the informer.
func (c *Controller) daemonSet(ns, name string) *apps.DaemonSet {
	u, ok := c.dsInf.Get(ns, name)
	if !ok {
		return nil
	}
	return c.decodeDS(u)
}

// resolveControllerRef is kube's: the DaemonSet ref names, if it is one
// and still has ref's uid.
func (c *Controller) resolveControllerRef(ns, kind, name, uid string) *apps.DaemonSet {
	if kind != controllerKind.Kind {
		return nil
	}
	ds := c.daemonSet(ns, name)
	if ds == nil || string(ds.UID) != uid {
		return nil
	}
	return ds
}

func (c *Controller) enqueue(ds *apps.DaemonSet) { c.runner.Add(controller.Key(ds.Namespace, ds.Name)) }

func (c *Controller) enqueueDaemonSetAfter(ds *apps.DaemonSet, after time.Duration) {
	c.runner.AddAfter(controller.Key(ds.Namespace, ds.Name), after)
}

// matching returns the DaemonSets of ns whose selector matches lbls (an
// orphan's candidates, kube's GetPodDaemonSets and GetHistoryDaemonSets).
func (c *Controller) matching(ns string, lbls map[string]string) []*apps.DaemonSet {
	if len(lbls) == 0 {
		return nil
	}
	var out []*apps.DaemonSet
	for _, u := range c.dsInf.List(ns) {
		ds := c.decodeDS(u)
		if ds == nil {
			continue
		}
		sel, err := metav1.LabelSelectorAsSelector(ds.Spec.Selector)
		if err != nil || sel.Empty() || !sel.Matches(labels.Set(lbls)) {
			continue
		}
		out = append(out, ds)
	}
	return out
}

// historyChanged queues the DaemonSets a ControllerRevision change
// concerns (kube's addHistory, updateHistory, deleteHistory): its
// controller's, before and after; for an orphan, the DaemonSets that may
// adopt it.
func (c *Controller) historyChanged(old, cur *corev1.Unstructured) {
	for _, u := range []*corev1.Unstructured{old, cur} {
		if u == nil {
			continue
		}
		md := u.GetMetadata()
		if ref := controller.ControllerOf(md); ref != nil {
			if ds := c.resolveControllerRef(md.GetNamespace(), ref.GetKind(), ref.GetName(), ref.GetUid()); ds != nil {
				c.enqueue(ds)
			}
			continue
		}
		if u == cur {
			for _, ds := range c.matching(md.GetNamespace(), md.GetLabels()) {
				c.enqueue(ds)
			}
		}
	}
}

// podChanged queues the DaemonSets a pod change concerns (kube's addPod,
// updatePod, deletePod): its controller's, before and after — again
// minReadySeconds after it turned ready —, and for an orphan the
// DaemonSets that may adopt it.
func (c *Controller) podChanged(old, cur *corev1.Pod) {
	for _, p := range []*corev1.Pod{old, cur} {
		if p == nil {
			continue
		}
		md := p.GetMetadata()
		if ref := controller.ControllerOf(md); ref != nil {
			ds := c.resolveControllerRef(md.GetNamespace(), ref.GetKind(), ref.GetName(), ref.GetUid())
			if ds == nil {
				continue
			}
			c.enqueue(ds)
			if p == cur && old != nil && ds.Spec.MinReadySeconds > 0 && !podutil.IsPodReady(controller.KubePod(old)) && podutil.IsPodReady(controller.KubePod(cur)) {
				c.enqueueDaemonSetAfter(ds, time.Duration(ds.Spec.MinReadySeconds)*time.Second+time.Second)
			}
			continue
		}
		if p == cur && md.GetDeletionTimestamp() == nil {
			for _, ds := range c.matching(md.GetNamespace(), md.GetLabels()) {
				c.enqueue(ds)
			}
		}
	}
}

// shouldIgnoreNodeUpdate is kube's: only a node's labels and taints
// matter to the controller.
func shouldIgnoreNodeUpdate(old, cur *corev1.Node) bool {
	o, n := kubeNode(old), kubeNode(cur)
	return apiequality.Semantic.DeepEqual(o.Labels, n.Labels) && apiequality.Semantic.DeepEqual(o.Spec.Taints, n.Spec.Taints)
}

// kubeNode is the part of a node the controller reads, as a k8s.io/api
// Node: name, labels, taints (what node affinity and tolerations match).
func kubeNode(n *corev1.Node) *v1.Node {
	md := n.GetMetadata()
	kn := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: md.GetName(), UID: types.UID(md.GetUid()), Labels: md.GetLabels()}}
	kn.Spec.Unschedulable = n.GetSpec().GetUnschedulable()
	for _, t := range n.GetSpec().GetTaints() {
		kt := v1.Taint{Key: t.GetKey(), Value: t.GetValue(), Effect: v1.TaintEffect(t.GetEffect())}
		if ta := t.GetTimeAdded(); ta != nil {
			at := metav1.NewTime(ta.AsTime())
			kt.TimeAdded = &at
		}
		kn.Spec.Taints = append(kn.Spec.Taints, kt)
	}
	return kn
}

// nodes lists the nodes, sorted by name.
func (c *Controller) nodes() []*v1.Node {
	ns := c.nodeInf.List("")
	out := make([]*v1.Node, 0, len(ns))
	for _, n := range ns {
		out = append(out, kubeNode(n))
	}
	return out
}

// syncKey is kube's syncDaemonSet for one key, on the replica that owns
// it. It decides only from informers that show every write its previous
// syncs made (Runner.Expect): until they do, it updates the status only
// (pods) or waits (the DaemonSet and its ControllerRevisions).
func (c *Controller) syncKey(ctx context.Context, key string) error {
	started := time.Now()
	logger := klog.FromContext(ctx)
	ns, name, err := controller.SplitKey(key)
	if err != nil {
		return nil
	}
	// The informers' revisions are read before the objects (see the
	// check below).
	dsRev, crRev := c.dsInf.Revision(), c.crInf.Revision()
	ds := c.daemonSet(ns, name)
	if ds == nil {
		for _, k := range []objects.Kind{objects.DaemonSets, objects.ControllerRevisions, objects.Pods} {
			c.runner.Forget(expectKey(key, k))
		}
		return nil
	}
	// kube's consistencyStore.EnsureReady: our writes of the DaemonSet and
	// its history must be in the informers before we decide from them.
	if !c.runner.Satisfied(expectKey(key, objects.DaemonSets), dsRev) ||
		!c.runner.Satisfied(expectKey(key, objects.ControllerRevisions), crRev) {
		c.runner.AddAfter(key, time.Second) // in case no informer event comes
		return nil
	}
	ctx = withSync(ctx, key, started)
	ds = ds.DeepCopy()
	nodeList := c.nodes()

	everything := metav1.LabelSelector{}
	if reflect.DeepEqual(ds.Spec.Selector, &everything) {
		c.eventRecorder.Eventf(ds, v1.EventTypeWarning, SelectingAllReason, "This daemon set is selecting all pods. A non-empty selector is required.")
		return nil
	}
	// A DaemonSet being deleted: its history may be gone already, its
	// status cannot be computed (kube returns here too).
	if ds.DeletionTimestamp != nil {
		return nil
	}
	cur, old, err := c.constructHistory(ctx, ds)
	if err != nil {
		return fmt.Errorf("failed to construct revisions of DaemonSet: %v", err)
	}
	hash := cur.Labels[apps.DefaultDaemonSetUniqueLabelKey]

	if !c.expectations.SatisfiedExpectations(logger, key) {
		c.runner.AddAfter(key, time.Second) // in case no pod event comes
		return c.updateDaemonSetStatus(ctx, ds, nodeList, hash, false)
	}
	err = c.updateDaemonSet(ctx, ds, nodeList, hash, key, old)
	statusErr := c.updateDaemonSetStatus(ctx, ds, nodeList, hash, true)
	switch {
	case err != nil && statusErr != nil:
		c.log.Warn("daemonset status update failed", "key", key, "err", statusErr)
		return err
	case err != nil:
		return err
	}
	return statusErr
}
