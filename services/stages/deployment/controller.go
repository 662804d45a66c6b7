package deployment

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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	kubecontroller "k8s.io/kubernetes/pkg/controller"

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
var controllerKind = apps.SchemeGroupVersion.WithKind("Deployment")

// Config configures the controller.
type Config struct {
	// Controller configures the replica's Runner (work queue, Leases).
	Controller controller.Config
}

// DefaultConfig returns the defaults for a replica of the stage.
func DefaultConfig(replica string) Config {
	return Config{Controller: controller.DefaultConfig(pipeline.Deployment, replica)}
}

// Validate checks the Config.
func (c Config) Validate() error {
	if c.Controller.Stage != pipeline.Deployment {
		return fmt.Errorf("deployment: stage %q is not %s", c.Controller.Stage, pipeline.Deployment)
	}
	return c.Controller.Validate()
}

// Controller is one replica of the Deployment controller stage. Its
// fields client, rsLister, rsControl and eventRecorder are what kube's
// DeploymentController's methods (kube_*.go) call.
type Controller struct {
	env    stage.Env
	cfg    Config
	runner *controller.Runner
	reg    *registry.Registry
	deps   *informer.Informer[*corev1.Unstructured]
	sets   *informer.Informer[*corev1.Unstructured]
	podInf *informer.Informer[*corev1.Pod]
	// lazy runs podInf only while there is a Recreate Deployment: kube's
	// Deployment controller reads pods only in a Recreate rollout (it
	// waits for the old pods to stop), and watching every pod write of a
	// RollingUpdate Deployment's scale-up was half of this stage's CPU.
	lazy   *informer.Lazy
	events *controller.Events
	log    *slog.Logger

	client        kubeClient
	rsLister      rsLister
	rsControl     rsControl
	eventRecorder recorder

	deployments controller.DecodeCache[*apps.Deployment]
	replicaSets controller.DecodeCache[*apps.ReplicaSet]
}

var (
	_ stage.Handler    = (*Controller)(nil)
	_ stage.Starter    = (*Controller)(nil)
	_ stage.Reconciler = (*Controller)(nil)
)

// New returns a replica of the controller acting with env's identity.
func New(env stage.Env, cfg Config) (*Controller, error) {
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
	c := &Controller{env: env, cfg: cfg, reg: registry.Default(), log: log}
	c.client, c.rsLister, c.rsControl, c.eventRecorder = kubeClient{c}, rsLister{c}, rsControl{c}, recorder{c}
	c.events = &controller.Events{Recorder: &events.Recorder{Store: env.Store, Component: "deployment-controller", Instance: env.Replica}}
	var err error
	if c.runner, err = controller.New(env.Store, cfg.Controller, c.syncKey, c.keys); err != nil {
		return nil, err
	}
	if c.deps, err = informer.NewKind(env.Store, objects.Deployments, "", informer.Handlers[*corev1.Unstructured]{
		OnAdd: func(u *corev1.Unstructured) {
			c.lazy.Poke()
			c.runner.Add(keyOf(u.GetMetadata()))
		},
		OnUpdate: func(_, u *corev1.Unstructured) {
			c.lazy.Poke() // its strategy may have changed
			c.runner.Add(keyOf(u.GetMetadata()))
		},
		OnDelete: func(u *corev1.Unstructured) {
			c.lazy.Poke()
			key := keyOf(u.GetMetadata())
			c.deployments.Forget(key)
			c.runner.Forget(expectKey(key, objects.Deployments))
			c.runner.Forget(expectKey(key, objects.ReplicaSets))
		},
	}); err != nil {
		return nil, err
	}
	if c.sets, err = informer.NewKind(env.Store, objects.ReplicaSets, "", informer.Handlers[*corev1.Unstructured]{
		OnAdd:    func(u *corev1.Unstructured) { c.setChanged(nil, u) },
		OnUpdate: func(old, u *corev1.Unstructured) { c.setChanged(old, u) },
		OnDelete: func(u *corev1.Unstructured) {
			c.setChanged(u, nil)
			c.replicaSets.Forget(keyOf(u.GetMetadata()))
		},
	}); err != nil {
		return nil, err
	}
	// Pods: a Recreate rollout waits for the old ones to stop (kube's
	// deletePod).
	if c.podInf, err = controller.NewPodSpecInformer(env.Store, informer.Handlers[*corev1.Pod]{
		OnDelete: c.podDeleted,
	}, controller.KubePodSpecFields...); err != nil {
		return nil, err
	}
	if c.lazy, err = c.runner.LazyPods(c.podInf, c.wantsPods, c.deps); err != nil {
		return nil, err
	}
	return c, nil
}

