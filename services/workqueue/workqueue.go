// Package workqueue is a controller's queue of keys to sync, as
// client-go's workqueue is for kube-controller-manager's controllers: a
// key queued while already queued is synced once (a burst of changes is
// one sync of the latest state), a failed sync is retried after a delay
// that doubles up to a bound, and one worker goroutine owned by the
// caller runs every sync.
//
// The caller:
//  1. creates a Queue with New and adds keys from its informers' handlers
//     and its Reconcile (Add never blocks),
//  2. runs Run on a goroutine it owns; Run returns when ctx is done,
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
	// Log receives failed syncs (nil: slog.Default()).
	Log *slog.Logger
}

// DefaultConfig returns the defaults documented on Config.
func DefaultConfig() Config {
	return Config{RetryMin: 100 * time.Millisecond, RetryMax: 10 * time.Second}
}

// Validate checks the Config.
func (c Config) Validate() error {
	if c.RetryMin <= 0 || c.RetryMax < c.RetryMin {
		return fmt.Errorf("workqueue: RetryMin (%s) must be positive and at most RetryMax (%s)", c.RetryMin, c.RetryMax)
	}
	return nil
}

// Queue is a set of keys due a sync. It is safe for concurrent use.
type Queue struct {
	cfg Config

	mu      sync.Mutex
	pending map[string]bool
	order   []string
	ready   chan struct{} // holds a token while pending is not empty
}

// New returns an empty Queue; a Config that does not validate is
// replaced by DefaultConfig.
func New(cfg Config) *Queue {
	if cfg.Validate() != nil {
		log := cfg.Log
		cfg = DefaultConfig()
		cfg.Log = log
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	return &Queue{cfg: cfg, pending: map[string]bool{}, ready: make(chan struct{}, 1)}
}

// Add queues key (once, however often it is added before it is taken).
func (q *Queue) Add(key string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.pending[key] {
		return
	}
	q.pending[key] = true
	q.order = append(q.order, key)
	select {
	case q.ready <- struct{}{}:
	default:
	}
}

// Len is the number of keys queued.
func (q *Queue) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.order)
}

func (q *Queue) take() []string {
	q.mu.Lock()
	defer q.mu.Unlock()
	keys := q.order
	q.order = nil
	clear(q.pending)
	return keys
}

// Run syncs every queued key, in the order keys were first queued, until
// ctx is done; a key whose sync fails is queued again after its retry
// delay. It returns nil when ctx is done.
func (q *Queue) Run(ctx context.Context, sync func(ctx context.Context, key string) error) error {
	failures := map[string]int{}  // failures in a row, per key
	due := map[string]time.Time{} // retry times
	for {
		var timer *time.Timer
		var tick <-chan time.Time
		if len(due) > 0 {
			next := time.Time{}
			for _, t := range due {
				if next.IsZero() || t.Before(next) {
					next = t
				}
			}
			timer = time.NewTimer(time.Until(next))
			tick = timer.C
		}
		select {
		case <-ctx.Done():
			if timer != nil {
				timer.Stop()
			}
			return nil
		case <-q.ready:
		case <-tick:
		}
		if timer != nil {
			timer.Stop()
		}
		now := time.Now()
		for k, t := range due {
			if !t.After(now) {
				delete(due, k)
				q.Add(k)
			}
		}
		for _, key := range q.take() {
			if ctx.Err() != nil {
				return nil
			}
			delete(due, key)
			if err := sync(ctx, key); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				n := failures[key]
				failures[key] = n + 1
				delay := q.cfg.RetryMin << min(n, 30)
				if delay > q.cfg.RetryMax || delay <= 0 {
					delay = q.cfg.RetryMax
				}
				due[key] = time.Now().Add(delay)
				q.cfg.Log.Warn("sync failed; retrying", "key", key, "in", delay, "err", err)
				continue
			}
			delete(failures, key)
		}
	}
}
