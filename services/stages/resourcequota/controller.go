package resourcequota

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"
	k8scorev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	kquota "k8s.io/apiserver/pkg/quota/v1"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/informer"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/quota"
	"github.com/podflow/podflow/services/stage"
	"github.com/podflow/podflow/services/workqueue"
)

// watchPrefix is where the controller watches for deletes: every stored
// object.
const watchPrefix = "/registry/"

// Config configures a Controller.
type Config struct {
	// Queue configures the retries of a namespace whose sync failed.
	Queue workqueue.Config
	// WatchIdle is how long the watch of every write runs on after the
	// last quota is gone; with no quota there is none. 0 keeps it running
	// once started.
	WatchIdle time.Duration
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config { return Config{Queue: workqueue.DefaultConfig(), WatchIdle: time.Minute} }

// Validate checks the Config.
func (c Config) Validate() error {
	if c.WatchIdle < 0 {
		return fmt.Errorf("resourcequota: WatchIdle %s is negative", c.WatchIdle)
	}
	return c.Queue.Validate()
}

// errIdle ends a watch that no quota wanted for Config.WatchIdle.
var errIdle = errors.New("resourcequota: no quota left")

// Controller keeps the status of every ResourceQuota.
type Controller struct {
	env    stage.Env
	cfg    Config
	queue  *workqueue.Queue
	quotas *informer.Informer[*corev1.Unstructured]
	poke   chan struct{} // a quota was added: start the watch if none runs
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
	c := &Controller{env: env, cfg: cfg, queue: workqueue.New(cfg.Queue), poke: make(chan struct{}, 1)}
	enqueue := func(q *corev1.Unstructured) { c.queue.Add(q.GetMetadata().GetNamespace()) }
	var err error
	if c.quotas, err = informer.NewKind(env.Store, objects.ResourceQuotas, "", informer.Handlers[*corev1.Unstructured]{
		OnAdd: func(q *corev1.Unstructured) {
			select {
			case c.poke <- struct{}{}:
			default:
			}
			enqueue(q)
		},
		// Only a change of the spec, or a status that does not cover it
		// yet, as kube's: status.used changes are admission's charges, and
		// a recount then could miss an object charged but not yet
		// written.
		OnUpdate: func(old, q *corev1.Unstructured) {
			if specChanged(old, q) || !statusCoversSpec(q) {
				enqueue(q)
			}
		},
	}); err != nil {
		return nil, err
	}
	return c, nil
}

// Handle is never called: the stage consumes no events.
func (c *Controller) Handle(context.Context, *bus.Delivery) error {
	return bus.Permanent(errors.New("resourcequota: the controller consumes no events"))
}

// Start runs the informer, the watch of deletes and the worker on g; it
// returns once the informer is synced.
func (c *Controller) Start(ctx context.Context, g *errgroup.Group) error {
	var infs informer.Group
	infs.Add(c.quotas)
	if err := infs.Start(ctx, g); err != nil {
		return err
	}
	g.Go(func() error { return c.watch(ctx) })
	g.Go(func() error { return c.queue.Run(ctx, c.Sync) })
	return nil
}

// Reconcile queues every namespace that has a quota.
func (c *Controller) Reconcile(context.Context) error {
	for _, q := range c.quotas.List("") {
		c.queue.Add(q.GetMetadata().GetNamespace())
	}
	return nil
}

// watch queues the namespace of every deleted object, and of every
// changed pod, that has a quota, until ctx ends. The watch of every write
// runs only while there are quotas (and Config.WatchIdle after the last
// one went): a store with none spends nothing on this controller. A watch
// that breaks is started again after a Reconcile (what it missed is
// resynced).
func (c *Controller) watch(ctx context.Context) error {
	backoff := 100 * time.Millisecond
	for {
		for c.quotas.Len() == 0 {
			select {
			case <-c.poke:
			case <-ctx.Done():
				return nil
			}
		}
		err := c.watchOnce(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, errIdle) {
			backoff = 100 * time.Millisecond
			continue
		}
		if c.env.Log != nil {
			c.env.Log.Warn("resourcequota: watch ended; resyncing", "err", err)
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

// watchOnce watches every write from now, until the watch breaks or, with
// Config.WatchIdle, no quota was left for that long (errIdle). Once the
// watch runs it queues every namespace with quotas: a quota that appeared
// while no watch ran is recounted from reads after the watch's start, so
// no delete before it is missed.
func (c *Controller) watchOnce(ctx context.Context) error {
	_, rev, err := c.env.Store.KV().List(ctx, objects.ResourceQuotas.Prefix(""), raftstore.WithLimit(1))
	if err != nil {
		return err
	}
	w, err := c.env.Store.KV().Watch(ctx, watchPrefix, rev)
	if err != nil {
		return err
	}
	defer w.Stop()
	_ = c.Reconcile(ctx)
	var idle <-chan time.Time
	if c.cfg.WatchIdle > 0 {
		t := time.NewTicker(c.cfg.WatchIdle / 4)
		defer t.Stop()
		idle = t.C
	}
	wanted := time.Now()
	pods := objects.Pods.Prefix("")
	for {
		select {
		case <-idle:
			if c.quotas.Len() > 0 {
				wanted = time.Now()
			} else if time.Since(wanted) >= c.cfg.WatchIdle {
				return errIdle
			}
			continue
		case ev, ok := <-w.Events():
			if !ok {
				return w.Err()
			}
			if ev.KV == nil {
				continue
			}
			key := ev.KV.Key
			ns := namespaceOf(key)
			if ns == "" || len(c.quotas.List(ns)) == 0 {
				continue
			}
			if ev.Type == raftstore.EventDelete || (strings.HasPrefix(key, pods) && releases(ev.KV)) {
				c.queue.Add(ns)
			}
		}
	}
}

// releases reports whether a stored pod no longer uses its quota, as
// kube's replenishment: it finished (Succeeded, Failed) or is being
// deleted.
func releases(kv *raftstore.KV) bool {
	var p corev1.Pod
	if objects.Decode(kv, &p) != nil {
		return false
	}
	phase := p.GetStatus().GetPhase()
	return phase == "Succeeded" || phase == "Failed" || p.GetMetadata().GetDeletionTimestamp() != nil
}

// specChanged reports whether a quota's spec differs between two
// revisions.
func specChanged(old, cur *corev1.Unstructured) bool {
	a, errA := quota.ToKubeQuota(old)
	b, errB := quota.ToKubeQuota(cur)
	if errA != nil || errB != nil {
		return true
	}
	return !equality.Semantic.DeepEqual(a.Spec, b.Spec)
}

// statusCoversSpec reports whether a quota's status.hard is its
// spec.hard and status.used has every resource of it.
func statusCoversSpec(u *corev1.Unstructured) bool {
	rq, err := quota.ToKubeQuota(u)
	if err != nil {
		return false
	}
	if !kquota.Equals(rq.Spec.Hard, rq.Status.Hard) {
		return false
	}
	for r := range rq.Spec.Hard {
		if _, ok := rq.Status.Used[r]; !ok {
			return false
		}
	}
	return true
}

// namespaceOf is the namespace of a namespaced object's store key, or ""
// (a quota's own key, a cluster-scoped object, another key).
func namespaceOf(key string) string {
	best := ""
	for _, k := range objects.Kinds() {
		if p := k.Prefix(""); k.Namespaced && strings.HasPrefix(key, p) && len(p) > len(best) {
			best = p
		}
	}
	if best == "" || best == objects.ResourceQuotas.Prefix("") {
		return ""
	}
	ns, _, ok := strings.Cut(strings.TrimPrefix(key, best), "/")
	if !ok {
		return ""
	}
	return ns
}

// Sync recomputes the status of every quota of namespace ns from the
// store, as kube's syncResourceQuota, and writes those that changed.
func (c *Controller) Sync(ctx context.Context, ns string) error {
	stored, err := quota.List(ctx, c.env.Store, objects.ResourceQuotas, ns)
	if err != nil {
		return err
	}
	var errs []error
	for _, o := range stored {
		if err := c.syncOne(ctx, o.(*corev1.Unstructured)); err != nil {
			errs = append(errs, fmt.Errorf("resourcequota %s/%s: %w", ns, o.GetMetadata().GetName(), err))
		}
	}
	return errors.Join(errs...)
}

func (c *Controller) syncOne(ctx context.Context, u *corev1.Unstructured) error {
	rq, err := quota.ToKubeQuota(u)
	if err != nil {
		return err
	}
	hard, used, err := quota.Usage(ctx, c.env.Store, rq)
	if err != nil {
		return err
	}
	if kquota.Equals(hard, rq.Status.Hard) && kquota.Equals(used, rq.Status.Used) {
		return nil
	}
	rq.Status = k8scorev1.ResourceQuotaStatus{Hard: hard, Used: used}
	next, err := quota.FromKube(rq)
	if err != nil {
		return err
	}
	if _, err := c.env.Store.Commit(ctx, objects.Txn{}.Compare(next, objects.Revision(u)).Put(next)); err != nil {
		return err // a conflict: charged or changed since; the queue syncs again
	}
	return nil
}
