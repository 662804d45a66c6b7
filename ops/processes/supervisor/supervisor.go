// Package supervisor runs podflow's process roles as child processes, the
// way `podflow up` needs them: each child is started from a Spec, restarted
// with backoff when it exits while the supervisor still wants it, and
// stopped with SIGTERM (then SIGKILL after a grace period) on shutdown.
//
// Children are started from one goroutine locked to its OS thread, so that
// Pdeathsig (SIGKILL on the supervisor's death) is tied to a thread that
// lives as long as the supervisor: a SIGKILLed `podflow up` leaves no
// orphans behind.
//
// The caller:
//  1. creates a Supervisor with New and a validated Config,
//  2. calls Run in a goroutine it owns (Run returns when ctx is done and
//     every child has exited),
//  3. adds, scales and removes children with Start and Stop at any time,
//  4. observes children with List.
//
// Example:
//
//	s, _ := supervisor.New(supervisor.DefaultConfig())
//	go s.Run(ctx)
//	s.Start(supervisor.Spec{Name: "scheduler-1", Path: exe, Args: []string{"stage", "scheduler"}})
package supervisor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"sync"
	"syscall"
	"time"
)

// Sentinel errors.
var (
	// ErrExists is returned by Start for a name that is already supervised.
	ErrExists = errors.New("supervisor: child already exists")
	// ErrUnknown is returned for a name that is not supervised.
	ErrUnknown = errors.New("supervisor: no such child")
	// ErrStopped is returned once the supervisor has shut down.
	ErrStopped = errors.New("supervisor: stopped")
)

// Config tunes restarts and shutdown.
type Config struct {
	// LogDir receives one <name>.log per child (stdout and stderr). Empty
	// means the children inherit the supervisor's stderr.
	LogDir string
	// MinBackoff and MaxBackoff bound the delay before restarting a child
	// that exited; the delay doubles per quick exit and resets after the
	// child ran for StableAfter.
	MinBackoff  time.Duration
	MaxBackoff  time.Duration
	StableAfter time.Duration
	// StopGrace is how long a child has between SIGTERM and SIGKILL.
	StopGrace time.Duration
	// OnEvent, if set, is called (from supervisor goroutines, never
	// concurrently for one child) when a child starts, exits or is stopped.
	OnEvent func(Event)
}

// DefaultConfig returns a Config suited to `podflow up`.
func DefaultConfig() Config {
	return Config{
		MinBackoff:  200 * time.Millisecond,
		MaxBackoff:  10 * time.Second,
		StableAfter: 10 * time.Second,
		StopGrace:   10 * time.Second,
	}
}

// Validate checks the Config.
func (c Config) Validate() error {
	if c.MinBackoff <= 0 || c.MaxBackoff < c.MinBackoff {
		return fmt.Errorf("supervisor: backoff range [%s, %s] is invalid", c.MinBackoff, c.MaxBackoff)
	}
	if c.StopGrace <= 0 {
		return fmt.Errorf("supervisor: StopGrace (%s) must be positive", c.StopGrace)
	}
	return nil
}

// Spec describes one child process.
type Spec struct {
	Name string   // unique, e.g. "store-1", "scheduler-2"
	Role string   // what it is, e.g. "store", "stage/scheduler" (for chaos and scale)
	Path string   // executable
	Args []string // arguments, without argv[0]
	Env  []string // added to the supervisor's environment
	Dir  string
}

// EventKind says what happened to a child.
type EventKind string

const (
	EventStarted EventKind = "started"
	EventExited  EventKind = "exited"
	EventStopped EventKind = "stopped"
)

// Event is a child's change of state.
type Event struct {
	Kind     EventKind
	Name     string
	PID      int
	ExitCode int
	// Signal is the signal that ended the process ("killed": SIGKILL),
	// empty when it exited by itself.
	Signal   string
	Err      error
	Restarts int
	// Time is when it happened.
	Time time.Time
}

// Child is a snapshot of one supervised child.
type Child struct {
	Spec     Spec
	PID      int // 0 while not running
	Restarts int
	Started  time.Time
}

