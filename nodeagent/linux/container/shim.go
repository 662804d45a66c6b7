package container

import (
	"bytes"
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

// The shim's file descriptors, as passed by Start: fd 3 is the ready pipe on
// which the shim writes one line, "ok <pid>" or "error <message>", then
// closes it.
const shimReadyFD = 3

// A spare shim (started before its container is known) reads the
// container directory from fd 4, a line, and exits at EOF.
const shimSpecFD = 4

// The init's file descriptors: fd 3 is the exec pipe (close-on-exec in the
// init, so EOF without data means the command was exec'd; data is the
// error), fd 4 (cgroup v1 only) the go pipe the init waits on until the shim
// has placed it in its cgroups and written goByte.
const (
	initExecFD = 3
	initGoFD   = 4
)

// runShim is the shim's main: start the init, report, copy its output to
// the log, wait for it and record the exit.
func runShim(dir string) error {
	// The shim outlives the agent and terminal: only SIGKILL ends it.
	signal.Ignore(syscall.SIGHUP, syscall.SIGINT, syscall.SIGTERM, syscall.SIGPIPE)
	ready := os.NewFile(shimReadyFD, "ready")
	if dir == "" { // a spare: wait for the container
		var err error
		if dir, err = awaitContainer(); err != nil || dir == "" {
			return err
		}
	}
	spec, err := ReadSpec(dir)
	if err != nil {
		fmt.Fprintf(ready, "error read spec: %v\n", err)
		return err
	}
	self, err := startTime(os.Getpid())
	if err != nil {
		fmt.Fprintf(ready, "error %v\n", err)
		return err
	}
	st := State{ID: spec.ID, Status: StatusCreated, ShimPID: os.Getpid(), ShimStart: self}
	if err := WriteJSON(filepath.Join(dir, stateFile), st); err != nil {
		fmt.Fprintf(ready, "error write state: %v\n", err)
		return err
	}
	fail := func(err error) error {
		st.Status, st.ExitCode, st.Error, st.FinishedAt = StatusExited, 128, err.Error(), time.Now()
		if werr := WriteJSON(filepath.Join(dir, stateFile), st); werr != nil {
			err = errors.Join(err, werr)
		}
		fmt.Fprintf(ready, "error %s\n", bytes.ReplaceAll([]byte(err.Error()), []byte("\n"), []byte(" ")))
		ready.Close()
		return err
	}

	logs, err := openLog(spec.LogPath, spec.LogMaxSize, spec.LogMaxFiles)
	if err != nil {
		return fail(fmt.Errorf("open log: %w", err))
	}
	defer logs.close()
	devCg, err := deviceCgroupV1(spec)
	if err != nil {
		return fail(err)
	}
	if devCg != "" {
		defer removeDeviceCgroupDir(devCg)
	}
	if v2, ok := spec.Cgroups[""]; ok {
		if err := attachDeviceProgramV2(v2, spec.security()); err != nil {
			return fail(err)
		}
	}
	cmd, pipes, err := startInit(spec, devCg != "")
	if err != nil {
		return fail(err)
	}
	// The init is cloned (v2: into its cgroup). On v1 place it now, then let
	// it go on.
	if pipes.goW != nil {
		join := spec.Cgroups
		if devCg != "" {
			join = joinCgroup(join, "devices", devCg)
		}
		for sub, cg := range join {
			if err := os.WriteFile(filepath.Join(cg, "cgroup.procs"), []byte(strconv.Itoa(cmd.Process.Pid)), 0); err != nil {
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
				return fail(fmt.Errorf("join %s cgroup %q: %w", sub, cg, err))
			}
		}
		if err := sendGo(pipes.goW); err != nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			return fail(fmt.Errorf("let the init go: %w", err))
		}
	}
	// EOF on the exec pipe: exec'd (the pipe was close-on-exec); data: the
	// init's error.
	msg, _ := io.ReadAll(pipes.execR)
	pipes.execR.Close()
	var stdin io.WriteCloser
	switch {
	case pipes.tty != nil && spec.Stdin:
		stdin = pipes.tty
	case pipes.stdin != nil:
		stdin = pipes.stdin
	}
	hub, err := serveAttach(dir, stdin, pipes.tty, spec.StdinOnce)
	if err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return fail(err)
	}
	copied := make(chan struct{}, 2)
	go func() {
		logs.copy("stdout", io.TeeReader(pipes.stdout, hub.writer(frameStdout)))
		copied <- struct{}{}
	}()
	if pipes.stderr != nil {
		go func() {
			logs.copy("stderr", io.TeeReader(pipes.stderr, hub.writer(frameStderr)))
			copied <- struct{}{}
		}()
	} else {
		copied <- struct{}{}
	}
	if len(msg) > 0 {
		_ = cmd.Wait()
		return fail(fmt.Errorf("%w: %s", ErrExec, bytes.TrimSpace(msg)))
	}
	st.PID = cmd.Process.Pid
	st.PIDStart, _ = startTime(st.PID)
	st.Status, st.StartedAt = StatusRunning, time.Now()
	if err := WriteJSON(filepath.Join(dir, stateFile), st); err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return fail(err)
	}
	fmt.Fprintf(ready, "ok %d\n", st.PID)
	ready.Close()

	werr := cmd.Wait()
	st.FinishedAt = time.Now()
	if spec.PIDNamespace != nil || spec.HostPID {
		killLeftovers(spec.Cgroups)
	}
	if devCg != "" {
		// Now: what the init left in it (in the pod's or the host's PID
		// namespace) would hold its output pipes open.
		removeDeviceCgroupDir(devCg)
	}
	// The init was PID 1 of its namespace (or, in a shared one, what it
	// left was killed): everything in it is gone, so the pipes reach EOF;
	// a process that escaped would hold them, hence the cap.
	for range 2 {
		select {
		case <-copied:
		case <-time.After(2 * time.Second):
		}
	}
	hub.close(2 * time.Second) // attaches get the output, then EOF
	ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
	switch {
	case ws.Signaled():
		st.Signal, st.ExitCode = int(ws.Signal()), 128+int(ws.Signal())
	case cmd.ProcessState != nil:
		st.ExitCode = ws.ExitStatus()
	default:
		st.ExitCode, st.Error = 128, fmt.Sprintf("wait: %v", werr)
	}
	st.OOMKilled = st.Signal == int(unix.SIGKILL) && oomKills(spec.Cgroups) > 0
	st.Status = StatusExited
	return WriteJSON(filepath.Join(dir, stateFile), st)
}