func keyOf(md *corev1.ObjectMeta) string { return controller.Key(md.GetNamespace(), md.GetName()) }

// wantsPods reports whether the pod informer is needed: while a
// Deployment has the Recreate strategy (the only rollout that reads pods,
// kube's getPodMapForDeployment and deletePod). A sync waits for the
// informer whenever it is wanted (Runner.LazyPods), so a Deployment that
// turns to Recreate is rolled out only from a synced pod cache.
func (c *Controller) wantsPods() bool {
	for _, u := range c.deps.List("") {
		if d := c.decodeDeployment(u); d != nil && d.Spec.Strategy.Type == apps.RecreateDeploymentStrategyType {
			return true
		}
	}
	return false
}

// Handle is never called: the stage consumes no events.
func (c *Controller) Handle(context.Context, *bus.Delivery) error {
	return bus.Permanent(errors.New("deployment: the controller consumes no events"))
}

// Start runs the informers, the Lease and the workers on g; it returns
// once the informers are synced.
func (c *Controller) Start(ctx context.Context, g *errgroup.Group) error {
	var infs informer.Group
	infs.Add(c.deps, c.sets, c.lazy)
	return c.runner.Start(ctx, g, &infs)
}

// Reconcile queues every Deployment.
func (c *Controller) Reconcile(ctx context.Context) error { return c.runner.Reconcile(ctx) }

// Runner is the replica's Runner (tests read its Members).
func (c *Controller) Runner() *controller.Runner { return c.runner }

func (c *Controller) keys() []string { return controller.InformerKeys(c.deps) }

// baseCtx is Start's context (Background before Start).
func (c *Controller) baseCtx() context.Context { return c.runner.Context() }

// decodeRS returns u as a ReplicaSet, decoded once per revision (shared:
// the caller copies before it changes it); nil when it does not decode.
func (c *Controller) decodeRS(u *corev1.Unstructured) *apps.ReplicaSet {
	return decode(c, &c.replicaSets, "ReplicaSet", u)
}

// decodeDeployment is decodeRS for a Deployment.
func (c *Controller) decodeDeployment(u *corev1.Unstructured) *apps.Deployment {
	return decode(c, &c.deployments, "Deployment", u)
}

// decode returns u decoded into a new T through cache; nil when it does
// not decode.
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

// deployment returns the Deployment ns/name from the informer.
func (c *Controller) deployment(ns, name string) *apps.Deployment {
	u, ok := c.deps.Get(ns, name)
	if !ok {
		return nil
	}
	return c.decodeDeployment(u)
}

// setChanged queues the Deployments a ReplicaSet change concerns, as
// kube's addReplicaSet, updateReplicaSet and deleteReplicaSet: its
// controller's (before and after), and for an orphan every Deployment of
// its namespace whose selector matches it.
func (c *Controller) setChanged(oldU, curU *corev1.Unstructured) {
	var old, cur *apps.ReplicaSet
	if oldU != nil {
		old = c.decodeRS(oldU)
	}
	if curU != nil {
		cur = c.decodeRS(curU)
	}
	if old != nil {
		if ref := metav1.GetControllerOfNoCopy(old); ref != nil && (cur == nil || !reflect.DeepEqual(ref, metav1.GetControllerOfNoCopy(cur))) {
			c.enqueueRef(old.Namespace, ref)
		}
	}
	if cur == nil {
		return
	}
	if ref := metav1.GetControllerOfNoCopy(cur); ref != nil {
		c.enqueueRef(cur.Namespace, ref)
		return
	}
	if old != nil && reflect.DeepEqual(old.Labels, cur.Labels) && metav1.GetControllerOfNoCopy(old) == nil {
		return
	}
	for _, d := range c.deploymentsForReplicaSet(cur) {
		c.enqueue(d)
	}
}