type child struct {
	spec     Spec
	cmd      *exec.Cmd
	pid      int
	restarts int
	started  time.Time
	backoff  time.Duration
	stopping bool
	stop     chan struct{} // closed by Stop
	done     chan struct{} // closed when the child is stopped for good
}

type spawnReq struct {
	c     *child
	reply chan error
}

// Supervisor owns a set of child processes. It is safe for concurrent use.
type Supervisor struct {
	cfg     Config
	mu      sync.Mutex
	kids    map[string]*child
	spawnCh chan spawnReq
	wg      sync.WaitGroup // child watcher goroutines
	ctx     context.Context
	ready   chan struct{}
	stopped bool
}

// New returns a Supervisor; Run must be called for it to start children.
func New(cfg Config) (*Supervisor, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.LogDir != "" {
		if err := os.MkdirAll(cfg.LogDir, 0o755); err != nil {
			return nil, fmt.Errorf("supervisor: log dir %q: %w", cfg.LogDir, err)
		}
	}
	return &Supervisor{
		cfg:     cfg,
		kids:    map[string]*child{},
		spawnCh: make(chan spawnReq),
		ready:   make(chan struct{}),
	}, nil
}

// Run starts the spawner and blocks until ctx is done; then it stops every
// child (SIGTERM, SIGKILL after StopGrace) and returns once all exited.
func (s *Supervisor) Run(ctx context.Context) error {
	s.mu.Lock()
	s.ctx = ctx
	s.mu.Unlock()
	spawnerDone := make(chan struct{})
	go s.spawner(ctx, spawnerDone)
	close(s.ready)
	<-ctx.Done()
	s.mu.Lock()
	s.stopped = true
	names := make([]string, 0, len(s.kids))
	for n := range s.kids {
		names = append(names, n)
	}
	s.mu.Unlock()
	for _, n := range names {
		_ = s.Stop(n)
	}
	s.wg.Wait()
	<-spawnerDone
	return nil
}

// spawner forks every child from one locked OS thread (see package doc).
func (s *Supervisor) spawner(ctx context.Context, done chan struct{}) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	defer close(done)
	for {
		select {
		case <-ctx.Done():
			return
		case req := <-s.spawnCh:
			req.reply <- s.fork(req.c)
		}
	}
}

func (s *Supervisor) fork(c *child) error {
	cmd := exec.Command(c.spec.Path, c.spec.Args...)
	cmd.Dir = c.spec.Dir
	cmd.Env = append(os.Environ(), c.spec.Env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	var out io.Writer = os.Stderr
	if s.cfg.LogDir != "" {
		f, err := os.OpenFile(filepath.Join(s.cfg.LogDir, c.spec.Name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return fmt.Errorf("supervisor: log for %q: %w", c.spec.Name, err)
		}
		defer f.Close() // the child keeps its own descriptor
		out = f
	}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("supervisor: start %q: %w", c.spec.Name, err)
	}
	c.cmd = cmd
	return nil
}

func (s *Supervisor) spawn(c *child) error {
	<-s.ready
	reply := make(chan error, 1)
	select {
	case s.spawnCh <- spawnReq{c: c, reply: reply}:
	case <-s.ctx.Done():
		return ErrStopped
	}
	return <-reply
}

// Start adds a child and starts it. It returns once the process is forked.
func (s *Supervisor) Start(spec Spec) error {
	if spec.Name == "" || spec.Path == "" {
		return fmt.Errorf("supervisor: spec needs a name and a path (got %q, %q)", spec.Name, spec.Path)
	}
	<-s.ready
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		return ErrStopped
	}
	if _, ok := s.kids[spec.Name]; ok {
		s.mu.Unlock()
		return fmt.Errorf("%w: %q", ErrExists, spec.Name)
	}
	c := &child{spec: spec, backoff: s.cfg.MinBackoff, stop: make(chan struct{}), done: make(chan struct{})}
	s.kids[spec.Name] = c
	s.mu.Unlock()
	if err := s.spawn(c); err != nil {
		s.mu.Lock()
		delete(s.kids, spec.Name)
		s.mu.Unlock()
		return err
	}
	s.wg.Add(1)
	go s.watch(c)
	return nil
}

