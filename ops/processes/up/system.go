package up

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/podflow/podflow/ops/client"
	"github.com/podflow/podflow/ops/processes/plan"
)

// SystemOptions say which system SystemUnderTest works on.
type SystemOptions struct {
	// Config is an existing system's client configuration; "": the
	// configured one (client.Candidates: $PODFLOW_CONFIG,
	// ./.podflow/config.json, ~/.podflow/config.json), else one of its own.
	Config string
	// Own starts a system of its own even when one is configured.
	Own bool
	// Out, when set, is told which system it works on.
	Out io.Writer
	// Nodes (simulated) and Replicas (stage replicas, "admission=2") of
	// its own system.
	Nodes    int
	Replicas string
	// Keep keeps its own system's data directory.
	Keep bool
	// Name names the session's connection and the temporary directory.
	Name string
	// Prepare, when set, is run on its own system's fresh data directory
	// before `podflow up` starts there; it returns more arguments of that
	// `podflow up`.
	Prepare func(dir string) ([]string, error)
}

// Procs say where to find a system's processes.
type Procs struct {
	ChildrenFile string // children.json: what `podflow up` runs ("": unknown)
	UpPID        int    // `podflow up`'s PID, when SystemUnderTest started it
}

// SystemUnderTest connects to the system of o.Config or, when it is empty,
// starts its own `podflow up` (StartChild) in a temporary directory
// (removed on cleanup unless o.Keep) and connects to that. It also says
// where to find the system's processes: children.json beside the
// configuration, and up's PID when it started its own. cleanup closes the
// session and stops what it started.
func SystemUnderTest(ctx context.Context, o SystemOptions) (_ *client.Session, _ Procs, cleanup func(), _ error) {
	configPath, name := o.Config, o.Name
	say := func(format string, a ...any) {
		if o.Out != nil {
			fmt.Fprintf(o.Out, format+"\n", a...)
		}
	}
	if o.Own && configPath != "" {
		return nil, Procs{}, func() {}, fmt.Errorf("--own starts a system of its own; --config names an existing one: give one of them")
	}
	if !o.Own && configPath == "" {
		for _, c := range client.Candidates("") {
			if _, err := os.Stat(c); err == nil {
				configPath = c
				break
			}
		}
		if configPath == "" {
			say("%s: no system configured (%s); starting one of its own", name, strings.Join(client.Candidates(""), ", "))
		}
	}
	if configPath != "" {
		say("%s: on the system of %s (--own starts a fresh one)", name, configPath)
	}
	var ps Procs
	var undo []func()
	cleanup = func() {
		for i := len(undo) - 1; i >= 0; i-- {
			undo[i]()
		}
	}
	if configPath == "" {
		dir, err := os.MkdirTemp("", name+"-")
		if err != nil {
			return nil, ps, nil, err
		}
		if !o.Keep {
			undo = append(undo, func() { os.RemoveAll(dir) })
		}
		var extra []string
		if o.Prepare != nil {
			if extra, err = o.Prepare(dir); err != nil {
				cleanup()
				return nil, ps, nil, err
			}
		}
		stop, pid, err := StartChild(ctx, dir, o.Nodes, o.Replicas, extra...)
		if err != nil {
			cleanup()
			return nil, ps, nil, err
		}
		undo = append(undo, stop)
		configPath, ps.UpPID = filepath.Join(dir, "config.json"), pid
	}
	var sess *client.Session
	var err error
	if ps.UpPID == 0 {
		// An existing system: fail fast when it does not answer, as
		// every command; then ride out its restarts (chaos kills).
		cli := client.DefaultCLI()
		cli.MaxReconnects = math.MaxInt32
		sess, err = client.OpenCLI(ctx, configPath, name, cli)
		if errors.Is(err, client.ErrUnreachable) {
			err = fmt.Errorf("%w (--own starts a fresh system)", err)
		}
	} else {
		sess, err = client.Open(ctx, configPath, name)
	}
	if err != nil {
		cleanup()
		return nil, ps, nil, err
	}
	if configPath != "" {
		ps.ChildrenFile = plan.Layout{Dir: filepath.Dir(configPath)}.Children()
	}
	undo = append(undo, sess.Close)
	return sess, ps, cleanup, nil
}

// StartChild runs `podflow up` (this executable) in dir as a child, with
// nodes simulated nodes, replicas (`--replicas`) and extra arguments, and
// waits until it is ready; stop ends it (SIGTERM, SIGKILL after 60s).
func StartChild(ctx context.Context, dir string, nodes int, replicas string, extra ...string) (stop func(), pid int, err error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, 0, err
	}
	args := []string{"up", "--data-dir", dir, "--nats-port", "0", "-q", "--nodes", fmt.Sprint(nodes)}
	if replicas != "" {
		args = append(args, "--replicas", replicas)
	}
	args = append(args, extra...)
	cmd := exec.Command(exe, args...)
	logf, err := os.Create(filepath.Join(dir, "up.log"))
	if err != nil {
		return nil, 0, err
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, 0, err
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	stop = func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(60 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		logf.Close()
	}
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		b, _ := os.ReadFile(filepath.Join(dir, "up.log"))
		if strings.Contains(string(b), "podflow is running") {
			return stop, cmd.Process.Pid, nil
		}
		select {
		case <-exited:
			return nil, 0, fmt.Errorf("podflow up exited:\n%s", b)
		case <-ctx.Done():
			stop()
			return nil, 0, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	stop()
	return nil, 0, fmt.Errorf("podflow up did not become ready in %s", dir)
}
