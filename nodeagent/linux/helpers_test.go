package linux_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/podflow/podflow/nodeagent"
	"github.com/podflow/podflow/nodeagent/linux"
	"github.com/podflow/podflow/nodeagent/linux/cgroups"
	"github.com/podflow/podflow/nodeagent/linux/container"
	"github.com/podflow/podflow/nodeagent/linux/container/containertest"
	"github.com/podflow/podflow/nodeagent/linux/image/imagebuild"
	"github.com/podflow/podflow/nodeagent/linux/image/imagetest"
	corev1 "github.com/podflow/podflow/proto/corev1"
)

const busyboxImage = "podflow/busybox:1"

func TestMain(m *testing.M) {
	if container.RunHelper() {
		return
	}
	if os.Getenv(envAgentChild) != "" {
		os.Exit(agentChild())
	}
	goleak.VerifyTestMain(m)
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// env is one node's runtime over real kernel parts with a registry that
// holds the busybox image; everything is removed on cleanup.
type env struct {
	t       testing.TB
	cfg     linux.Config
	rt      *linux.Runtime
	reg     *imagetest.Registry
	cgroups string // cgroup root, "podflow-test-…"
}

// podSubnets hands each test node its own pod CIDR among
// 10.244.200.0/24 … 10.244.249.0/24, from a random start (so that two
// test processes seldom pick the same): tests run in parallel, and two
// bridges of one /24 would route each other's pod IPs.
var podSubnets = struct {
	sync.Mutex
	next int
}{next: mrand.IntN(50)}

func newConfig(t testing.TB, reg *imagetest.Registry) linux.Config {
	node := "pf-test-" + randHex(4)
	podSubnets.Lock()
	cidr := fmt.Sprintf("10.244.%d.0/24", 200+podSubnets.next%50)
	podSubnets.next++
	podSubnets.Unlock()
	cfg := linux.DefaultConfig(node, cidr, t.TempDir(), reg.Addr)
	cfg.Cgroups.Root = "podflow-test-" + randHex(4)
	cfg.LockDir = t.TempDir()
	cfg.HostPathPrefixes = []string{os.TempDir()}
	return cfg
}

type configT = linux.Config

func newEnv(t testing.TB) *env { return newEnvWith(t, nil) }

// newEnvWith is newEnv with the configuration adjusted by adjust.
func newEnvWith(t testing.TB, adjust func(*linux.Config)) *env {
	t.Helper()
	containertest.RequireRoot(t)
	reg := imagetest.NewRegistry(t)
	img, err := imagebuild.Busybox(context.Background(), containertest.Busybox)
	if err != nil {
		t.Fatal(err)
	}
	reg.Push(t, busyboxImage, img)
	cfg := newConfig(t, reg)
	if adjust != nil {
		adjust(&cfg)
	}
	e := &env{t: t, cfg: cfg, reg: reg, cgroups: cfg.Cgroups.Root}
	e.rt = e.open()
	t.Cleanup(e.cleanup)
	return e
}

func (e *env) open() *linux.Runtime {
	e.t.Helper()
	rt, err := linux.New(e.cfg)
	if err != nil {
		e.t.Fatalf("linux.New: %v", err)
	}
	return rt
}

// cleanup removes every pod, the bridge and the cgroup hierarchy, and
// checks with the kernel that nothing of this node remains.
func (e *env) cleanup() {
	t := e.t
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if e.rt == nil {
		e.rt = e.open()
	}
	sbs, _ := e.rt.ListSandboxes(ctx)
	for _, sb := range sbs {
		if err := e.rt.RemovePodSandbox(ctx, sb.PodUID); err != nil {
			t.Errorf("cleanup: remove pod %s: %v", sb.PodUID, err)
		}
	}
	if err := e.rt.Network().RemoveBridge(ctx); err != nil {
		t.Errorf("cleanup: remove bridge: %v", err)
	}
	_ = e.rt.Close()
	cg, err := cgroups.New(e.cfg.Cgroups)
	if err == nil {
		if err := cg.RemoveHierarchy(ctx); err != nil {
			t.Errorf("cleanup: remove cgroups: %v", err)
		}
	}
	e.assertNoLeaks("")
}

// assertNoLeaks asks the kernel whether anything of this node (or, with
// uid, of that pod) remains: network namespaces, links, cgroups, mounts.
func (e *env) assertNoLeaks(uid string) {
	t := e.t
	t.Helper()
	needle := e.cfg.Network.BridgeName
	if uid != "" {
		needle = uid
	}
	if out, _ := exec.Command("ip", "netns", "list").Output(); uid != "" && strings.Contains(string(out), uid) {
		t.Errorf("a network namespace of pod %s remains:\n%s", uid, out)
	}
	if out, _ := exec.Command("ip", "-o", "link").Output(); uid == "" && strings.Contains(string(out), needle) {
		t.Errorf("link %s remains:\n%s", needle, out)
	}
	root := e.cgroups
	if uid != "" {
		root = "pod" + uid
	}
	if out, _ := exec.Command("find", "/sys/fs/cgroup", "-name", root).Output(); len(strings.TrimSpace(string(out))) > 0 {
		t.Errorf("cgroups remain:\n%s", out)
	}
	if b, _ := os.ReadFile("/proc/self/mountinfo"); strings.Contains(string(b), e.cfg.DataDir) {
		t.Errorf("mounts under %s remain", e.cfg.DataDir)
	}
}

// startPod pulls the busybox image, runs pd's sandbox and starts its first
// container.
func (e *env) startPod(t testing.TB, ctx context.Context, pd *corev1.Pod) (nodeagent.Sandbox, nodeagent.ContainerID) {
	t.Helper()
	if _, err := e.rt.PullImage(ctx, pd, busyboxImage, "IfNotPresent"); err != nil {
		t.Fatal(err)
	}
	sb, err := e.rt.RunPodSandbox(ctx, pd)
	if err != nil {
		t.Fatal(err)
	}
	id, err := e.rt.StartContainer(ctx, pd, pd.Spec.Containers[0], sb)
	if err != nil {
		t.Fatalf("StartContainer: %v", err)
	}
	return sb, id
}

// execProbe runs cmd as an exec probe of pd's first container and returns
// its output; the probe must succeed.
func (e *env) execProbe(t testing.TB, ctx context.Context, pd *corev1.Pod, id nodeagent.ContainerID, cmd ...string) string {
	t.Helper()
	// A command run to read what the container sees, not a probe under
	// test: it gets the time it needs on a loaded machine, where the
	// default one second (runtime_test's "exec times out") is too short.
	res, err := e.rt.Probe(ctx, pd, pd.Spec.Containers[0], id, nodeagent.ProbeLiveness, &corev1.Probe{
		Exec: &corev1.ExecAction{Command: cmd}, TimeoutSeconds: 30})
	if err != nil || !res.OK {
		t.Fatalf("probe %q: %+v %v", cmd, res, err)
	}
	return res.Message
}

// newPod returns a busybox pod with one container running args.
func newPod(node, name string, args ...string) *corev1.Pod {
	return &corev1.Pod{
		Metadata: &corev1.ObjectMeta{Name: name, Namespace: "default", Uid: "pf" + randHex(8)},
		Spec: &corev1.PodSpec{NodeName: node, RestartPolicy: "Always", Containers: []*corev1.Container{{
			Name: "main", Image: busyboxImage, ImagePullPolicy: "IfNotPresent", Command: args,
		}}},
	}
}

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// eventually polls cond until it holds or 20 s pass.
func eventually(t testing.TB, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ok, last := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after 20s (last: %s)", what, last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func readFile(path string) string {
	b, _ := os.ReadFile(path)
	return strings.TrimSpace(string(b))
}

var _ = filepath.Join
