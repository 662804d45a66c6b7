package disruption

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/sync/errgroup"
	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	policy "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/klog/v2"

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

// Config configures the controller.
type Config struct {
	// Controller configures the replica's Runner (work queue, Leases).
	Controller controller.Config
	// Now is the clock (nil: time.Now); tests move it.
	Now func() time.Time
}

// DefaultConfig returns the defaults for a replica of the stage.
func DefaultConfig(replica string) Config {
	return Config{Controller: controller.DefaultConfig(pipeline.Disruption, replica)}
}

// Validate checks the Config.
func (c Config) Validate() error {
	if c.Controller.Stage != pipeline.Disruption {
		return fmt.Errorf("disruption: stage %q is not %s", c.Controller.Stage, pipeline.Disruption)
	}
	return c.Controller.Validate()
}

// Controller is one replica of the disruption controller stage. Its
// fields pdbLister, podLister, rsLister, dLister, ssLister, rcLister,
// recorder, clock, kubeClient and getUpdater are what kube's
// DisruptionController's methods (kube_disruption.go) call.
type Controller struct {
	env    stage.Env
	cfg    Config
	runner *controller.Runner
	reg    *registry.Registry
	pdbInf *informer.Informer[*corev1.Unstructured]
	podInf *informer.Informer[*corev1.Pod]
	// lazy runs podInf only while there is a PodDisruptionBudget: kube's
	// pod handlers queue the budgets covering a pod, and with none
	// there is nothing to do (the stale DisruptionTarget clean-up,
	// which needs no budget, is not done: doc.go).
	lazy   *informer.Lazy
	events *controller.Events
	log    *slog.Logger

	pdbLister  pdbLister
	podLister  podLister
	rsLister   *kindLister[*appsv1.ReplicaSet]
	dLister    *kindLister[*appsv1.Deployment]
	ssLister   *kindLister[*appsv1.StatefulSet]
	rcLister   *kindLister[*v1.ReplicationController]
	recorder   recorder
	clock      realClock
	kubeClient kubeClient
	getUpdater func() updater
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
	c.podLister, c.recorder, c.clock, c.kubeClient = podLister{c}, recorder{c}, realClock{c}, kubeClient{c}
	c.getUpdater = func() updater { return c.writePdbStatus }
	c.events = &controller.Events{Recorder: &events.Recorder{Store: env.Store, Component: "controllermanager", Instance: env.Replica}}
	var err error
	if c.runner, err = controller.New(env.Store, cfg.Controller, c.syncKey, c.keys); err != nil {
		return nil, err
	}
	if c.pdbInf, err = informer.NewKind(env.Store, objects.PodDisruptionBudgets, "", informer.Handlers[*corev1.Unstructured]{
		OnAdd: func(u *corev1.Unstructured) {
			c.lazy.Poke()
			c.runner.Add(keyOf(u.GetMetadata()))
		},
		OnUpdate: func(_, u *corev1.Unstructured) { c.runner.Add(keyOf(u.GetMetadata())) },
		OnDelete: func(u *corev1.Unstructured) {
			c.lazy.Poke()
			md := u.GetMetadata()
			c.pdbLister.forget(md.GetNamespace(), md.GetName())
			c.runner.Forget(keyOf(md))
		},
	}); err != nil {
		return nil, err
	}
	c.pdbLister = pdbLister{newLister[*policy.PodDisruptionBudget](c.pdbInf, objects.PodDisruptionBudgets)}
	// Pods: a change queues the budgets covering the pod, before and after
	// (kube's addPod, updatePod and deletePod queue one of them).
	// They are read as controller.KubePod only.
	if c.podInf, err = controller.NewPodSpecInformer(env.Store, informer.Handlers[*corev1.Pod]{
		OnAdd:    func(p *corev1.Pod) { c.podChanged(nil, p) },
		OnUpdate: func(old, p *corev1.Pod) { c.podChanged(old, p) },
		OnDelete: func(p *corev1.Pod) { c.podChanged(p, nil) },
	}, controller.KubePodSpecFields...); err != nil {
		return nil, err
	}
	if c.lazy, err = c.runner.LazyPods(c.podInf, func() bool { return c.pdbInf.Len() > 0 }, c.pdbInf); err != nil {
		return nil, err
	}
	// The pods' controllers, read for their scale (kube's listers).
	lister := func(k objects.Kind) (*informer.Informer[*corev1.Unstructured], error) {
		return informer.NewKind(env.Store, k, "", informer.Handlers[*corev1.Unstructured]{})
	}
	for _, l := range []struct {
		k   objects.Kind
		set func(*informer.Informer[*corev1.Unstructured])
	}{
		{objects.ReplicaSets, func(i *informer.Informer[*corev1.Unstructured]) {
			c.rsLister = newLister[*appsv1.ReplicaSet](i, objects.ReplicaSets)
		}},
		{objects.Deployments, func(i *informer.Informer[*corev1.Unstructured]) {
			c.dLister = newLister[*appsv1.Deployment](i, objects.Deployments)
		}},
		{objects.StatefulSets, func(i *informer.Informer[*corev1.Unstructured]) {
			c.ssLister = newLister[*appsv1.StatefulSet](i, objects.StatefulSets)
		}},
		{objects.ReplicationControllers, func(i *informer.Informer[*corev1.Unstructured]) {
			c.rcLister = newLister[*v1.ReplicationController](i, objects.ReplicationControllers)
		}},
	} {
		inf, err := lister(l.k)
		if err != nil {
			return nil, err
		}
		l.set(inf)
	}
	return c, nil
}

