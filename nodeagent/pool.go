package nodeagent

import (
	"sync"
)

// DefaultPoolSize is the number of pod workers' steps a Pool runs at once
// when NewPool is given none: above kubelet's default --max-pods (110),
// so one node's pods never wait for each other.
const DefaultPoolSize = 128

// A Pool runs the steps of pod workers (see worker) on at most Size
// goroutines at once, the way services/workqueue runs a controller's
// keys: a worker asked to run while it is queued runs once; a worker
// asked while its step is under way runs again after it, never twice at
// once, so each pod's events are handled in order. Its goroutines start
// when work is queued and end when none is left: an idle pod costs no
// goroutine, only its state and, when it waits for a time, a timer.
//
// An Agent makes its own Pool unless Config.Pool gives one; sim.Cluster
// shares one among all its nodes. A Pool is safe for concurrent use and
// needs no stopping: each step ends when its agent stops.
type Pool struct {
	size int

	mu      sync.Mutex
	queue   []*worker // workers due a step, first come first served
	head    int       // queue[head:] is pending
	running int       // goroutines running steps
}

// NewPool returns a Pool running at most size steps at once (size <= 0:
// DefaultPoolSize).
func NewPool(size int) *Pool {
	if size <= 0 {
		size = DefaultPoolSize
	}
	return &Pool{size: size}
}

// Size returns the most steps the pool runs at once.
func (p *Pool) Size() int { return p.size }

// schedState is where a worker is in its pool; guarded by Pool.mu.
type schedState uint8

const (
	schedIdle     schedState = iota // waits for an event or its timer
	schedQueued                     // in the queue
	schedRunning                    // its step is under way
	schedDirty                      // its step is under way and it is due another
	schedFinished                   // gone (or its agent stopped): never runs again
)

// kick asks for a step of w. It never blocks and may be called from any
// goroutine: a timer, the runtime delivering an exit, the agent handing
// over an update or a delete.
func (p *Pool) kick(w *worker) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch w.sched {
	case schedRunning:
		w.sched = schedDirty
	case schedIdle:
		if !w.d.steps.hold() { // the agent stopped
			return
		}
		w.sched = schedQueued
		p.pushLocked(w, true)
	}
}

// pushLocked queues w and, when spawn and the pool has room, starts a
// goroutine to run it.
func (p *Pool) pushLocked(w *worker, spawn bool) {
	if p.head > 0 && p.head == len(p.queue) { // drained: reuse the array
		clear(p.queue)
		p.queue, p.head = p.queue[:0], 0
	}
	p.queue = append(p.queue, w)
	if spawn && p.running < p.size {
		p.running++
		go p.loop()
	}
}

// pending counts the workers waiting in the queue (tests).
func (p *Pool) pending() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.queue) - p.head
}

// loop runs queued steps until the queue is empty.
func (p *Pool) loop() {
	p.mu.Lock()
	for p.head < len(p.queue) {
		w := p.queue[p.head]
		p.queue[p.head] = nil
		p.head++
		w.sched = schedRunning
		p.mu.Unlock()
		finished := w.step()
		p.mu.Lock()
		switch {
		case finished:
			w.sched = schedFinished
			w.d.steps.release()
		case w.sched == schedDirty: // keeps its hold on the agent
			w.sched = schedQueued
			p.pushLocked(w, false) // this loop runs it
		default:
			w.sched = schedIdle
			w.d.steps.release()
		}
	}
	p.running--
	p.mu.Unlock()
}

// steps counts one agent's workers that are queued or running, so that
// Agent.Stop can wait for them; once stopped it queues none.
type steps struct {
	mu      sync.Mutex
	stopped bool
	wg      sync.WaitGroup
}

// hold counts one more worker due a step; false once the agent stopped.
func (s *steps) hold() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return false
	}
	s.wg.Add(1)
	return true
}

func (s *steps) release() { s.wg.Done() }

// stop refuses further steps; wait waits for those under way.
func (s *steps) stop() {
	s.mu.Lock()
	s.stopped = true
	s.mu.Unlock()
}

func (s *steps) wait() { s.wg.Wait() }