// enqueueRef queues the Deployment ref names, if it is one and still has
// ref's uid (kube's resolveControllerRef).
func (c *Controller) enqueueRef(ns string, ref *metav1.OwnerReference) {
	if d := c.resolveControllerRef(ns, ref); d != nil {
		c.enqueue(d)
	}
}

func (c *Controller) resolveControllerRef(ns string, ref *metav1.OwnerReference) *apps.Deployment {
	if ref.Kind != controllerKind.Kind {
		return nil
	}
	d := c.deployment(ns, ref.Name)
	if d == nil || d.UID != ref.UID {
		return nil
	}
	return d
}

// deploymentsForReplicaSet is kube's util.GetDeploymentsForReplicaSet:
// the Deployments of rs's namespace whose selector matches its labels.
func (c *Controller) deploymentsForReplicaSet(rs *apps.ReplicaSet) []*apps.Deployment {
	if len(rs.Labels) == 0 {
		return nil
	}
	var out []*apps.Deployment
	for _, u := range c.deps.List(rs.Namespace) {
		d := c.decodeDeployment(u)
		if d == nil {
			continue
		}
		sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
		if err != nil || sel.Empty() || !sel.Matches(labels.Set(rs.Labels)) {
			continue
		}
		out = append(out, d)
	}
	return out
}

// podDeleted queues a Recreate Deployment when one of its pods is gone
// (kube's deletePod).
func (c *Controller) podDeleted(p *corev1.Pod) {
	ref := controller.ControllerOf(p.GetMetadata())
	if ref == nil || ref.GetKind() != "ReplicaSet" {
		return
	}
	rs, err := c.rsLister.ReplicaSets(p.GetMetadata().GetNamespace()).Get(ref.GetName())
	if err != nil || string(rs.UID) != ref.GetUid() {
		return
	}
	dref := metav1.GetControllerOfNoCopy(rs)
	if dref == nil {
		return
	}
	if d := c.resolveControllerRef(rs.Namespace, dref); d != nil && d.Spec.Strategy.Type == apps.RecreateDeploymentStrategyType {
		c.enqueue(d)
	}
}

func (c *Controller) enqueue(d *apps.Deployment) { c.runner.Add(controller.Key(d.Namespace, d.Name)) }

// enqueueRateLimited queues d again soon (kube's, used when a Deployment
// without progress must be checked again).
func (c *Controller) enqueueRateLimited(d *apps.Deployment) {
	c.runner.AddAfter(controller.Key(d.Namespace, d.Name), time.Second)
}

func (c *Controller) enqueueAfter(d *apps.Deployment, after time.Duration) {
	c.runner.AddAfter(controller.Key(d.Namespace, d.Name), after)
}

