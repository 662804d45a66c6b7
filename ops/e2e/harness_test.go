// Package e2e starts the whole of podflow as processes — `podflow up`
// with its NATS server, store replicas, stages and simulated nodes — and
// drives it from the outside with the podflow command and a store client,
// the way a user would.
package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/objects"
)

var (
	binary   string // the podflow binary under test
	repoRoot string
)

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		fmt.Println("e2e: skipped in -short mode")
		os.Exit(0)
	}
	setParallel()
	dir, err := os.MkdirTemp("", "podflow-e2e-bin-")
	if err != nil {
		panic(err)
	}
	_, file, _, _ := runtime.Caller(0)
	repoRoot = filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
	binary = filepath.Join(dir, "podflow")
	build := exec.Command("go", "build", "-o", binary, "./cmd/podflow")
	build.Dir = filepath.Join(repoRoot, "ops")
	build.Stdout, build.Stderr = os.Stdout, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: build podflow:", err)
		os.Exit(1)
	}
	// The HTTP server image's binary, beside podflow, for --runtime linux.
	hs := exec.Command("go", "build", "-o", filepath.Join(dir, "httpserver"), "./httpserver")
	hs.Dir = filepath.Join(repoRoot, "images")
	hs.Env = append(os.Environ(), "CGO_ENABLED=0", "GOWORK=off")
	hs.Stdout, hs.Stderr = os.Stdout, os.Stderr
	if err := hs.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: build httpserver:", err)
		os.Exit(1)
	}
	// The busybox of the busybox images, beside podflow as `make run`
	// has it (bin/busybox, `make busybox`; make test builds it): `up`
	// pushes it. Without it `up` falls back to the system's.
	if b, err := os.ReadFile(filepath.Join(repoRoot, "bin", "busybox")); err == nil {
		if err := os.WriteFile(filepath.Join(dir, "busybox"), b, 0o755); err != nil {
			fmt.Fprintln(os.Stderr, "e2e: copy bin/busybox:", err)
			os.Exit(1)
		}
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// cluster is one running `podflow up`.
type cluster struct {
	t       *testing.T // the running (sub)test: helpers report to it
	root    *testing.T // the test that owns the cluster
	dir     string
	cmd     *exec.Cmd
	out     *bytes.Buffer
	config  string
	conn    *bus.Conn
	store   *objects.Store
	token   string
	stopped chan struct{}
}

// startCluster runs `podflow up` in a fresh data directory and connects to
// it; everything stops when the test ends, also when it fails.
func startCluster(t *testing.T, args ...string) *cluster {
	t.Helper()
	dir := t.TempDir()
	c := &cluster{t: t, root: t, dir: dir, out: &bytes.Buffer{}, config: filepath.Join(dir, "config.json"), stopped: make(chan struct{})}
	all := append([]string{"up", "--data-dir", dir, "--nats-port", "0", "-q"}, args...)
	c.cmd = exec.Command(binary, all...)
	c.cmd.Dir = repoRoot
	c.cmd.Stdout, c.cmd.Stderr = lockedWriter{c.out}, lockedWriter{c.out}
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = c.cmd.Wait(); close(c.stopped) }()
	t.Cleanup(c.stop)

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	for {
		if strings.Contains(c.output(), "podflow is running") {
			break
		}
		select {
		case <-c.stopped:
			t.Fatalf("podflow up exited:\n%s", c.output())
		case <-ctx.Done():
			t.Fatalf("podflow up did not start:\n%s", c.output())
		case <-time.After(50 * time.Millisecond):
		}
	}
	var cc struct {
		NATS  string `json:"nats"`
		Token string `json:"token"`
	}
	b, err := os.ReadFile(c.config)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &cc); err != nil {
		t.Fatal(err)
	}
	c.token = cc.Token
	bc, err := bus.ReadClientConfig(cc.NATS)
	if err != nil {
		t.Fatal(err)
	}
	bc.Name = "e2e-" + t.Name()
	c.conn, err = bus.Connect(ctx, bc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := raftstore.NewClient(c.conn.NATS(), raftstore.DefaultClientConfig())
	if err != nil {
		t.Fatal(err)
	}
	c.store = objects.New(kv)
	return c
}

func (c *cluster) output() string { return syncBufString(c.out) }