func keyOf(md *corev1.ObjectMeta) string { return controller.Key(md.GetNamespace(), md.GetName()) }

// Handle is never called: the stage consumes no events.
func (c *Controller) Handle(context.Context, *bus.Delivery) error {
	return bus.Permanent(errors.New("disruption: the controller consumes no events"))
}

// Start runs the informers, the Lease and the workers on g; it returns
// once the informers are synced.
func (c *Controller) Start(ctx context.Context, g *errgroup.Group) error {
	var infs informer.Group
	infs.Add(c.pdbInf, c.lazy, c.rsLister.inf, c.dLister.inf, c.ssLister.inf, c.rcLister.inf)
	return c.runner.Start(ctx, g, &infs)
}

// Reconcile queues every budget.
func (c *Controller) Reconcile(ctx context.Context) error { return c.runner.Reconcile(ctx) }

// Runner is the replica's Runner (tests read its Members).
func (c *Controller) Runner() *controller.Runner { return c.runner }

func (c *Controller) keys() []string { return controller.InformerKeys(c.pdbInf) }

// baseCtx is Start's context (Background before Start).
func (c *Controller) baseCtx() context.Context { return c.runner.Context() }

func (c *Controller) now() time.Time {
	if c.cfg.Now != nil {
		return c.cfg.Now()
	}
	return time.Now()
}

// podChanged queues every budget whose selector matches the pod's labels
// before (old) or after (cur) the change.
func (c *Controller) podChanged(old, cur *corev1.Pod) {
	for _, p := range []*corev1.Pod{old, cur} {
		if p == nil {
			continue
		}
		md := p.GetMetadata()
		for _, pdb := range c.pdbLister.PodDisruptionBudgets(md.GetNamespace()).List() {
			sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
			if err != nil || !sel.Matches(labels.Set(md.GetLabels())) {
				continue
			}
			c.runner.Add(controller.Key(pdb.Namespace, pdb.Name))
		}
	}
}

// enqueuePdbForRecheck is kube's: the budget is synced again after delay
// (when an entry of its disruptedPods expires).
func (c *Controller) enqueuePdbForRecheck(_ klog.Logger, pdb *policy.PodDisruptionBudget, delay time.Duration) {
	c.runner.AddAfter(controller.Key(pdb.Namespace, pdb.Name), delay)
}

// syncKey is kube's sync of one budget, on the replica that owns it, once
// the budget informer shows the status this replica wrote last
// (Runner.Expect): it never decides from a budget older than its own
// write.
func (c *Controller) syncKey(ctx context.Context, key string) error {
	if !c.runner.Satisfied(key, c.pdbInf.Revision()) {
		c.runner.AddAfter(key, time.Second) // in case no informer event comes
		return nil
	}
	ctx = klog.NewContext(ctx, logr.FromSlogHandler(c.log.Handler()))
	return c.sync(ctx, key)
}
