package container

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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

// The exec helper's file descriptors: fd 3 is its exec pipe (as the
// init's), fd 4 the container's mount namespace, fd 5 (cgroup v1 only) the
// go pipe it waits on until it has been placed in the container's cgroups.
const (
	execPipeFD = 3
	execMntFD  = 4
	execGoFD   = 5
)

// envExec carries the exec request (execRequest as JSON) to the helper;
// the helper builds the command's environment from it, so it never reaches
// the command.
const envExec = "_PODFLOW_CONTAINER_EXEC"

// execRequest is what the exec helper runs.
type execRequest struct {
	Args []string `json:"args"`
	Env  []string `json:"env,omitempty"`
	Dir  string   `json:"dir"`
}

// execNotFound prefixes the helper's report of a command that is not
// there (exit code 127, a result rather than an error).
const execNotFound = "notfound "

// Exec runs args in the running container as runc exec does: in all of
// its init's namespaces (mount, PID, IPC, UTS, network), in its cgroups
// (and, on cgroup v1, its device cgroup), with env and the working dir
// (default "/"), and with exactly the privileges of the container's
// Security: its user and groups, capabilities, no_new_privs and seccomp
// filter. A helper (a re-exec of this binary) is started in the PID, IPC,
// UTS and network namespaces, joins the mount namespace on a thread of its
// own, drops its privileges as the init does and execs the command. ctx
// bounds the whole run: when it ends the command is killed and ctx's error
// returned. A command that ran and exited non-zero (or was not found:
// 127) is a result, not an error.
func (c *Container) Exec(ctx context.Context, args, env []string, dir string) (ExecResult, error) {
	var out limitedBuffer
	code, err := c.ExecStdio(ctx, args, env, dir, Stdio{Stdout: &out, Stderr: &out})
	if err != nil && ctx.Err() == nil {
		return ExecResult{}, err
	}
	return ExecResult{ExitCode: code, Output: out.Bytes()}, err
}

// Stdio are the streams of an exec (kubectl exec): nil ones are
// /dev/null. Stdin is read by a goroutine of its own that returns when
// its Read does, once the command has exited (the caller closes Stdin).
type Stdio struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// TTY runs the command on a pseudo-terminal, its controlling
	// terminal: Stdout gets its output (Stderr is not used), Resize, when
	// set, its window sizes (kubectl exec -t).
	TTY    bool
	Resize ResizeFunc
}

// ExecStdio is Exec with the command's stdin, stdout and stderr streamed
// (kubectl exec): it returns the exit code (127 for a command not found)
// once the command has exited and its output been copied.
func (c *Container) ExecStdio(ctx context.Context, args, env []string, dir string, stdio Stdio) (int, error) {
	st := c.State()
	if st.Status != StatusRunning {
		return 0, ErrNotRunning
	}
	if len(args) == 0 {
		return 0, fmt.Errorf("%w: no command", ErrInvalidSpec)
	}
	spec, err := ReadSpec(c.Dir)
	if err != nil {
		return 0, err
	}
	pidfd, err := openProcess(st.PID, st.PIDStart) // pins the pid while we join it
	if err != nil {
		return 0, err
	}
	defer pidfd.Close()
	if dir == "" {
		dir = "/"
	}
	req, err := json.Marshal(execRequest{Args: args, Env: env, Dir: dir})
	if err != nil {
		return 0, err
	}
	nsDir := "/proc/" + strconv.Itoa(st.PID) + "/ns/"
	mnt, err := os.Open(nsDir + "mnt")
	if err != nil {
		return 0, fmt.Errorf("exec in container %q: %w", c.ID, err)
	}
	defer mnt.Close()
	execR, execW, err := os.Pipe()
	if err != nil {
		return 0, err
	}
	defer execR.Close()
	defer execW.Close()
	self, err := os.Executable()
	if err != nil {
		return 0, err
	}
	cmd := exec.CommandContext(ctx, self)
	cmd.Args = []string{"podflow-exec", spec.ID}
	cmd.Env = []string{envRole + "=" + roleExec, envDir + "=" + c.Dir, envExec + "=" + string(req)}
	cmd.Dir = "/"
	cmd.Stdout, cmd.Stderr = stdio.Stdout, stdio.Stderr
	var stdin io.WriteCloser
	var term *terminal
	if stdio.TTY {
		if term, err = openTerminal(); err != nil {
			return 0, err
		}
		defer term.finish()
		cmd.Stdin, cmd.Stdout, cmd.Stderr = term.slave, term.slave, term.slave
	} else if stdio.Stdin != nil {
		if stdin, err = cmd.StdinPipe(); err != nil { // Wait closes it
			return 0, err
		}
	}
	cmd.ExtraFiles = []*os.File{execW, mnt}
	cmd.WaitDelay = time.Second
	cmd.SysProcAttr = &syscall.SysProcAttr{}
	if term != nil { // a session of its own, the terminal its controlling one
		cmd.SysProcAttr.Setsid, cmd.SysProcAttr.Setctty, cmd.SysProcAttr.Ctty = true, true, 0
	}
	cgroups := spec.Cgroups
	if v2, ok := spec.Cgroups[""]; ok {
		cg, err := os.Open(v2)
		if err != nil {
			return 0, fmt.Errorf("open cgroup %q: %w", v2, err)
		}
		defer cg.Close()
		cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, int(cg.Fd())
	} else if devCg := deviceCgroupDirV1(spec); devCg != "" {
		if _, err := os.Stat(devCg); err == nil {
			cgroups = joinCgroup(cgroups, "devices", devCg)
		}
	}
	var goW *os.File
	if _, v2 := cgroups[""]; !v2 && len(cgroups) > 0 {
		goR, w, err := os.Pipe()
		if err != nil {
			return 0, err
		}
		defer goR.Close()
		defer w.Close()
		goW = w
		cmd.ExtraFiles = append(cmd.ExtraFiles, goR)
		cmd.Env = append(cmd.Env, envGo+"=1")
	}
	nss := []Namespace{{Path: nsDir + "ipc", Kind: NSIPC}, {Path: nsDir + "uts", Kind: NSUTS}, {Path: nsDir + "net", Kind: NSNet}, {Path: nsDir + "pid", Kind: NSPID}}
	if err := OnThreadIn(nss, cmd.Start); err != nil { // pid namespace: for the children of this thread
		return 0, fmt.Errorf("exec in container %q (pid %d): %w", c.ID, st.PID, err)
	}
	execW.Close()
	if stdin != nil {
		go func() { _, _ = io.Copy(stdin, stdio.Stdin); _ = stdin.Close() }()
	}
	if term != nil {
		rctx, stopResize := context.WithCancel(ctx)
		defer stopResize() // before term.finish, deferred earlier
		term.start(rctx, stdio)
	}
	if goW != nil { // v1: place the helper, then let it go on
		for sub, cg := range cgroups {
			if err := os.WriteFile(filepath.Join(cg, "cgroup.procs"), []byte(strconv.Itoa(cmd.Process.Pid)), 0); err != nil {
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
				return 0, fmt.Errorf("exec in container %q: join %s cgroup %q: %w", c.ID, sub, cg, err)
			}
		}
		if err := sendGo(goW); err != nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			return 0, fmt.Errorf("exec in container %q: %w", c.ID, err)
		}
	}
	// EOF without data: the command was exec'd; data: why not.
	msg, _ := io.ReadAll(execR)
	werr := cmd.Wait()
	if ctx.Err() != nil {
		return 0, ctx.Err()
	}
	if len(msg) > 0 {
		if m, ok := strings.CutPrefix(string(msg), execNotFound); ok {
			if w := stdio.Stderr; w != nil || stdio.TTY && stdio.Stdout != nil {
				if stdio.TTY {
					w = stdio.Stdout
				}
				_, _ = io.WriteString(w, m)
			}
			return 127, nil
		}
		return 0, fmt.Errorf("exec in container %q: %w: %s", c.ID, ErrExec, msg)
	}
	var ee *exec.ExitError
	switch {
	case werr == nil:
		return 0, nil
	case errors.As(werr, &ee):
		return ee.ExitCode(), nil
	default:
		return 0, werr
	}
}