// awaitContainer reads the container directory a spare shim is given, and
// points its stdout and stderr at that container's shim log. "" (EOF): the
// spare is not needed.
func awaitContainer() (string, error) {
	specR := os.NewFile(shimSpecFD, "spec")
	b, err := io.ReadAll(specR)
	specR.Close()
	dir := strings.TrimSpace(string(b))
	if err != nil || dir == "" {
		return "", err
	}
	logf, err := os.OpenFile(filepath.Join(dir, shimLog), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return dir, nil // keep /dev/null
	}
	_ = unix.Dup3(int(logf.Fd()), 1, 0)
	_ = unix.Dup3(int(logf.Fd()), 2, 0)
	logf.Close()
	return dir, nil
}

type initPipes struct {
	execR, goW     *os.File
	stdout, stderr *os.File // stdout: the pty master with a terminal (stderr nil)
	stdin          *os.File // the stdin pipe's write end (Spec.Stdin without a terminal)
	tty            *os.File // the pty master (Spec.TTY)
}

// startInit clones the init in its namespaces (and on cgroup v2 into its
// cgroup) from a thread that joined the pod's network namespace; the
// thread is discarded afterwards.
func startInit(spec Spec, waitForCgroups bool) (*exec.Cmd, initPipes, error) {
	var p initPipes
	var closeAfter []*os.File
	defer func() {
		for _, f := range closeAfter {
			f.Close()
		}
	}()
	pipe := func() (r, w *os.File, err error) {
		r, w, err = os.Pipe()
		if err == nil {
			closeAfter = append(closeAfter, w, r)
		}
		return r, w, err
	}
	execR, execW, err := pipe()
	if err != nil {
		return nil, p, err
	}
	// The init's stdio and the shim's ends of it.
	var in, outW, errW, outR, errR, inW *os.File
	switch {
	case spec.TTY:
		term, err := openTerminal()
		if err != nil {
			return nil, p, err
		}
		closeAfter = append(closeAfter, term.master, term.slave)
		in, outW, errW, outR = term.slave, term.slave, term.slave, term.master
		p.tty = term.master
	default:
		if outR, outW, err = pipe(); err != nil {
			return nil, p, err
		}
		if errR, errW, err = pipe(); err != nil {
			return nil, p, err
		}
		if spec.Stdin {
			if in, inW, err = pipe(); err != nil {
				return nil, p, err
			}
			p.stdin = inW
		} else {
			if in, err = os.Open(os.DevNull); err != nil {
				return nil, p, err
			}
			closeAfter = append(closeAfter, in)
		}
	}
	self, err := os.Executable()
	if err != nil {
		return nil, p, err
	}
	cmd := &exec.Cmd{
		Path:       self,
		Args:       []string{"podflow-init", spec.ID},
		Env:        []string{envRole + "=" + roleInit, envDir + "=" + spec.Dir},
		Stdin:      in,
		Stdout:     outW,
		Stderr:     errW,
		ExtraFiles: []*os.File{execW},
		SysProcAttr: &syscall.SysProcAttr{
			Cloneflags: spec.cloneFlags(),
			Pdeathsig:  0,
		},
	}
	if spec.TTY { // a session of its own, the terminal its controlling one
		cmd.SysProcAttr.Setsid, cmd.SysProcAttr.Setctty, cmd.SysProcAttr.Ctty = true, true, 0
	}
	if v2, ok := spec.Cgroups[""]; ok {
		cg, err := os.Open(v2)
		if err != nil {
			return nil, p, fmt.Errorf("open cgroup %q: %w", v2, err)
		}
		closeAfter = append(closeAfter, cg)
		cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, int(cg.Fd())
	}
	if _, v2 := spec.Cgroups[""]; !v2 && (len(spec.Cgroups) > 0 || waitForCgroups) {
		goR, goW, err := pipe()
		if err != nil {
			return nil, p, err
		}
		cmd.ExtraFiles = append(cmd.ExtraFiles, goR)
		cmd.Env = append(cmd.Env, envGo+"=1")
		p.goW = goW
	}
	var nss []Namespace
	if spec.NetnsPath != "" {
		nss = append(nss, Namespace{Path: spec.NetnsPath, Kind: NSNet})
	}
	if spec.PIDNamespace != nil {
		nss = append(nss, spec.PIDNamespace.namespace())
	}
	if err := OnThreadIn(nss, cmd.Start); err != nil {
		return nil, p, fmt.Errorf("start init: %w", err)
	}
	// Keep the parent's ends; the deferred close drops the child's.
	keep := map[*os.File]bool{execR: true, outR: true, p.goW: true}
	for _, f := range []*os.File{errR, inW} {
		if f != nil {
			keep[f] = true
		}
	}
	rest := closeAfter[:0]
	for _, f := range closeAfter {
		if !keep[f] {
			rest = append(rest, f)
		}
	}
	closeAfter = rest
	p.execR, p.stdout, p.stderr = execR, outR, errR
	return cmd, p, nil
}