// stop sends SIGTERM to `podflow up` and waits for it to stop its children.
func (c *cluster) stop() {
	if c.conn != nil {
		c.conn.Close()
	}
	select {
	case <-c.stopped:
		// up exited on its own (a failed start): still show why.
		if c.root.Failed() {
			c.root.Logf("podflow up output:\n%s", c.output())
			c.dumpLogs()
		}
		return
	default:
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.stopped:
	case <-time.After(60 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.stopped
		c.root.Errorf("podflow up did not stop within 60s:\n%s", c.output())
	}
	c.checkPermissions()
	if c.root.Failed() {
		c.dumpLogs()
	}
}

// checkPermissions fails the test if the NATS server or the store refused
// any of podflow's own processes something: every process runs with its
// role's restricted user (services/pipeline), which must allow all it does.
func (c *cluster) checkPermissions() {
	for pattern, refusals := range map[string][]string{"nats*.log": {"Violation"}, "store-*.log": {"write refused", "read refused"}} {
		logs, _ := filepath.Glob(filepath.Join(c.dir, "logs", pattern))
		for _, l := range logs {
			b, _ := os.ReadFile(l)
			for _, line := range strings.Split(string(b), "\n") {
				if strings.Contains(line, "/user:"+bus.UserRolePrefix) {
					continue // a person's bus identity, refused on purpose (TestTrust), is no podflow process
				}
				for _, r := range refusals {
					if strings.Contains(line, r) {
						c.root.Errorf("a podflow process was refused (%s): %s", filepath.Base(l), line)
					}
				}
			}
		}
	}
}

func (c *cluster) dumpLogs() {
	logs, _ := filepath.Glob(filepath.Join(c.dir, "logs", "*.log"))
	for _, l := range logs {
		b, _ := os.ReadFile(l)
		if len(b) > 4000 {
			b = b[len(b)-4000:]
		}
		c.root.Logf("=== %s (tail)\n%s", filepath.Base(l), b)
	}
}

// podflow runs the podflow command against the cluster and returns its
// combined output and exit code.
func (c *cluster) podflow(args ...string) (string, int) {
	c.t.Helper()
	return c.podflowTimeout(60*time.Second, args...)
}

// podflowTimeout is podflow with a time limit of its own.
func (c *cluster) podflowTimeout(limit time.Duration, args ...string) (string, int) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Dir = repoRoot
	cmd.Env = append(os.Environ(), "PODFLOW_CONFIG="+c.config)
	out, err := cmd.CombinedOutput()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		c.t.Fatalf("podflow %v: %v", args, err)
	}
	return string(out), code
}

// mustPodflow runs podflow and fails the test on a non-zero exit.
func (c *cluster) mustPodflow(args ...string) string {
	c.t.Helper()
	out, code := c.podflow(args...)
	if code != 0 {
		c.t.Fatalf("podflow %s: exit %d\n%s", strings.Join(args, " "), code, out)
	}
	return out
}

// applyYAML writes manifest to a file and applies it.
func (c *cluster) applyYAML(manifest string, extra ...string) (string, int) {
	c.t.Helper()
	f := filepath.Join(c.t.TempDir(), "m.yaml")
	if err := os.WriteFile(f, []byte(manifest), 0o644); err != nil {
		c.t.Fatal(err)
	}
	return c.podflow(append([]string{"apply", "-f", f}, extra...)...)
}

// children reads DATA-DIR/children.json, what `podflow up` runs now.
func (c *cluster) children() []childRecord {
	c.t.Helper()
	b, err := os.ReadFile(filepath.Join(c.dir, "children.json"))
	if err != nil {
		c.t.Fatal(err)
	}
	var recs []childRecord
	if err := json.Unmarshal(b, &recs); err != nil {
		c.t.Fatal(err)
	}
	return recs
}

type childRecord struct {
	Name     string `json:"name"`
	Role     string `json:"role"`
	PID      int    `json:"pid"`
	Restarts int    `json:"restarts"`
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	last := ""
	for time.Now().Before(deadline) {
		ok, msg := cond()
		if ok {
			return
		}
		last = msg
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("timed out after %s waiting for %s; last: %s", timeout, what, last)
}

// scrape returns the /metrics text of one of up's children.
func (c *cluster) scrape(child string) string {
	c.t.Helper()
	b, err := os.ReadFile(filepath.Join(c.dir, "metrics.json"))
	if err != nil {
		c.t.Fatal(err)
	}
	var addrs map[string]string
	if err := json.Unmarshal(b, &addrs); err != nil {
		c.t.Fatal(err)
	}
	resp, err := http.Get("http://" + addrs[child] + "/metrics")
	if err != nil {
		c.t.Fatalf("scrape %s: %v", child, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatal(err)
	}
	return string(body)
}

func grepLines(text, substr string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
