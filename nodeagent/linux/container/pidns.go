package container

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// PIDNamespace is a pod's shared PID namespace (shareProcessNamespace) and
// the process that holds it, PID 1 of the namespace, as the sandbox's
// pause process is under containerd: the containers of the pod join it
// (Spec.PIDNamespace) instead of each getting its own, so they see each
// other's processes, and a container's exit does not end the namespace.
// The holder reaps what is reparented to it; only SIGKILL ends it, and
// with it, by the kernel, every process of the namespace.
type PIDNamespace struct {
	PID int `json:"pid"`
	// Start is the holder's start time (/proc/<pid>/stat field 22): with
	// PID, it names the holder across PID reuse.
	Start uint64 `json:"start"`
}

const roleHolder = "pidns"

// holderID is the holder's uid and gid, as the pause image's (65535).
const holderID = 65535

// StartPIDNamespace starts a holder: PID 1 of a new PID namespace, in a
// mount namespace of its own whose only mount is an empty read-only tmpfs
// (pivoted into, so it pins no mount of the host's), with uid and gid
// 65535, no supplementary groups, no capabilities and not dumpable, so a
// container sharing the namespace cannot reach the host through
// /proc/1/root or signal it (the kernel drops signals to a namespace's
// init that it does not handle). It is in its own session, as a shim, and
// outlives the agent. dir is any existing directory, the tmpfs mount point
// in the holder's own mount namespace.
func StartPIDNamespace(ctx context.Context, cfg Config, dir string) (PIDNamespace, error) {
	if err := cfg.Validate(); err != nil {
		return PIDNamespace{}, err
	}
	if !strings.HasPrefix(dir, "/") {
		return PIDNamespace{}, fmt.Errorf("%w: PID namespace holder directory %q is not absolute", ErrInvalidSpec, dir)
	}
	readyR, readyW, err := os.Pipe()
	if err != nil {
		return PIDNamespace{}, err
	}
	defer readyR.Close()
	cmd := &exec.Cmd{
		Path:        cfg.Binary,
		Args:        []string{"podflow-pidns"},
		Env:         []string{envRole + "=" + roleHolder, envDir + "=" + dir},
		ExtraFiles:  []*os.File{readyW},
		SysProcAttr: &syscall.SysProcAttr{Setsid: true, Cloneflags: unix.CLONE_NEWPID | unix.CLONE_NEWNS},
		Dir:         "/",
	}
	err = cmd.Start()
	readyW.Close()
	if err != nil {
		return PIDNamespace{}, fmt.Errorf("start PID namespace holder: %w", err)
	}
	ns := PIDNamespace{PID: cmd.Process.Pid}
	fail := func(err error) (PIDNamespace, error) {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return PIDNamespace{}, fmt.Errorf("PID namespace holder: %w", err)
	}
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(cfg.StartTimeout)
	}
	_ = readyR.SetReadDeadline(deadline)
	b, err := io.ReadAll(readyR)
	switch line := strings.TrimSpace(string(b)); {
	case err != nil:
		return fail(err)
	case line != "ok":
		return fail(errors.New(strings.TrimPrefix(line, "error ")))
	}
	if ns.Start, err = startTime(ns.PID); err != nil {
		return fail(err)
	}
	// Our child: Kill reaps it. A later agent is not its parent; init is.
	_ = cmd.Process.Release()
	return ns, nil
}

// Alive reports whether the holder still runs.
func (n PIDNamespace) Alive() bool {
	f, err := openProcess(n.PID, n.Start)
	if err != nil {
		return false
	}
	defer f.Close()
	return !exited(f)
}

// Kill ends the namespace: SIGKILL to the holder, which the kernel turns
// into a SIGKILL to every process of the namespace, then waits until the
// holder has exited (and reaps it when this process is its parent).
// A holder already gone is no error.
func (n PIDNamespace) Kill(ctx context.Context) error {
	f, err := openProcess(n.PID, n.Start)
	if errors.Is(err, ErrNotRunning) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	if err := sendSignal(f, unix.SIGKILL); err != nil && !errors.Is(err, ErrNotRunning) {
		return fmt.Errorf("kill PID namespace holder %d: %w", n.PID, err)
	}
	if err := waitExit(ctx, f); err != nil {
		return fmt.Errorf("wait for PID namespace holder %d: %w", n.PID, err)
	}
	_, _ = unix.Wait4(n.PID, nil, unix.WNOHANG, nil) // ECHILD unless we started it
	return nil
}

// join makes the calling (locked) thread's children start in the
// namespace (setns through a pidfd, so a reused PID is never joined).
// namespace is n's PID namespace for OnThreadIn: the holder's pidfd,
// checked against its start time, so a reused PID is never joined.
func (n PIDNamespace) namespace() Namespace {
	return Namespace{Kind: NSPID, Open: func() (*os.File, error) {
		f, err := openProcess(n.PID, n.Start)
		if err != nil {
			return nil, fmt.Errorf("PID namespace holder %d: %w", n.PID, err)
		}
		return f, nil
	}}
}

// runHolder is the holder's main (see StartPIDNamespace).
func runHolder(dir string) error {
	signal.Ignore(syscall.SIGHUP, syscall.SIGINT, syscall.SIGTERM, syscall.SIGPIPE)
	children := make(chan os.Signal, 1)
	signal.Notify(children, syscall.SIGCHLD)
	ready := os.NewFile(shimReadyFD, "ready")
	if err := holderSetup(dir); err != nil {
		fmt.Fprintf(ready, "error %v\n", err)
		return err
	}
	fmt.Fprintln(ready, "ok")
	ready.Close()
	for {
		for {
			pid, err := unix.Wait4(-1, nil, unix.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
		<-children
	}
}

// holderSetup leaves the holder with nothing: an empty read-only root of
// its own, no identity, no capabilities.
func holderSetup(dir string) error {
	steps := []struct {
		what string
		do   func() error
	}{
		{"make / private", func() error { return unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, "") }},
		{"mount tmpfs", func() error {
			return unix.Mount("tmpfs", dir, "tmpfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=4k,mode=0555")
		}},
		{"chdir", func() error { return unix.Chdir(dir) }},
		{"pivot_root", func() error { return unix.PivotRoot(".", ".") }},
		{"detach the old root", func() error { return unix.Unmount(".", unix.MNT_DETACH) }},
		{"chdir /", func() error { return unix.Chdir("/") }},
		{"setgroups", func() error { return syscall.Setgroups(nil) }},
		{"setresgid", func() error { return syscall.Setresgid(holderID, holderID, holderID) }},
		// From uid 0 to another on every thread: the kernel clears the
		// permitted, effective and ambient capabilities.
		{"setresuid", func() error { return syscall.Setresuid(holderID, holderID, holderID) }},
		{"not dumpable", func() error { return unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0) }},
	}
	for _, s := range steps {
		if err := s.do(); err != nil {
			return fmt.Errorf("%s: %w", s.what, err)
		}
	}
	return nil
}

// killLeftovers kills what is left in the container's cgroups once its
// init has exited in a shared PID namespace or the host's, where, not being
// PID 1, its exit takes nothing with it: containerd's shim does the same
// (runc kill --all) for a container without a PID namespace of its own.
// Best effort: a process that forks as it is read is caught by the next
// pass.
func killLeftovers(cgroups map[string]string) {
	for range 3 {
		found := false
		for _, dir := range cgroups {
			b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
			if err != nil {
				continue
			}
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil && pid != os.Getpid() {
					found = true
					_ = unix.Kill(pid, unix.SIGKILL)
				}
			}
		}
		if !found {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}
