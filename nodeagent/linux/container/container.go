package container

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Container is a handle on one container's shim. Its methods are safe for
// concurrent use. A handle owns one goroutine that waits for the shim's
// exit; Close stops it (the container keeps running).
type Container struct {
	ID  string
	Dir string

	proc *os.Process // the shim, when this process started it (reaped on exit)
	shim *os.File    // pidfd of the shim

	done   chan struct{} // closed when the shim has exited (final state read)
	closed chan struct{} // closed by Close
	once   sync.Once
	wg     sync.WaitGroup

	mu    sync.Mutex
	state State
	final bool
}

// Start writes spec to spec.Dir, starts its shim and returns once the
// command has been exec'd. A command that could not be exec'd (missing
// binary, bad mount, ...) is an error matching ErrExec; the container then
// has exited and its state says why.
func Start(ctx context.Context, cfg Config, spec Spec) (*Container, error) {
	return start(ctx, cfg, spec, nil)
}

// shimProc is a started shim and the pipes to it.
type shimProc struct {
	cmd   *exec.Cmd
	ready *os.File // the shim's report: "ok <pid>" or "error <msg>"
	specW *os.File // spare shims only: the container directory is written here
}

// spawnShim starts a shim in its own session. With dir == "" it is a spare:
// it waits for a container directory on its spec pipe (and exits at EOF).
func spawnShim(cfg Config, id, dir string) (*shimProc, error) {
	readyR, readyW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer readyW.Close()
	files := []*os.File{readyW}
	var specR, specW *os.File
	out := io.Writer(nil) // /dev/null until a spare knows its directory
	if dir == "" {
		if specR, specW, err = os.Pipe(); err != nil {
			readyR.Close()
			return nil, err
		}
		defer specR.Close()
		files = append(files, specR)
	} else {
		logf, err := os.OpenFile(filepath.Join(dir, shimLog), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
		if err != nil {
			readyR.Close()
			return nil, err
		}
		defer logf.Close()
		out = logf
	}
	cmd := &exec.Cmd{
		Path:       cfg.Binary,
		Args:       []string{"podflow-shim", id},
		Env:        []string{envRole + "=" + roleShim, envDir + "=" + dir},
		Stdout:     out,
		Stderr:     out,
		ExtraFiles: files,
		// Its own session: not in the agent's process group, so neither a
		// terminal's signals nor the agent's death reach it.
		SysProcAttr: &syscall.SysProcAttr{Setsid: true},
		Dir:         "/",
	}
	if err := cmd.Start(); err != nil {
		readyR.Close()
		if specW != nil {
			specW.Close()
		}
		return nil, fmt.Errorf("start shim: %w", err)
	}
	return &shimProc{cmd: cmd, ready: readyR, specW: specW}, nil
}

// discard ends an unused spare shim: EOF on its spec pipe makes it exit.
func (p *shimProc) discard() {
	p.specW.Close()
	p.ready.Close()
	_ = p.cmd.Wait()
}

// start runs spec with the spare shim sp, or a new shim when sp is nil.
func start(ctx context.Context, cfg Config, spec Spec, sp *shimProc) (*Container, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cfg.StartTimeout)
		defer cancel()
	}
	if err := os.MkdirAll(spec.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("container %q: %w", spec.ID, err)
	}
	if err := WriteJSON(filepath.Join(spec.Dir, specFile), spec); err != nil {
		return nil, fmt.Errorf("container %q: write spec: %w", spec.ID, err)
	}
	_ = os.Remove(filepath.Join(spec.Dir, stateFile))
	if sp == nil {
		var err error
		if sp, err = spawnShim(cfg, spec.ID, spec.Dir); err != nil {
			return nil, fmt.Errorf("container %q: %w", spec.ID, err)
		}
	} else {
		_, err := fmt.Fprintf(sp.specW, "%s\n", spec.Dir)
		sp.specW.Close()
		if err != nil {
			sp.ready.Close()
			_ = sp.cmd.Wait()
			return nil, fmt.Errorf("container %q: hand over to a spare shim: %w", spec.ID, err)
		}
	}
	defer sp.ready.Close()
	pidfd, err := openProcess(sp.cmd.Process.Pid, 0) // our unreaped child: the pid cannot be reused
	if err != nil {
		_ = sp.cmd.Process.Kill()
		_, _ = sp.cmd.Process.Wait()
		return nil, fmt.Errorf("container %q: %w", spec.ID, err)
	}
	c := newContainer(spec.ID, spec.Dir, sp.cmd.Process, pidfd)
	line, err := readLine(ctx, sp.ready)
	if err != nil {
		c.abandon(spec)
		return nil, fmt.Errorf("container %q: waiting for the shim: %w", spec.ID, err)
	}
	if msg, ok := strings.CutPrefix(line, "error "); ok || !strings.HasPrefix(line, "ok ") {
		if !ok {
			msg = "shim exited without reporting: " + shimTail(spec.Dir)
		}
		_, _ = c.Wait(ctx)
		c.Close()
		return nil, fmt.Errorf("container %q: %w: %s", spec.ID, ErrExec, strings.TrimPrefix(msg, ErrExec.Error()+": "))
	}
	st, err := ReadState(spec.Dir)
	if err != nil {
		c.Close()
		return nil, err
	}
	c.setState(st)
	return c, nil
}

