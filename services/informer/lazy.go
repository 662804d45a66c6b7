package informer

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/podflow/podflow/services/objects"
)

// Resettable is a Member that can run again after its Run returned,
// from an empty cache: an *Informer[T].
type Resettable interface {
	Member
	// Reset empties the cache and makes WaitForSync wait for the next
	// Run's first list. It is called only while no Run is running.
	Reset()
}

var _ Resettable = (*Informer[objects.Object])(nil)

// Lazy runs an informer only while it is wanted: a controller's pod
// informer, wanted while the controller has objects of its own kind, so
// that a controller with none holds no watch of every pod.
//
// Lazy is itself a Member, added to a Group in the informer's place:
//
//  1. Its Run waits for the members after which wanted can be asked
//     (the controller's informer of its own kind), then asks wanted
//     whenever Poke is called and every Idle: it starts the informer
//     (list and watch) when wanted turns true, and stops and empties it
//     (Reset) once wanted has been false for Idle.
//  2. Its WaitForSync returns once the informer has synced if wanted
//     says it is wanted (starting it if it is not running yet), at once
//     if it is not: a controller calls it before each sync (the
//     Runner does, for the members given to Runner.Gate), so a sync
//     never reads the informer before its first list is in.
//
// wanted is called with Lazy's lock held: it must be cheap, must not
// block, and must not call Lazy's methods; it may read other informers.
// The informer's handlers and wanted may call Poke.
type Lazy struct {
	m      Resettable
	wanted func() bool
	after  []Member
	idle   time.Duration

	poke    chan struct{}
	started chan struct{} // closed once Run has its context

	mu       sync.Mutex
	ctx      context.Context // Run's
	cancel   context.CancelFunc
	done     chan struct{} // closed when the informer's Run returned
	running  bool
	lastWant time.Time
	starts   int
	onStop   func()
}

// NewLazy returns a Lazy that runs m while wanted returns true, and for
// idle after it last did; 0 keeps m running once started. wanted is
// first asked once every member of after has synced.
func NewLazy(m Resettable, wanted func() bool, idle time.Duration, after ...Member) (*Lazy, error) {
	if m == nil || wanted == nil {
		return nil, errors.New("informer: NewLazy needs an informer and a wanted function")
	}
	if idle < 0 {
		return nil, errors.New("informer: a Lazy's idle time must not be negative")
	}
	return &Lazy{m: m, wanted: wanted, after: after, idle: idle, poke: make(chan struct{}, 1), started: make(chan struct{})}, nil
}

// OnStop has f called each time the informer is stopped and emptied,
// with Lazy's lock held (f must not call Lazy's methods): for state kept
// beside the cache, by pod, that its handlers would have dropped. Call
// before Run.
func (l *Lazy) OnStop(f func()) { l.onStop = f }

// Poke has Run ask wanted again soon. It never blocks.
func (l *Lazy) Poke() {
	select {
	case l.poke <- struct{}{}:
	default:
	}
}

// Running reports whether the informer runs (it holds a watch, or is
// listing).
func (l *Lazy) Running() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.running
}

// Starts returns how many times the informer was started.
func (l *Lazy) Starts() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.starts
}

// Run manages the informer until ctx is done, and returns ctx.Err().
func (l *Lazy) Run(ctx context.Context) error {
	for _, m := range l.after {
		if err := m.WaitForSync(ctx); err != nil {
			return err
		}
	}
	l.mu.Lock()
	l.ctx = ctx
	l.mu.Unlock()
	close(l.started)
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		l.mu.Lock()
		l.ensureLocked()
		l.releaseLocked()
		wait := time.Duration(-1)
		if l.running && l.idle > 0 {
			wait = max(l.idle-time.Since(l.lastWant), time.Millisecond)
		}
		done := l.done
		l.mu.Unlock()
		timer.Stop()
		var tc <-chan time.Time
		if wait >= 0 {
			timer.Reset(wait)
			tc = timer.C
		}
		select {
		case <-l.poke:
		case <-tc:
		case <-ctx.Done():
			if done != nil {
				<-done
			}
			return ctx.Err()
		}
	}
}

// ensureLocked asks wanted and starts the informer if it is wanted and
// not running.
func (l *Lazy) ensureLocked() {
	if !l.wanted() {
		return
	}
	l.lastWant = time.Now()
	if l.running || l.ctx == nil || l.ctx.Err() != nil {
		return
	}
	ctx, cancel := context.WithCancel(l.ctx)
	done := make(chan struct{})
	l.cancel, l.done, l.running = cancel, done, true
	l.starts++
	go func() {
		defer close(done)
		_ = l.m.Run(ctx)
	}()
}

// releaseLocked stops and empties the informer when it has not been
// wanted for idle.
func (l *Lazy) releaseLocked() {
	if !l.running || l.idle == 0 || time.Since(l.lastWant) < l.idle {
		return
	}
	l.cancel()
	<-l.done
	l.m.Reset()
	l.cancel, l.done, l.running = nil, nil, false
	if l.onStop != nil {
		l.onStop()
	}
}

// WaitForSync blocks until the members Run waits for have synced and,
// if the informer is wanted, until it has synced too (starting it if it
// is not running); or until ctx is done.
func (l *Lazy) WaitForSync(ctx context.Context) error {
	select {
	case <-l.started:
	case <-ctx.Done():
		return ctx.Err()
	}
	l.mu.Lock()
	l.ensureLocked()
	running := l.running
	l.mu.Unlock()
	if !running {
		return nil
	}
	return l.m.WaitForSync(ctx)
}
