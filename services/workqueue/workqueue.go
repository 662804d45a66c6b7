// Package workqueue is a controller's queue of keys to sync, as
// client-go's workqueue is for kube-controller-manager's controllers: a
// key queued while already queued is synced once (a burst of changes is
// one sync of the latest state), a key is never synced by two workers at
// once (one added while it syncs is synced again after), a failed sync is
// retried after a delay that doubles up to a bound, and a key may be
// queued for later (AddAfter: a minReadySeconds check, a progress
// deadline).
//
// The caller:
//  1. creates a Queue with New and adds keys from its informers' handlers
//     and its Reconcile (Add and AddAfter never block),
//  2. runs Run on a goroutine it owns; Run starts Config.Workers workers
//     and returns when ctx is done and every sync in progress returned,
//  3. makes sync idempotent: a key may be synced again at any time.
//
// Example:
//
//	q := workqueue.New(workqueue.DefaultConfig())
//	g.Go(func() error { return q.Run(ctx, c.syncNamespace) })
//	q.Add("default")
package workqueue

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// Config configures a Queue.
type Config struct {
	// RetryMin is the delay before the first retry of a failed key; it
	// doubles with each failure in a row, up to RetryMax. Defaults 100ms
	// and 10s.
	RetryMin, RetryMax time.Duration
	// Workers sync distinct keys at once (default 1: one at a time, in
	// the order keys were first queued).
	Workers int
	// Log receives failed syncs (nil: slog.Default()).
	Log *slog.Logger
}

// DefaultConfig returns the defaults documented on Config.
func DefaultConfig() Config {
	return Config{RetryMin: 100 * time.Millisecond, RetryMax: 10 * time.Second, Workers: 1}
}

// Validate checks the Config.
func (c Config) Validate() error {
	if c.RetryMin <= 0 || c.RetryMax < c.RetryMin {
		return fmt.Errorf("workqueue: RetryMin (%s) must be positive and at most RetryMax (%s)", c.RetryMin, c.RetryMax)
	}
	if c.Workers < 0 {
		return fmt.Errorf("workqueue: Workers (%d) is negative", c.Workers)
	}
	return nil
}

// Queue is a set of keys due a sync. It is safe for concurrent use.
type Queue struct {
	cfg Config

	mu         sync.Mutex
	order      []string             // queued keys not in progress, first queued first
	dirty      map[string]bool      // queued (in order, or waiting for its sync in progress to end)
	processing map[string]bool      // syncs in progress
	later      map[string]time.Time // AddAfter: when each key is due
	failures   map[string]int       // failed syncs in a row, per key
	ready      chan struct{}        // holds a token while order is not empty
	wake       chan struct{}        // holds a token when later changed
}

// New returns an empty Queue; a Config that does not validate is
// replaced by DefaultConfig.
func New(cfg Config) *Queue {
	if cfg.Validate() != nil {
		log := cfg.Log
		cfg = DefaultConfig()
		cfg.Log = log
	}
	if cfg.Workers == 0 {
		cfg.Workers = 1
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	return &Queue{cfg: cfg, dirty: map[string]bool{}, processing: map[string]bool{}, later: map[string]time.Time{},
		failures: map[string]int{}, ready: make(chan struct{}, 1), wake: make(chan struct{}, 1)}
}

// Add queues key (once, however often it is added before it is taken).
func (q *Queue) Add(key string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.addLocked(key)
}

func (q *Queue) addLocked(key string) {
	if q.dirty[key] {
		return
	}
	q.dirty[key] = true
	if q.processing[key] {
		return // queued again once its sync returns
	}
	q.order = append(q.order, key)
	signal(q.ready)
}

// AddAfter queues key once d has passed (at once when d <= 0). Of several
// pending AddAfter of one key the earliest holds.
func (q *Queue) AddAfter(key string, d time.Duration) {
	if d <= 0 {
		q.Add(key)
		return
	}
	at := time.Now().Add(d)
	q.mu.Lock()
	defer q.mu.Unlock()
	if t, ok := q.later[key]; ok && !at.Before(t) {
		return
	}
	q.later[key] = at
	signal(q.wake)
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// Len is the number of keys queued and not in progress.
func (q *Queue) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.order)
}

// take returns the first queued key, marking it in progress.
func (q *Queue) take() (string, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.order) == 0 {
		return "", false
	}
	key := q.order[0]
	q.order[0] = ""
	q.order = q.order[1:]
	if len(q.order) > 0 {
		signal(q.ready) // for the next worker
	}
	delete(q.dirty, key)
	q.processing[key] = true
	return key, true
}

// done ends key's sync: a failure schedules its retry, and a key added
// during the sync is queued again.
func (q *Queue) done(key string, err error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	delete(q.processing, key)
	if err != nil {
		n := q.failures[key]
		q.failures[key] = n + 1
		delay := q.cfg.RetryMin << min(n, 30)
		if delay > q.cfg.RetryMax || delay <= 0 {
			delay = q.cfg.RetryMax
		}
		q.cfg.Log.Warn("sync failed; retrying", "key", key, "in", delay, "err", err)
		if t, ok := q.later[key]; !ok || time.Now().Add(delay).Before(t) {
			q.later[key] = time.Now().Add(delay)
			signal(q.wake)
		}
	} else {
		delete(q.failures, key)
	}
	if q.dirty[key] {
		q.order = append(q.order, key)
		signal(q.ready)
	}
}

// due queues the keys whose AddAfter time has come and returns when the
// next one is due (zero when none waits).
func (q *Queue) due(now time.Time) time.Time {
	q.mu.Lock()
	defer q.mu.Unlock()
	var next time.Time
	for k, t := range q.later {
		if !t.After(now) {
			delete(q.later, k)
			q.addLocked(k)
			continue
		}
		if next.IsZero() || t.Before(next) {
			next = t
		}
	}
	return next
}

// Run syncs queued keys with Config.Workers workers until ctx is done; a
// key whose sync fails is queued again after its retry delay. It returns
// nil once ctx is done and every sync in progress returned.
func (q *Queue) Run(ctx context.Context, syncKey func(ctx context.Context, key string) error) error {
	var wg sync.WaitGroup
	for range q.cfg.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			q.work(ctx, syncKey)
		}()
	}
	defer wg.Wait()
	for {
		var tick <-chan time.Time
		var timer *time.Timer
		if next := q.due(time.Now()); !next.IsZero() {
			timer = time.NewTimer(time.Until(next))
			tick = timer.C
		}
		select {
		case <-ctx.Done():
		case <-q.wake:
		case <-tick:
		}
		if timer != nil {
			timer.Stop()
		}
		if ctx.Err() != nil {
			return nil
		}
	}
}

// work is one worker: it syncs one key at a time until ctx is done.
func (q *Queue) work(ctx context.Context, sync func(ctx context.Context, key string) error) {
	for {
		key, ok := q.take()
		if !ok {
			select {
			case <-ctx.Done():
				return
			case <-q.ready:
				continue
			}
		}
		if ctx.Err() != nil {
			q.done(key, nil)
			return
		}
		err := sync(ctx, key)
		if ctx.Err() != nil {
			q.done(key, nil)
			return
		}
		q.done(key, err)
	}
}