// cloneFlags are the namespaces the init gets: always a mount namespace,
// and new PID, UTS and IPC namespaces unless the host's (or, PID, the
// pod's shared one) are kept.
func (s Spec) cloneFlags() uintptr {
	flags := uintptr(unix.CLONE_NEWNS)
	for _, ns := range []struct {
		host bool
		flag uintptr
	}{{s.HostPID || s.PIDNamespace != nil, unix.CLONE_NEWPID}, {s.HostUTS, unix.CLONE_NEWUTS}, {s.HostIPC, unix.CLONE_NEWIPC}} {
		if !ns.host {
			flags |= ns.flag
		}
	}
	return flags
}

// oomKills reads the OOM kill counter of the container's memory cgroup.
func oomKills(cgroups map[string]string) int {
	file, key := "", "oom_kill"
	if dir, ok := cgroups[""]; ok {
		file = filepath.Join(dir, "memory.events")
	} else if dir, ok := cgroups["memory"]; ok {
		file = filepath.Join(dir, "memory.oom_control")
	}
	if file == "" {
		return 0
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return 0
	}
	for _, line := range bytes.Split(b, []byte{'\n'}) {
		f := bytes.Fields(line)
		if len(f) == 2 && string(f[0]) == key {
			n, _ := strconv.Atoi(string(f[1]))
			return n
		}
	}
	return 0
}