// watch owns one child: it waits for each exit and restarts with backoff
// until the child is stopped or the supervisor shuts down.
func (s *Supervisor) watch(c *child) {
	defer s.wg.Done()
	defer close(c.done)
	for {
		s.mu.Lock()
		c.pid, c.started = c.cmd.Process.Pid, time.Now()
		cmd, restarts, stopping, started := c.cmd, c.restarts, c.stopping, c.started
		s.mu.Unlock()
		if stopping {
			// Stop ran while this process was being forked: it saw no pid.
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		}
		s.emit(Event{Kind: EventStarted, Name: c.spec.Name, PID: cmd.Process.Pid, Restarts: restarts, Time: started})

		err := cmd.Wait()
		code, sig := -1, ""
		if cmd.ProcessState != nil {
			code = cmd.ProcessState.ExitCode()
			if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				sig = ws.Signal().String()
			}
		}

		s.mu.Lock()
		ran := time.Since(c.started)
		pid := c.pid
		c.pid = 0
		stopping = c.stopping || s.stopped
		if ran >= s.cfg.StableAfter {
			c.backoff = s.cfg.MinBackoff
		}
		delay := c.backoff
		c.backoff = min(2*c.backoff, s.cfg.MaxBackoff)
		s.mu.Unlock()

		if stopping {
			s.emit(Event{Kind: EventStopped, Name: c.spec.Name, PID: pid, ExitCode: code, Signal: sig, Err: err, Restarts: restarts})
			return
		}
		s.emit(Event{Kind: EventExited, Name: c.spec.Name, PID: pid, ExitCode: code, Signal: sig, Err: err, Restarts: restarts})

		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-s.ctx.Done():
			t.Stop()
			return
		case <-c.stop:
			t.Stop()
			return
		}
		s.mu.Lock()
		c.restarts++
		s.mu.Unlock()
		for {
			if err := s.spawn(c); err == nil {
				break
			} else if errors.Is(err, ErrStopped) {
				return
			}
			// Fork failed (e.g. out of descriptors): try again after backoff.
			select {
			case <-time.After(delay):
			case <-s.ctx.Done():
				return
			case <-c.stop:
				return
			}
		}
	}
}

// Stop stops a child for good: SIGTERM to its process group, SIGKILL after
// StopGrace. It returns once the child has exited.
func (s *Supervisor) Stop(name string) error {
	s.mu.Lock()
	c, ok := s.kids[name]
	if !ok {
		s.mu.Unlock()
		return fmt.Errorf("%w: %q", ErrUnknown, name)
	}
	c.stopping = true
	close(c.stop)
	delete(s.kids, name)
	pid := c.pid
	s.mu.Unlock()
	if pid > 0 {
		_ = syscall.Kill(-pid, syscall.SIGTERM)
		select {
		case <-c.done:
			return nil
		case <-time.After(s.cfg.StopGrace):
			_ = syscall.Kill(-pid, syscall.SIGKILL)
		}
	}
	<-c.done
	return nil
}

// Signal sends sig to a running child's process (chaos: SIGKILL, SIGSTOP,
// SIGCONT). The supervisor restarts a killed child as if it had crashed.
func (s *Supervisor) Signal(name string, sig syscall.Signal) (int, error) {
	s.mu.Lock()
	c, ok := s.kids[name]
	pid := 0
	if ok {
		pid = c.pid
	}
	s.mu.Unlock()
	if !ok {
		return 0, fmt.Errorf("%w: %q", ErrUnknown, name)
	}
	if pid == 0 {
		return 0, fmt.Errorf("supervisor: %q is not running", name)
	}
	return pid, syscall.Kill(pid, sig)
}

// List returns the supervised children sorted by name.
func (s *Supervisor) List() []Child {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Child, 0, len(s.kids))
	for _, c := range s.kids {
		out = append(out, Child{Spec: c.spec, PID: c.pid, Restarts: c.restarts, Started: c.started})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Spec.Name < out[j].Spec.Name })
	return out
}

func (s *Supervisor) emit(e Event) {
	if e.Time.IsZero() {
		e.Time = time.Now()
	}
	if s.cfg.OnEvent != nil {
		s.cfg.OnEvent(e)
	}
}
