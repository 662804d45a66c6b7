package controller

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/podflow/podflow/services/informer"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/workqueue"
)

// SyncFunc syncs one key ("namespace/name" of the controller's object).
// It is called only on the replica that owns the key, never twice at once
// for one key; an error retries it with backoff.
type SyncFunc func(ctx context.Context, key string) error

// Runner runs a controller's syncs on one replica: a work queue of the
// keys of its objects, the keys this replica owns (Members), and the
// store revisions each key waits for (Expect).
type Runner struct {
	cfg     Config
	members *Members
	queue   *workqueue.Queue
	sync    SyncFunc
	keys    func() []string
	lazy    *informer.Lazy // LazyPods', synced before each sync

	mu      sync.Mutex
	ctx     context.Context            // Start's
	expect  map[string]int64           // key -> store revision its informers must reach
	pending map[string]map[string]bool // key -> pod names asked whose outcome is unknown
}

// New returns the Runner of a controller stage replica over st: sync
// syncs a key, keys lists every key (a Reconcile and a change of the
// replicas queue them all).
func New(st *objects.Store, cfg Config, sync SyncFunc, keys func() []string) (*Runner, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Queue.Log == nil {
		cfg.Queue.Log = cfg.Log
	}
	r := &Runner{cfg: cfg, queue: workqueue.New(cfg.Queue), sync: sync, keys: keys, expect: map[string]int64{},
		pending: map[string]map[string]bool{}}
	m, err := newMembers(cfg, st)
	if err != nil {
		return nil, err
	}
	m.onChange = r.queueAll
	r.members = m
	return r, nil
}

// Members returns the replica's view of its peers.
func (r *Runner) Members() *Members { return r.members }

// Add queues key; a replica that does not own it drops it when its turn
// comes.
func (r *Runner) Add(key string) { r.queue.Add(key) }

// AddAfter queues key once d passed.
func (r *Runner) AddAfter(key string, d time.Duration) { r.queue.AddAfter(key, d) }

// Start adds the Lease informer to infs and starts the group on g (it
// returns once every informer synced), then renews this replica's Lease
// and runs the workers until ctx ends; the Lease is released after the
// last sync returned, so the other replicas take its keys at once.
func (r *Runner) Start(ctx context.Context, g *errgroup.Group, infs *informer.Group) error {
	r.mu.Lock()
	r.ctx = ctx
	r.mu.Unlock()
	infs.Add(r.members.inf)
	if err := infs.Start(ctx, g); err != nil {
		return err
	}
	g.Go(func() error {
		var wg sync.WaitGroup
		wg.Add(2)
		go func() {
			defer wg.Done()
			r.members.run(ctx)
		}()
		go func() {
			defer wg.Done()
			_ = r.queue.Run(ctx, r.syncKey)
		}()
		wg.Wait()
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		r.members.release(rctx)
		return nil
	})
	return nil
}

// Context is Start's context (Background before Start): the context of a
// controller's work outside a sync, such as an Event it records from an
// informer's handler.
func (r *Runner) Context() context.Context {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ctx == nil {
		return context.Background()
	}
	return r.ctx
}

// InformerKeys returns the key ("namespace/name") of every object inf
// holds: what a controller's keys function (New) lists.
func InformerKeys[T objects.Object](inf *informer.Informer[T]) []string {
	var out []string
	for _, o := range inf.List("") {
		out = append(out, Key(o.GetMetadata().GetNamespace(), o.GetMetadata().GetName()))
	}
	return out
}

// Reconcile queues every key.
func (r *Runner) Reconcile(context.Context) error {
	r.queueAll()
	return nil
}

func (r *Runner) queueAll() {
	for _, k := range r.keys() {
		r.queue.Add(k)
	}
}

func (r *Runner) syncKey(ctx context.Context, key string) error {
	owned, wait := r.members.Owns(key)
	if !owned {
		if wait > 0 {
			r.queue.AddAfter(key, wait)
		}
		return nil
	}
	if r.lazy != nil {
		if err := r.lazy.WaitForSync(ctx); err != nil {
			return err
		}
	}
	return r.sync(ctx, key)
}

// LazyPods returns pods, the controller's pod informer, run only while
// wanted returns true and for Config.PodsIdle after (informer.Lazy),
// asked first once every member of after has synced: a controller with
// no object of its own kind holds no watch of every pod. The caller adds
// the Lazy to the Group it passes to Start in pods' place, and Pokes it
// from its own kind's handlers; wanted is typically that kind's
// informer's Len() > 0. Every sync waits until the informer has synced
// if it is wanted, so a sync never decides from a pod list not yet in.
// Call once, before Start.
func (r *Runner) LazyPods(pods informer.Resettable, wanted func() bool, after ...informer.Member) (*informer.Lazy, error) {
	if r.lazy != nil {
		return nil, errors.New("controller: LazyPods called twice")
	}
	l, err := informer.NewLazy(pods, wanted, r.cfg.PodsIdle, after...)
	if err != nil {
		return nil, err
	}
	r.lazy = l
	return l, nil
}

// Lazy returns the Lazy of LazyPods, or nil (tests read whether it
// runs).
func (r *Runner) Lazy() *informer.Lazy { return r.lazy }

// Owns reports whether this replica may sync key now (Members.Owns). A
// long sync checks it between its steps and stops when it lost the key.
func (r *Runner) Owns(key string) bool {
	ok, _ := r.members.Owns(key)
	return ok
}

// Expect records that key's informers must reach store revision rev
// before key is synced again: the revision of a write the sync made
// (a pod created, marked deleted, adopted), which the informers show
// only once they reached it. This is kube's "expectations" made exact: no
// counting and no timeout, a revision.
func (r *Runner) Expect(key string, rev int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if rev > r.expect[key] {
		r.expect[key] = rev
	}
}

// Satisfied reports whether the informers, at revision have, reflect
// every write key expects (Expect); a satisfied expectation is
// forgotten.
func (r *Runner) Satisfied(key string, have int64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	want, ok := r.expect[key]
	if !ok {
		return true
	}
	if have >= want {
		delete(r.expect, key)
		return true
	}
	return false
}

// Forget drops key's expectation and pending names (its object is gone).
func (r *Runner) Forget(key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.expect, key)
	delete(r.pending, key)
}

// SetPending records that the creation of pod name for key got no answer
// (ErrUncertain: it may still land), or, with pending false, that it got
// one. A sync counts pending names as pods on their way and asks for them
// again before it decides anything else, so an unanswered creation is
// never replaced by another pod.
func (r *Runner) SetPending(key, name string, pending bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !pending {
		delete(r.pending[key], name)
		if len(r.pending[key]) == 0 {
			delete(r.pending, key)
		}
		return
	}
	if r.pending[key] == nil {
		r.pending[key] = map[string]bool{}
	}
	r.pending[key][name] = true
}

// Pending returns key's pending pod names (SetPending), sorted.
func (r *Runner) Pending(key string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, 0, len(r.pending[key]))
	for n := range r.pending[key] {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}
