package image

import (
	"context"
	"sync"
)

// flightGroup runs one call per key at a time and shares its result with
// every caller that asks for the key while it runs (singleflight). Unlike
// golang.org/x/sync/singleflight, a caller that gives up (its ctx ends) does
// not fail the others: the call runs under the group's base context and is
// cancelled only when its last waiter has left.
type flightGroup[T any] struct {
	base context.Context // the owner's lifetime; cancelled by Close
	wg   *sync.WaitGroup // the owner's goroutines

	mu sync.Mutex
	m  map[string]*flight[T]
}

type flight[T any] struct {
	done    chan struct{} // closed when val and err are set
	val     T
	err     error
	waiters int
	cancel  context.CancelFunc
}

func newFlightGroup[T any](base context.Context, wg *sync.WaitGroup) *flightGroup[T] {
	return &flightGroup[T]{base: base, wg: wg, m: map[string]*flight[T]{}}
}

// do returns fn's result for key, starting fn unless a call for key is in
// flight. shared reports whether the caller joined a call started by
// another. fn runs on a goroutine counted by the group's WaitGroup.
func (g *flightGroup[T]) do(ctx context.Context, key string, fn func(context.Context) (T, error)) (val T, shared bool, err error) {
	g.mu.Lock()
	f, shared := g.m[key]
	if !shared {
		fctx, cancel := context.WithCancel(g.base)
		f = &flight[T]{done: make(chan struct{}), cancel: cancel}
		g.m[key] = f
		g.wg.Go(func() {
			defer cancel()
			v, err := fn(fctx)
			g.mu.Lock()
			f.val, f.err = v, err
			if g.m[key] == f {
				delete(g.m, key)
			}
			close(f.done)
			g.mu.Unlock()
		})
	}
	f.waiters++
	g.mu.Unlock()

	select {
	case <-f.done:
		return f.val, shared, f.err
	case <-ctx.Done():
		g.mu.Lock()
		f.waiters--
		if f.waiters == 0 {
			// Nobody wants the result any more: stop the call, and let
			// the next caller start afresh rather than join a cancelled
			// one.
			f.cancel()
			if g.m[key] == f {
				delete(g.m, key)
			}
		}
		g.mu.Unlock()
		var zero T
		return zero, shared, ctx.Err()
	}
}