// syncKey is kube's syncDeployment for one key, on the replica that owns it.
// It decides only from informers that show every write its previous
// syncs made (Runner.Expect); until they do, it waits for them.
func (c *Controller) syncKey(ctx context.Context, key string) error {
	ns, name, err := controller.SplitKey(key)
	if err != nil {
		return nil
	}
	// The informers' revisions are read before anything is read from
	// them: a Deployment read first could be older than a revision read
	// after it, and satisfy an expectation it does not show.
	depRev, setRev := c.deps.Revision(), c.sets.Revision()
	deployment := c.deployment(ns, name)
	if deployment == nil {
		c.runner.Forget(expectKey(key, objects.Deployments))
		c.runner.Forget(expectKey(key, objects.ReplicaSets))
		return nil
	}
	if !c.runner.Satisfied(expectKey(key, objects.Deployments), depRev) ||
		!c.runner.Satisfied(expectKey(key, objects.ReplicaSets), setRev) {
		c.runner.AddAfter(key, time.Second) // in case no informer event comes
		return nil
	}
	ctx = withKey(ctx, key)
	d := deployment.DeepCopy()

	everything := metav1.LabelSelector{}
	if reflect.DeepEqual(d.Spec.Selector, &everything) {
		c.eventRecorder.Eventf(d, v1.EventTypeWarning, "SelectingAll", "This deployment is selecting all pods. A non-empty selector is required.")
		if d.Status.ObservedGeneration < d.Generation {
			d.Status.ObservedGeneration = d.Generation
			_, _ = c.client.AppsV1().Deployments(d.Namespace).UpdateStatus(ctx, d, metav1.UpdateOptions{})
		}
		return nil
	}

	rsList, err := c.getReplicaSetsForDeployment(ctx, d)
	if err != nil {
		return err
	}
	if d.DeletionTimestamp != nil {
		return c.syncStatusOnly(ctx, d, rsList)
	}
	if err = c.checkPausedConditions(ctx, d); err != nil {
		return err
	}
	if d.Spec.Paused {
		return c.sync(ctx, d, rsList)
	}
	if getRollbackTo(d) != nil {
		return c.rollback(ctx, d, rsList)
	}
	scalingEvent, err := c.isScalingEvent(ctx, d, rsList)
	if err != nil {
		return err
	}
	if scalingEvent {
		return c.sync(ctx, d, rsList)
	}
	switch d.Spec.Strategy.Type {
	case apps.RecreateDeploymentStrategyType:
		return c.rolloutRecreate(ctx, d, rsList, c.getPodMapForDeployment(d, rsList))
	case apps.RollingUpdateDeploymentStrategyType:
		return c.rolloutRolling(ctx, d, rsList)
	}
	return fmt.Errorf("unexpected deployment strategy type: %s", d.Spec.Strategy.Type)
}

// getReplicaSetsForDeployment is kube's: the ReplicaSets of d's namespace
// it controls, adopting the orphans its selector matches (after a fresh
// read shows d is not being deleted) and releasing its own that no longer
// match, through kube's ReplicaSetControllerRefManager.
func (c *Controller) getReplicaSetsForDeployment(ctx context.Context, d *apps.Deployment) ([]*apps.ReplicaSet, error) {
	var rsList []*apps.ReplicaSet
	for _, u := range c.sets.List(d.Namespace) {
		if rs := c.decodeRS(u); rs != nil {
			rsList = append(rsList, rs)
		}
	}
	sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
	if err != nil {
		return nil, fmt.Errorf("deployment %s/%s has invalid label selector: %v", d.Namespace, d.Name, err)
	}
	canAdopt := kubecontroller.RecheckDeletionTimestamp(func(ctx context.Context) (metav1.Object, error) {
		u, err := c.env.Store.GetKind(ctx, objects.Deployments, d.Namespace, d.Name)
		if err != nil {
			return nil, err
		}
		fresh := &apps.Deployment{}
		if err := fromStored(u.(*corev1.Unstructured), fresh); err != nil {
			return nil, err
		}
		if fresh.UID != d.UID {
			return nil, fmt.Errorf("original Deployment %v/%v is gone: got uid %v, wanted %v", d.Namespace, d.Name, fresh.UID, d.UID)
		}
		return fresh, nil
	})
	cm := kubecontroller.NewReplicaSetControllerRefManager(c.rsControl, d, sel, controllerKind, canAdopt)
	return cm.ClaimReplicaSets(ctx, rsList)
}

// getPodMapForDeployment is kube's: the pods of each of rsList, by the
// ReplicaSet's uid, as their controller references say.
func (c *Controller) getPodMapForDeployment(d *apps.Deployment, rsList []*apps.ReplicaSet) map[types.UID][]*v1.Pod {
	podMap := make(map[types.UID][]*v1.Pod, len(rsList))
	for _, rs := range rsList {
		podMap[rs.UID] = nil
	}
	for _, p := range c.podInf.List(d.Namespace) {
		ref := controller.ControllerOf(p.GetMetadata())
		if ref == nil {
			continue
		}
		if _, ok := podMap[types.UID(ref.GetUid())]; ok {
			kp := controller.KubePod(p)
			podMap[types.UID(ref.GetUid())] = append(podMap[types.UID(ref.GetUid())], kp)
		}
	}
	return podMap
}
