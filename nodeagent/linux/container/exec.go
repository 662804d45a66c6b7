package container

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// ExecResult is the outcome of a command run in a container.
type ExecResult struct {
	ExitCode int
	Output   []byte // stdout and stderr, at most 10 KiB (as kubelet keeps)
}

const maxExecOutput = 10 << 10

// Exec runs args in the running container: in its IPC, UTS, network and PID
// namespaces, chrooted to its root (/proc/<pid>/root, which shows the
// container's mount tree), in its cgroup, with env and the working dir
// (default "/"). ctx bounds the whole run: when it ends the command is
// killed and ctx's error returned. A command that ran and exited non-zero
// is a result, not an error.
func (c *Container) Exec(ctx context.Context, args, env []string, dir string) (ExecResult, error) {
	st := c.State()
	if st.Status != StatusRunning {
		return ExecResult{}, ErrNotRunning
	}
	spec, err := ReadSpec(c.Dir)
	if err != nil {
		return ExecResult{}, err
	}
	pidfd, err := openProcess(st.PID, st.PIDStart) // pins the pid while we join it
	if err != nil {
		return ExecResult{}, err
	}
	defer pidfd.Close()
	root := "/proc/" + strconv.Itoa(st.PID) + "/root"
	if len(args) == 0 {
		return ExecResult{}, fmt.Errorf("%w: no command", ErrInvalidSpec)
	}
	path, err := lookPathIn(root, args[0], env)
	if err != nil {
		return ExecResult{ExitCode: 127, Output: []byte(err.Error())}, nil
	}
	if dir == "" {
		dir = "/"
	}
	var out limitedBuffer
	cmd := exec.CommandContext(ctx, path)
	cmd.Args, cmd.Env, cmd.Dir = args, env, dir
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.WaitDelay = time.Second
	cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: root}
	if v2, ok := spec.Cgroups[""]; ok {
		cg, err := os.Open(v2)
		if err != nil {
			return ExecResult{}, fmt.Errorf("open cgroup %q: %w", v2, err)
		}
		defer cg.Close()
		cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, int(cg.Fd())
	}
	errc := make(chan error, 1)
	go func() {
		// Deliberately no UnlockOSThread: the thread that joined the
		// container's namespaces exits with this goroutine.
		runtime.LockOSThread()
		for _, ns := range []struct {
			name string
			flag int
		}{{"ipc", unix.CLONE_NEWIPC}, {"uts", unix.CLONE_NEWUTS}, {"net", unix.CLONE_NEWNET}, {"pid", unix.CLONE_NEWPID}} {
			f, err := os.Open("/proc/" + strconv.Itoa(st.PID) + "/ns/" + ns.name)
			if err != nil {
				errc <- err
				return
			}
			err = unix.Setns(int(f.Fd()), ns.flag)
			f.Close()
			if err != nil {
				errc <- fmt.Errorf("join %s namespace of pid %d: %w", ns.name, st.PID, err)
				return
			}
		}
		errc <- cmd.Start() // pid namespace: for the children of this thread
	}()
	if err := <-errc; err != nil {
		return ExecResult{}, fmt.Errorf("exec in container %q: %w", c.ID, err)
	}
	if _, ok := spec.Cgroups[""]; !ok {
		for _, cg := range spec.Cgroups { // v1: join after the fact
			_ = os.WriteFile(filepath.Join(cg, "cgroup.procs"), []byte(strconv.Itoa(cmd.Process.Pid)), 0)
		}
	}
	werr := cmd.Wait()
	if ctx.Err() != nil {
		return ExecResult{Output: out.Bytes()}, ctx.Err()
	}
	var ee *exec.ExitError
	switch {
	case werr == nil:
		return ExecResult{Output: out.Bytes()}, nil
	case errors.As(werr, &ee):
		return ExecResult{ExitCode: ee.ExitCode(), Output: out.Bytes()}, nil
	default:
		return ExecResult{Output: out.Bytes()}, werr
	}
}

// lookPathIn finds file in PATH (from env) under root, and returns the path
// as seen inside root.
func lookPathIn(root, file string, env []string) (string, error) {
	if strings.Contains(file, "/") {
		return file, nil
	}
	path := "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	for _, d := range filepath.SplitList(path) {
		p := filepath.Join("/", d, file)
		if r, err := resolveIn(root, p); err == nil {
			if fi, err := os.Stat(r); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
				return p, nil
			}
		}
	}
	return "", fmt.Errorf("exec: %q: executable file not found in $PATH", file)
}

// limitedBuffer keeps the first maxExecOutput bytes written.
type limitedBuffer struct{ bytes.Buffer }

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if room := maxExecOutput - b.Len(); room > 0 {
		b.Buffer.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}
