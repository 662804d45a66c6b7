package chaos

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/podflow/podflow/ops/client"
)

// hostIPBase is the first loopback address of a --host-count run's hosts
// (127.0.0.51, .52, ...): distinct from the e2e tests' 127.0.0.21-23.
const hostIPBase = 51

// chaosHost is one host of a --host-count run: a `podflow up --init` or
// `--join` process and every process it started, on a loopback address of
// its own.
type chaosHost struct {
	name, ip, dir string
	// cidr is the host's --cluster-cidr: each host's simulated nodes
	// number their pod CIDRs from the start of it, so two hosts with one
	// cluster CIDR would give the same pod IPs.
	cidr string
	args []string

	cmd  *exec.Cmd
	log  *os.File
	done chan struct{}
}

// start runs the host's up and waits until it says it is running.
func (h *chaosHost) start(ctx context.Context, exe string, nodes int) error {
	if err := os.MkdirAll(h.dir, 0o700); err != nil {
		return err
	}
	logf, err := os.OpenFile(filepath.Join(h.dir, "up.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	off, _ := logf.Seek(0, io.SeekEnd)
	args := append([]string{"up", "--data-dir", h.dir, "--name", h.name, "--advertise", h.ip, "--nodes", strconv.Itoa(nodes),
		"--cluster-cidr", h.cidr}, h.args...)
	cmd := exec.Command(exe, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return err
	}
	h.cmd, h.log, h.done = cmd, logf, make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) { _ = cmd.Wait(); close(done) }(cmd, h.done)
	return h.waitFor(ctx, off, "podflow is running", 150*time.Second)
}

// output is what the host's up wrote since offset off of its log.
func (h *chaosHost) output(off int64) string {
	b, _ := os.ReadFile(filepath.Join(h.dir, "up.log"))
	if off > int64(len(b)) {
		return ""
	}
	return string(b[off:])
}

// waitFor waits until the host's log, from off, says what.
func (h *chaosHost) waitFor(ctx context.Context, off int64, what string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for !strings.Contains(h.output(off), what) {
		select {
		case <-h.done:
			return fmt.Errorf("%s: podflow up exited:\n%s", h.name, tail(h.output(off), 20))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: no %q in %s:\n%s", h.name, what, timeout, tail(h.output(off), 20))
		}
	}
	return nil
}

// kill SIGKILLs the host's up and every process under it at once.
func (h *chaosHost) kill() {
	if h.cmd == nil || h.cmd.Process == nil {
		return
	}
	killTree(h.cmd.Process.Pid)
	<-h.done
	h.log.Close()
	h.cmd = nil
}

// stop ends the host's up (SIGTERM: it stops its processes; SIGKILL to
// every one of them after a minute).
func (h *chaosHost) stop() {
	if h.cmd == nil || h.cmd.Process == nil {
		return
	}
	_ = h.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-h.done:
		h.log.Close()
		h.cmd = nil
	case <-time.After(time.Minute):
		h.kill()
	}
}

