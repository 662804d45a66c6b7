package container

import (
	"context"
	"sync"
)

// Spares keeps shims started ahead of need, so that starting a container
// does not wait for a shim process to start (the init, cloned into the
// container's namespaces and cgroup, still starts on demand). A spare that
// is never used exits when Close closes its pipe, or when the agent dies.
//
// Concurrency: safe for concurrent use. One goroutine refills the pool;
// Close stops it.
type Spares struct {
	cfg    Config
	pool   chan *shimProc
	closed chan struct{}
	once   sync.Once
	wg     sync.WaitGroup
}

// NewSpares keeps n spare shims of cfg (n > 0).
func NewSpares(cfg Config, n int) (*Spares, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Spares{cfg: cfg, pool: make(chan *shimProc, n), closed: make(chan struct{})}
	s.wg.Add(1)
	go s.fill()
	return s, nil
}

func (s *Spares) fill() {
	defer s.wg.Done()
	for {
		sp, err := spawnShim(s.cfg, "spare", "")
		if err != nil {
			return // Start falls back to new shims
		}
		select {
		case s.pool <- sp:
		case <-s.closed:
			sp.discard()
			return
		}
	}
}

// Start is the package's Start with a spare shim when one is ready.
func (s *Spares) Start(ctx context.Context, spec Spec) (*Container, error) {
	select {
	case sp := <-s.pool:
		return start(ctx, s.cfg, spec, sp)
	default:
		return start(ctx, s.cfg, spec, nil)
	}
}

// Close ends the unused spares and the refill goroutine. Containers
// started keep running. Idempotent.
func (s *Spares) Close() {
	s.once.Do(func() { close(s.closed) })
	s.wg.Wait()
	for {
		select {
		case sp := <-s.pool:
			sp.discard()
		default:
			return
		}
	}
}