// abandon ends a start that ran out of time before the shim reported: it
// SIGKILLs the shim, which then cannot clean up after itself, waits for
// its exit and removes what it may have made: the device cgroup, with
// whatever of the container is already in it (the init joins it before
// anything runs). The caller's ctx has ended: the wait has its own bound.
func (c *Container) abandon(spec Spec) {
	_ = c.proc.Kill()
	ctx, cancel := context.WithTimeout(context.Background(), deviceCgroupRemoveTimeout)
	defer cancel()
	select {
	case <-c.done: // the watcher reaped the shim
	case <-ctx.Done():
	}
	c.Close()
	if err := removeCgroupDir(ctx, deviceCgroupDirV1(spec)); err != nil {
		fmt.Fprintf(os.Stderr, "container %q: device cgroup left for the node agent: %v\n", spec.ID, err)
	}
}

func shimTail(dir string) string {
	b, _ := os.ReadFile(filepath.Join(dir, shimLog))
	if len(b) > 512 {
		b = b[len(b)-512:]
	}
	return strings.TrimSpace(string(b))
}

// readLine reads one line from the pipe r, bounded by ctx.
func readLine(ctx context.Context, r *os.File) (string, error) {
	if d, ok := ctx.Deadline(); ok {
		_ = r.SetReadDeadline(d)
	}
	stop := context.AfterFunc(ctx, func() { _ = r.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()
	line, err := bufio.NewReader(r).ReadString('\n')
	if err != nil && line == "" {
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		if errors.Is(err, os.ErrDeadlineExceeded) { // the deadline, before ctx's own timer
			return "", context.DeadlineExceeded
		}
		return "", nil // EOF: the shim died before reporting
	}
	return strings.TrimSpace(line), nil
}

// Open returns a handle on the container in dir, started earlier (possibly
// by another process). A container whose shim is gone is returned with its
// last recorded state; one whose shim died without recording an exit is
// reported exited with code 137 and an Error saying so.
func Open(dir string) (*Container, error) {
	st, err := ReadState(dir)
	if err != nil {
		return nil, err
	}
	var shim *os.File
	if st.Status != StatusExited {
		if f, err := openProcess(st.ShimPID, st.ShimStart); err == nil {
			shim = f
		}
	}
	c := newContainer(st.ID, dir, nil, shim)
	c.setState(st)
	if shim == nil {
		c.finish()
	}
	return c, nil
}

func newContainer(id, dir string, proc *os.Process, shim *os.File) *Container {
	c := &Container{ID: id, Dir: dir, proc: proc, shim: shim, done: make(chan struct{}), closed: make(chan struct{})}
	if shim != nil {
		c.wg.Add(1)
		go c.watch()
	}
	return c
}

// watch waits for the shim to exit, then reads the final state.
func (c *Container) watch() {
	defer c.wg.Done()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { // ends with watch at the latest
		select {
		case <-c.closed:
			cancel()
		case <-ctx.Done():
		}
	}()
	if err := waitExit(ctx, c.shim); err != nil {
		return // closed
	}
	if c.proc != nil {
		_, _ = c.proc.Wait() // reap our child
	}
	c.finish()
}

// finish records the final state and marks the container done.
func (c *Container) finish() {
	st, err := ReadState(c.Dir)
	if err != nil || st.Status != StatusExited {
		st.Status, st.ExitCode, st.Signal = StatusExited, 137, 9
		st.Error = "the shim died without recording the exit"
		if st.FinishedAt.IsZero() {
			st.FinishedAt = time.Now()
		}
		_ = WriteJSON(filepath.Join(c.Dir, stateFile), st)
	}
	c.mu.Lock()
	c.state, c.final = st, true
	c.mu.Unlock()
	close(c.done)
}

// setState records a non-final state unless the final one is known.
func (c *Container) setState(st State) {
	c.mu.Lock()
	if !c.final {
		c.state = st
	}
	c.mu.Unlock()
}

// State returns the last known state.
func (c *Container) State() State {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.state
}

// Done is closed when the container has exited and State is final.
func (c *Container) Done() <-chan struct{} { return c.done }

// Wait blocks until the container has exited and returns its final state.
func (c *Container) Wait(ctx context.Context) (State, error) {
	select {
	case <-c.done:
		return c.State(), nil
	case <-c.closed:
		return State{}, ErrClosed
	case <-ctx.Done():
		return State{}, ctx.Err()
	}
}

// Signal sends sig to the container's init (PID 1 of its namespace: only
// signals it handles are delivered, except SIGKILL). It returns
// ErrNotRunning when the container has exited.
func (c *Container) Signal(sig unix.Signal) error {
	st := c.State()
	select {
	case <-c.done:
		return ErrNotRunning
	default:
	}
	f, err := openProcess(st.PID, st.PIDStart)
	if err != nil {
		return err
	}
	defer f.Close()
	return sendSignal(f, sig)
}

// Stop sends SIGTERM, then SIGKILL once grace has passed, and returns the
// final state when the shim has recorded the exit.
func (c *Container) Stop(ctx context.Context, grace time.Duration) (State, error) {
	if err := c.Signal(unix.SIGTERM); err != nil && !errors.Is(err, ErrNotRunning) {
		return State{}, err
	}
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-c.done:
		return c.State(), nil
	case <-c.closed:
		return State{}, ErrClosed
	case <-ctx.Done():
		return State{}, ctx.Err()
	case <-t.C:
	}
	if err := c.Signal(unix.SIGKILL); err != nil && !errors.Is(err, ErrNotRunning) {
		return State{}, err
	}
	return c.Wait(ctx)
}

// Close stops the handle's watcher and releases the pidfd; the container
// keeps running. Idempotent.
func (c *Container) Close() {
	c.once.Do(func() { close(c.closed) })
	c.wg.Wait()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.shim != nil {
		c.shim.Close()
		c.shim = nil
	}
}