// runExec is the exec helper's main: already in the container's PID, IPC,
// UTS and network namespaces and (v2) its cgroup, it joins the mount
// namespace on this thread, which then drops to the container's
// privileges and execs the command. Failures go to the exec pipe and the
// helper exits 127.
func runExec(dir string) {
	runtime.LockOSThread()
	execPipe := os.NewFile(execPipeFD, "exec")
	err := execInContainer(dir)
	var nf errNotFound
	if errors.As(err, &nf) {
		fmt.Fprintf(execPipe, "%s%v", execNotFound, err)
	} else {
		fmt.Fprintf(execPipe, "%v", err)
	}
	os.Exit(127)
}

// errNotFound is a command that is not in the container.
type errNotFound struct{ error }

func execInContainer(dir string) error {
	if os.Getenv(envGo) != "" {
		if err := awaitGo(os.NewFile(execGoFD, "go")); err != nil {
			return err
		}
	}
	spec, err := ReadSpec(dir) // on the host, before joining the mount namespace
	if err != nil {
		return fmt.Errorf("read spec: %w", err)
	}
	var req execRequest
	if err := json.Unmarshal([]byte(os.Getenv(envExec)), &req); err != nil || len(req.Args) == 0 {
		return fmt.Errorf("bad exec request: %v", err)
	}
	// setns(CLONE_NEWNS) needs a thread that shares its filesystem
	// attributes (root, cwd) with no other: this thread gets its own copy
	// first. The thread is locked and execs, so the rest of the runtime
	// never sees the container's root.
	if err := unix.Unshare(unix.CLONE_FS); err != nil {
		return fmt.Errorf("unshare fs: %w", err)
	}
	if err := unix.Setns(execMntFD, unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("join mount namespace: %w", err)
	}
	_ = unix.Close(execMntFD)
	if err := unix.Chdir(req.Dir); err != nil {
		return fmt.Errorf("chdir %q: %w", req.Dir, err)
	}
	sec := spec.security()
	id, err := resolveUser(sec)
	if err != nil {
		return err
	}
	env := withHome(req.Env, id.home)
	argv0, err := lookPath(req.Args[0], env)
	if err != nil {
		return errNotFound{err}
	}
	unix.CloseOnExec(execPipeFD)
	if err := applySecurity(sec, id); err != nil {
		return err
	}
	err = unix.Exec(argv0, req.Args, env)
	return fmt.Errorf("exec %q: %w", req.Args[0], err)
}

// limitedBuffer keeps the first maxExecOutput bytes written.
type limitedBuffer struct{ bytes.Buffer }

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if room := maxExecOutput - b.Len(); room > 0 {
		b.Buffer.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}