// killTree SIGKILLs pid and its descendants (found in /proc) at once:
// every process of a host, whatever process group each is in.
func killTree(pid int) {
	pids := []int{pid}
	for i := 0; i < len(pids); i++ {
		ents, _ := os.ReadDir("/proc")
		for _, e := range ents {
			child, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
			if err != nil {
				continue
			}
			// pid (comm) state ppid ...: comm may hold spaces.
			f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
			if len(f) > 1 && f[1] == strconv.Itoa(pids[i]) {
				pids = append(pids, child)
			}
		}
	}
	for _, p := range pids {
		_ = syscall.Kill(p, syscall.SIGKILL)
	}
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

var joinToken = regexp.MustCompile(`--token (K10\S+)`)

// runHosts is Run with Options.Hosts: a cluster of that many hosts on
// loopback addresses (`podflow up --init` on the first, `--join` on the
// others, each with Options.Nodes simulated nodes and a cluster CIDR of
// its own: 10.244.0.0/16, 10.245.0.0/16, ...), pods published over
// Options.Duration through the second host while, every KillInterval, a
// random host has every process SIGKILLed at once and is started again
// FaultFor later (at most MaxHostKills times); then the invariants.
func runHosts(ctx context.Context, o *Options, out io.Writer, rng *rand.Rand) error {
	if o.Hosts != 3 {
		return fmt.Errorf("--host-count %d: the run is of 3 hosts, each a store voter and a NATS server", o.Hosts)
	}
	if o.Config != "" {
		return errors.New("--host-count: chaos starts the hosts itself: leave out --config")
	}
	if o.LinClients > 0 {
		fmt.Fprintln(out, "chaos: --host-count runs no register workload (its HTTPS clients would follow one host); --lin-clients ignored")
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	base, err := os.MkdirTemp("", "podflow-chaos-hosts-")
	if err != nil {
		return err
	}
	if o.Keep {
		fmt.Fprintf(out, "chaos: the hosts' data directories are kept in %s\n", base)
	} else {
		defer os.RemoveAll(base)
	}
	hosts := make([]*chaosHost, o.Hosts)
	for i := range hosts {
		name := fmt.Sprintf("h%d", i+1)
		hosts[i] = &chaosHost{name: name, ip: fmt.Sprintf("127.0.0.%d", hostIPBase+i), dir: filepath.Join(base, name),
			cidr: fmt.Sprintf("10.%d.0.0/16", 244+i)}
	}
	var stopOnce sync.Once
	stopAll := func() {
		stopOnce.Do(func() {
			for _, h := range hosts {
				h.stop()
			}
		})
	}
	defer stopAll()

	hosts[0].args = []string{"--init"}
	if err := hosts[0].start(ctx, exe, o.Nodes); err != nil {
		return err
	}
	tok := joinToken.FindStringSubmatch(hosts[0].output(0))
	if tok == nil {
		return fmt.Errorf("%s: no join token in its output", hosts[0].name)
	}
	for _, h := range hosts[1:] {
		h.args = []string{"--join", hosts[0].ip, "--token", tok[1]}
		if err := h.start(ctx, exe, o.Nodes); err != nil {
			return err
		}
	}
	if err := hosts[0].waitFor(ctx, 0, "the streams are R3", 2*time.Minute); err != nil {
		return err
	}
	cli := client.DefaultCLI()
	cli.MaxReconnects = math.MaxInt32
	sess, err := client.OpenCLI(ctx, filepath.Join(hosts[1].dir, "config.json"), "podflow-chaos", cli)
	if err != nil {
		return err
	}
	defer sess.Close()
	cfg := sess.Config
	fmt.Fprintf(out, "chaos: seed %d, %d hosts on %s.., %d pods over %s, a host killed every %s (at most %d), down for %s\n",
		o.Seed, o.Hosts, hosts[0].ip, o.Pods, o.Duration, o.KillInterval, o.MaxHostKills, o.FaultFor)

	prefix := fmt.Sprintf("chaos-%d-", o.Seed%100000)
	token, err := cfg.BusToken(cfg.Token)
	if err != nil {
		return err
	}
	type workResult struct {
		acked []string
		err   error
	}
	workDone := make(chan workResult, 1)
	workCtx, stopWork := context.WithCancel(ctx)
	defer stopWork()
	go func() {
		acked, err := chaosWorkload(workCtx, sess, token, prefix, o.Pods, o.Duration)
		workDone <- workResult{acked, err}
	}()

	start := time.Now()
	elapsed := func() time.Duration { return time.Since(start).Round(time.Second) }
	kills := 0
	for time.Since(start) < o.Duration && (o.MaxHostKills <= 0 || kills < o.MaxHostKills) {
		sleepCtx(ctx, o.KillInterval)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		h := hosts[rng.IntN(len(hosts))]
		leader := storeLeader(ctx, sess)
		h.kill()
		kills++
		fmt.Fprintf(out, "  %6s  SIGKILL every process of %s (%s; store leader %q)\n", elapsed(), h.name, h.ip, leader)
		sleepCtx(ctx, o.FaultFor)
		if h == hosts[0] {
			h.args = []string{"--init"} // its data says it is a member already
		}
		restarted := time.Now()
		if err := h.start(ctx, exe, o.Nodes); err != nil {
			return fmt.Errorf("restart %s: %w", h.name, err)
		}
		fmt.Fprintf(out, "  %6s  %s running again in %s (store leader %q)\n", elapsed(), h.name, time.Since(restarted).Round(100*time.Millisecond), storeLeader(ctx, sess))
	}
	work := <-workDone
	if work.err != nil {
		return fmt.Errorf("workload: %w", work.err)
	}
	fmt.Fprintf(out, "chaos: %d host kills; waiting up to %s for the pods to settle\n", kills, o.Settle)
	violations := checkInvariants(ctx, sess, prefix, work.acked, o.Settle, out)
	if violations > 0 {
		fmt.Fprintf(out, "chaos: FAILED with %d violation(s); replay with --seed %d (--keep keeps the hosts' logs)\n", violations, o.Seed)
		return violationsError{violations}
	}
	fmt.Fprintln(out, "chaos: every invariant holds (0 violations)")
	return nil
}
