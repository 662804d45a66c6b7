package network

import (
	"context"
	"time"
)

// Setup phases reported to a PhaseFunc.
const (
	PhaseIP        = "ip"        // address allocated (and persisted)
	PhaseNetns     = "netns"     // network namespace created and mounted
	PhaseVeth      = "veth"      // veth pair created, host end on the bridge
	PhaseConfigure = "configure" // lo, eth0 address and default route, host end up
)

// PhaseFunc receives how long each phase of a Setup took, in order, on the
// calling goroutine. It must be quick.
type PhaseFunc func(phase string, d time.Duration)

type phasesKey struct{}

// WithPhases returns a context under which Setup reports its phases to f:
// the breakdown of pod start latency in benchmarks and traces.
func WithPhases(ctx context.Context, f PhaseFunc) context.Context {
	return context.WithValue(ctx, phasesKey{}, f)
}

// phaseClock reports successive phases to the PhaseFunc in ctx, if any.
type phaseClock struct {
	f    PhaseFunc
	last time.Time
}

func newPhaseClock(ctx context.Context) *phaseClock {
	f, _ := ctx.Value(phasesKey{}).(PhaseFunc)
	if f == nil {
		return &phaseClock{}
	}
	return &phaseClock{f: f, last: time.Now()}
}

func (c *phaseClock) done(phase string) {
	if c.f == nil {
		return
	}
	now := time.Now()
	c.f(phase, now.Sub(c.last))
	c.last = now
}
