package nodeagenttest

import (
	"sync"
	"time"

	"github.com/podflow/podflow/nodeagent"
)

// FakeClock is a nodeagent.Clock that moves only when Advance is called, so
// a test can run the kubelet's real timings (10s back-offs growing to 5m) in
// milliseconds. Timers fire in Advance: a channel timer gets a non-blocking
// send, an AfterFunc timer runs its function in a new goroutine.
type FakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers map[*fakeTimer]struct{}
}

var _ nodeagent.Clock = (*FakeClock)(nil)

// NewFakeClock returns a clock reading t0.
func NewFakeClock(t0 time.Time) *FakeClock {
	return &FakeClock{now: t0, timers: map[*fakeTimer]struct{}{}}
}

// Now implements nodeagent.Clock.
func (c *FakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// NewTimer implements nodeagent.Clock.
func (c *FakeClock) NewTimer(d time.Duration) nodeagent.Timer {
	return c.add(d, make(chan time.Time, 1), nil)
}

// AfterFunc implements nodeagent.Clock.
func (c *FakeClock) AfterFunc(d time.Duration, f func()) nodeagent.Timer {
	return c.add(d, nil, f)
}

func (c *FakeClock) add(d time.Duration, ch chan time.Time, f func()) *fakeTimer {
	t := &fakeTimer{c: c, ch: ch, f: f}
	t.Reset(d)
	return t
}

// Advance moves the clock forward by d and fires the timers that are due.
func (c *FakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	now := c.now
	var due []*fakeTimer
	for t := range c.timers {
		if !t.at.After(now) {
			due = append(due, t)
			delete(c.timers, t)
		}
	}
	c.mu.Unlock()
	for _, t := range due {
		if t.f != nil {
			go t.f()
			continue
		}
		select {
		case t.ch <- now:
		default:
		}
	}
}

type fakeTimer struct {
	c  *FakeClock
	at time.Time
	ch chan time.Time
	f  func()
}

func (t *fakeTimer) C() <-chan time.Time { return t.ch }

// Stop reports whether the timer was pending.
func (t *fakeTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	_, pending := t.c.timers[t]
	delete(t.c.timers, t)
	t.drain()
	return pending
}

// Reset re-arms the timer; like a Go 1.23 timer, no stale tick survives it.
func (t *fakeTimer) Reset(d time.Duration) bool {
	t.c.mu.Lock()
	_, pending := t.c.timers[t]
	t.drain()
	t.at = t.c.now.Add(d)
	fire := d <= 0
	if !fire {
		t.c.timers[t] = struct{}{}
	}
	now := t.c.now
	t.c.mu.Unlock()
	if fire {
		if t.f != nil {
			go t.f()
		} else {
			t.ch <- now
		}
	}
	return pending
}

func (t *fakeTimer) drain() {
	if t.ch == nil {
		return
	}
	select {
	case <-t.ch:
	default:
	}
}
