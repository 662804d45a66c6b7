package serviceaccount

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"golang.org/x/sync/errgroup"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/informer"
	"github.com/podflow/podflow/services/nslifecycle"
	"github.com/podflow/podflow/services/stage"
	"github.com/podflow/podflow/services/workqueue"
)

// Config configures a Controller.
type Config struct {
	// ServiceAccounts are the names of the accounts every active namespace
	// has (kube's DefaultServiceAccountsControllerOptions: "default").
	ServiceAccounts []string
	// Queue configures the retries of a namespace whose sync failed.
	Queue workqueue.Config
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{ServiceAccounts: []string{"default"}, Queue: workqueue.DefaultConfig()}
}

// Validate checks the Config.
func (c Config) Validate() error {
	if len(c.ServiceAccounts) == 0 {
		return errors.New("serviceaccount: ServiceAccounts is empty")
	}
	for _, n := range c.ServiceAccounts {
		if n == "" {
			return errors.New("serviceaccount: an empty ServiceAccount name")
		}
	}
	return c.Queue.Validate()
}

// Controller keeps the ServiceAccounts of Config in every active
// namespace.
type Controller struct {
	env   stage.Env
	cfg   Config
	queue *workqueue.Queue
	nss   *informer.Informer[*corev1.Namespace]
	sas   *informer.Informer[*corev1.ServiceAccount]
}

var (
	_ stage.Handler    = (*Controller)(nil)
	_ stage.Starter    = (*Controller)(nil)
	_ stage.Reconciler = (*Controller)(nil)
)

// New returns a Controller over env's store.
func New(env stage.Env, cfg Config) (*Controller, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Queue.Log == nil {
		cfg.Queue.Log = env.Log
	}
	c := &Controller{env: env, cfg: cfg, queue: workqueue.New(cfg.Queue)}
	ensured := map[string]bool{}
	for _, n := range cfg.ServiceAccounts {
		ensured[n] = true
	}
	var err error
	if c.nss, err = informer.New[*corev1.Namespace](env.Store, "", informer.Handlers[*corev1.Namespace]{
		OnAdd:    func(ns *corev1.Namespace) { c.queue.Add(ns.GetMetadata().GetName()) },
		OnUpdate: func(_, ns *corev1.Namespace) { c.queue.Add(ns.GetMetadata().GetName()) },
	}); err != nil {
		return nil, err
	}
	if c.sas, err = informer.NewMeta[*corev1.ServiceAccount](env.Store, "", informer.Handlers[*corev1.ServiceAccount]{
		OnDelete: func(sa *corev1.ServiceAccount) {
			if ensured[sa.GetMetadata().GetName()] {
				c.queue.Add(sa.GetMetadata().GetNamespace())
			}
		},
	}); err != nil {
		return nil, err
	}
	return c, nil
}

// Handle is never called: the stage consumes no events.
func (c *Controller) Handle(context.Context, *bus.Delivery) error {
	return bus.Permanent(errors.New("serviceaccount: the controller consumes no events"))
}

// Start runs the informers and the worker on g; it returns once the
// informers are synced.
func (c *Controller) Start(ctx context.Context, g *errgroup.Group) error {
	var infs informer.Group
	infs.Add(c.nss, c.sas)
	if err := infs.Start(ctx, g); err != nil {
		return err
	}
	g.Go(func() error { return c.queue.Run(ctx, c.Sync) })
	return nil
}

// Reconcile queues every namespace.
func (c *Controller) Reconcile(context.Context) error {
	for _, ns := range c.nss.List("") {
		c.queue.Add(ns.GetMetadata().GetName())
	}
	return nil
}

// Sync creates the accounts missing from the namespace name, if it is
// Active, as kube's syncNamespace.
func (c *Controller) Sync(ctx context.Context, name string) error {
	ns, ok := c.nss.Get("", name)
	// A namespace stored without a phase is Active (kube defaults it).
	if phase := ns.GetStatus().GetPhase(); !ok || (phase != nslifecycle.PhaseActive && phase != "") || nslifecycle.Terminating(ns) {
		return nil
	}
	var errs []error
	for _, sa := range c.cfg.ServiceAccounts {
		if _, ok := c.sas.Get(name, sa); ok {
			continue
		}
		obj := &corev1.ServiceAccount{Metadata: &corev1.ObjectMeta{Name: sa, Namespace: name,
			Uid: uuid.NewString(), CreationTimestamp: timestamppb.Now()}}
		created, err := nslifecycle.CreateIn(ctx, c.env.Store, ns, obj)
		if err != nil {
			errs = append(errs, fmt.Errorf("create serviceaccount %s/%s: %w", name, sa, err))
			continue
		}
		if created && c.env.Log != nil {
			c.env.Log.Info("created serviceaccount", "namespace", name, "name", sa)
		}
	}
	return errors.Join(errs...)
}
