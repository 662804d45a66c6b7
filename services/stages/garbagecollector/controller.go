package garbagecollector

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/pipeline"
	"github.com/podflow/podflow/services/stage"
	"github.com/podflow/podflow/services/workqueue"
)

// watchPrefix is where the collector watches for deletes: every stored
// object.
const watchPrefix = "/registry/"

// Config configures a Controller.
type Config struct {
	// Queue configures the retries of a namespace whose sync failed.
	Queue workqueue.Config
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config { return Config{Queue: workqueue.DefaultConfig()} }

// Validate checks the Config.
func (c Config) Validate() error { return c.Queue.Validate() }

// Controller deletes the dependents of deleted owners.
type Controller struct {
	env   stage.Env
	cfg   Config
	queue *workqueue.Queue
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
	return &Controller{env: env, cfg: cfg, queue: workqueue.New(cfg.Queue)}, nil
}

// Handle is never called: the stage consumes no events.
func (c *Controller) Handle(context.Context, *bus.Delivery) error {
	return bus.Permanent(errors.New("garbagecollector: the controller consumes no events"))
}

// Start runs the watch of deletes and the worker on g.
func (c *Controller) Start(ctx context.Context, g *errgroup.Group) error {
	g.Go(func() error { return c.watch(ctx) })
	g.Go(func() error { return c.queue.Run(ctx, c.Sync) })
	return nil
}

// Reconcile queues every namespace.
func (c *Controller) Reconcile(ctx context.Context) error {
	nss, _, err := objects.List[*corev1.Namespace](ctx, c.env.Store, "")
	if err != nil {
		return err
	}
	for _, ns := range nss {
		c.queue.Add(ns.GetMetadata().GetName())
	}
	return nil
}

// watch queues the namespace of every deleted object (every namespace
// for a cluster-scoped one) until ctx ends. A watch that breaks is
// started again after a Reconcile (what it missed is resynced).
func (c *Controller) watch(ctx context.Context) error {
	backoff := 100 * time.Millisecond
	for {
		err := c.watchOnce(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if c.env.Log != nil {
			c.env.Log.Warn("garbagecollector: watch ended; resyncing", "err", err)
		}
		_ = c.Reconcile(ctx)
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
			return nil
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

func (c *Controller) watchOnce(ctx context.Context) error {
	_, rev, err := c.env.Store.KV().List(ctx, objects.Namespaces.Prefix(""), raftstore.WithLimit(1))
	if err != nil {
		return err
	}
	w, err := c.env.Store.KV().Watch(ctx, watchPrefix, rev)
	if err != nil {
		return err
	}
	defer w.Stop()
	for ev := range w.Events() {
		if ev.KV == nil || ev.Type != raftstore.EventDelete {
			continue
		}
		switch ns, namespaced := namespaceOf(ev.KV.Key); {
		case ns != "":
			c.queue.Add(ns)
		case !namespaced:
			if err := c.Reconcile(ctx); err != nil {
				return err
			}
		}
	}
	return w.Err()
}

// namespaceOf is the namespace of a namespaced object's store key, and
// whether the key is a namespaced kind's; ("", false) for a
// cluster-scoped object or another key.
func namespaceOf(key string) (string, bool) {
	var best objects.Kind
	for _, k := range objects.Kinds() {
		if p := k.Prefix(""); strings.HasPrefix(key, p) && len(p) > len(best.Prefix("")) {
			best = k
		}
	}
	if best.Name == "" || !best.Namespaced {
		return "", false
	}
	ns, _, ok := strings.Cut(strings.TrimPrefix(key, best.Prefix("")), "/")
	if !ok {
		return "", true
	}
	return ns, true
}

// Sync collects the garbage of namespace ns: every dependent of it whose
// owners are all gone is deleted, and a dependent with an owner left
// loses the references to the gone ones.
func (c *Controller) Sync(ctx context.Context, ns string) error {
	owners := map[string]bool{} // owner uid → exists, for this sync
	var errs []error
	for _, k := range pipeline.GarbageCollectorDependents() {
		deps, _, err := c.env.Store.ListKind(ctx, k, ns)
		if err != nil {
			return err
		}
		for _, d := range deps {
			if err := c.collect(ctx, k, d, owners); err != nil && !errors.Is(err, raftstore.ErrNotFound) {
				errs = append(errs, fmt.Errorf("garbagecollector: %s %s/%s: %w", k.Resource, ns, d.GetMetadata().GetName(), err))
			}
		}
	}
	return errors.Join(errs...)
}

// collect judges one dependent.
func (c *Controller) collect(ctx context.Context, k objects.Kind, d objects.Object, owners map[string]bool) error {
	md := d.GetMetadata()
	refs := md.GetOwnerReferences()
	if len(refs) == 0 || md.GetDeletionTimestamp() != nil {
		return nil // not a dependent, or its deletion is under way
	}
	var live []*corev1.OwnerReference
	for _, ref := range refs {
		ok, seen := owners[ref.GetUid()]
		if !seen {
			var err error
			if ok, err = c.ownerExists(ctx, md.GetNamespace(), ref); err != nil {
				return err
			}
			owners[ref.GetUid()] = ok
		}
		if ok {
			live = append(live, ref)
		}
	}
	switch {
	case len(live) == len(refs):
		return nil
	case len(live) > 0:
		md.OwnerReferences = live
		_, err := c.env.Store.Update(ctx, d)
		c.logged("removed the references to deleted owners", k, md, err)
		return err
	case k.Name == objects.Pods.Name:
		_, err := stage.DeletePod(ctx, c.env, md.GetNamespace(), md.GetName(), nil)
		c.logged("deleting: its owners are gone", k, md, err)
		return err
	default:
		_, _, err := stage.DeleteObject(ctx, c.env.Store, k, d)
		c.logged("deleting: its owners are gone", k, md, err)
		return err
	}
}

func (c *Controller) logged(msg string, k objects.Kind, md *corev1.ObjectMeta, err error) {
	if c.env.Log != nil && err == nil {
		c.env.Log.Info("garbagecollector: "+msg, "kind", k.Name, "namespace", md.GetNamespace(), "name", md.GetName())
	}
}

// ownerExists reports whether the owner ref names exists: an object of
// its kind, in namespace ns if that kind is namespaced, with its uid. An
// owner of a kind the store does not know is taken to exist.
func (c *Controller) ownerExists(ctx context.Context, ns string, ref *corev1.OwnerReference) (bool, error) {
	k, ok := kindOf(ref)
	if !ok {
		return true, nil // a kind the store does not know
	}
	if !k.Namespaced {
		ns = ""
	}
	o, err := c.env.Store.GetKind(ctx, k, ns, ref.GetName())
	if errors.Is(err, raftstore.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return o.GetMetadata().GetUid() == ref.GetUid(), nil
}

// kindOf is the kind an ownerReference names, by the group of its
// apiVersion and its kind.
func kindOf(ref *corev1.OwnerReference) (objects.Kind, bool) {
	group, _, ok := strings.Cut(ref.GetApiVersion(), "/")
	if !ok {
		group = ""
	}
	for _, k := range objects.Kinds() {
		if k.APIGroup == group && k.Name == ref.GetKind() {
			return k, true
		}
	}
	return objects.Kind{}, false
}
