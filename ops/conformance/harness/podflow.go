package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// podflowProc is a `podflow up` this harness started.
type podflowProc struct {
	cmd        *exec.Cmd
	done       chan error
	log        *os.File
	kubeconfig string
	registry   string // "" on the simulated runtime
}

// runningLine is what `podflow up` prints once every process is ready.
const runningLine = "up: podflow is running"

// jobHostPathDir is the hostPath directory of the suite's Job tests.
const jobHostPathDir = "/tmp/job-e2e"

// etcHostsHostPath allows the host's /etc/hosts as a hostPath volume,
// read-only (the node agent's "<path>:ro" allowlist entry).
const etcHostsHostPath = "/etc/hosts:ro"

// startPodflow starts `podflow up` in a fresh data directory, in its own
// process group (a Ctrl-C on the terminal reaches the harness, which
// stops podflow by its PID), and waits until it is running.
func startPodflow(ctx context.Context, o *runOptions) (*podflowProc, error) {
	if err := os.RemoveAll(o.dataDir); err != nil {
		return nil, fmt.Errorf("run: remove the previous data directory: %w", err)
	}
	logPath := filepath.Join(o.out, "podflow.log")
	lf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	args := []string{"up", "--data-dir", o.dataDir, "--runtime", o.runtime, "--nats-port", "0"}
	if o.runtime == "linux" {
		// The suite's Job tests keep a file across a Job's pods in a
		// hostPath DirectoryOrCreate under this scratch directory
		// (test/e2e/framework/job NewTestJobOnNode); KubeletManagedEtcHosts
		// compares the pods' /etc/hosts with the host's, mounted by
		// hostPath: read-only here (the test only reads it). No other
		// hostPath.
		args = append(args, "--allow-host-path", jobHostPathDir, "--allow-host-path", etcHostsHostPath)
		// Two nodes at least: the suite's multi-node tests (two untainted
		// nodes, a DaemonSet's rollback, pod-to-pod across nodes) need them.
		args = append(args, "--linux-nodes", strconv.Itoa(o.nodes))
	}
	cmd := exec.Command(o.podflow, args...)
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		lf.Close()
		return nil, fmt.Errorf("run: start %s: %w", o.podflow, err)
	}
	p := &podflowProc{cmd: cmd, done: make(chan error, 1), log: lf, kubeconfig: filepath.Join(o.dataDir, "kubeconfig")}
	go func() { p.done <- cmd.Wait() }()
	fmt.Printf("conformance: %s (pid %d), log %s\n", strings.Join(append([]string{"podflow"}, args...), " "), cmd.Process.Pid, logPath)

	deadline := time.NewTimer(o.upTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		b, _ := os.ReadFile(logPath)
		if bytes.Contains(b, []byte(runningLine)) {
			break
		}
		select {
		case err := <-p.done:
			p.done <- err
			p.stop()
			b, _ = os.ReadFile(logPath) // all it wrote before exiting
			return nil, fmt.Errorf("run: podflow up exited (%v) before it was running:\n%s", err, tail(b, 15))
		case <-deadline.C:
			p.stop()
			return nil, fmt.Errorf("run: podflow was not running after %s:\n%s", o.upTimeout, tail(b, 15))
		case <-ctx.Done():
			p.stop()
			return nil, ctx.Err()
		case <-tick.C:
		}
	}
	if o.runtime == "linux" {
		b, err := os.ReadFile(filepath.Join(o.dataDir, "registry.addr"))
		if err != nil {
			p.stop()
			return nil, fmt.Errorf("run: podflow's registry address: %w", err)
		}
		p.registry = strings.TrimSpace(string(b))
	}
	fmt.Printf("conformance: podflow running after %s (KUBECONFIG=%s)\n", time.Since(t0).Round(100*time.Millisecond), p.kubeconfig)
	return p, nil
}

// stop sends podflow SIGTERM (it stops its children and tears its node
// down) and waits; after 3 minutes it kills podflow's process group.
func (p *podflowProc) stop() {
	defer p.log.Close()
	defer os.RemoveAll(jobHostPathDir) // the Job tests' scratch files, once no pod uses them
	select {
	case err := <-p.done: // already exited
		p.done <- err
		return
	default:
	}
	fmt.Printf("conformance: stopping podflow (pid %d)\n", p.cmd.Process.Pid)
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.done:
		p.done <- err
	case <-time.After(3 * time.Minute):
		fmt.Printf("conformance: podflow (pid %d) still running 3m after SIGTERM: killing its process group\n", p.cmd.Process.Pid)
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		p.done <- <-p.done
	}
}
