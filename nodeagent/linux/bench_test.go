package linux_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/podflow/podflow/nodeagent/linux/container/containertest"
	corev1 "github.com/podflow/podflow/proto/corev1"
)

// latencies collects per-pod start latencies and per-step durations.
type latencies struct {
	mu    sync.Mutex
	pods  []time.Duration
	steps map[string]time.Duration
}

func (l *latencies) add(d time.Duration) {
	l.mu.Lock()
	l.pods = append(l.pods, d)
	l.mu.Unlock()
}

func (l *latencies) step(name string, d time.Duration) {
	l.mu.Lock()
	if l.steps == nil {
		l.steps = map[string]time.Duration{}
	}
	l.steps[name] += d
	l.mu.Unlock()
}

func (l *latencies) report(b *testing.B) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.pods) == 0 {
		return
	}
	s := slices.Clone(l.pods)
	slices.Sort(s)
	pct := func(p float64) float64 {
		return float64(s[min(len(s)-1, int(p*float64(len(s))))].Microseconds()) / 1000
	}
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
	for name, d := range l.steps {
		b.ReportMetric(float64(d.Microseconds())/1000/float64(len(s)), name+"-ms/pod")
	}
	b.ReportMetric(0, "ns/op") // the latencies above are the result
}

// BenchmarkPodStart measures pod start latency from RunPodSandbox to the
// container running (StartContainer returned: the command was exec'd),
// image present, one pod at a time and 20 at once, with a breakdown by
// step; and the baseline on the same machine: `ip netns add`, the CNI
// bridge plugin's ADD (host-local IPAM) and `runc run --detach` of the same
// rootfs. Run with, e.g.:
//
//	go test -run '^$' -bench PodStart -benchtime 20x ./linux/
func BenchmarkPodStart(b *testing.B) {
	for _, n := range []int{1, 20} {
		b.Run(fmt.Sprintf("podflow/pods=%d", n), func(b *testing.B) { benchPodflow(b, n) })
	}
	for _, n := range []int{1, 20} {
		b.Run(fmt.Sprintf("baseline-netns+cni+runc/pods=%d", n), func(b *testing.B) { benchBaseline(b, n) })
	}
}

func benchPodflow(b *testing.B, n int) {
	var lat latencies
	containertest.RequireRoot(b)
	e := newEnvWith(b, func(cfg *configT) {
		cfg.Trace = func(_, step string, d time.Duration) { lat.step(step, d) }
	})
	ctx := context.Background()
	// Image present: pulled, and unpacked by a first pod.
	pd := newPod(e.cfg.NodeName, "warm", "true")
	if _, err := e.rt.PullImage(ctx, pd, busyboxImage, "IfNotPresent"); err != nil {
		b.Fatal(err)
	}
	sb, err := e.rt.RunPodSandbox(ctx, pd)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := e.rt.StartContainer(ctx, pd, pd.Spec.Containers[0], sb); err != nil {
		b.Fatal(err)
	}
	if err := e.rt.RemovePodSandbox(ctx, pd.Metadata.Uid); err != nil {
		b.Fatal(err)
	}
	lat.steps = nil
	b.ResetTimer()
	for i := range b.N {
		pods := make([]*corev1.Pod, n)
		for j := range pods {
			pods[j] = newPod(e.cfg.NodeName, fmt.Sprintf("bench-%d-%d", i, j), "sleep", "3600")
		}
		var wg sync.WaitGroup
		for _, pd := range pods {
			wg.Go(func() {
				start := time.Now()
				sb, err := e.rt.RunPodSandbox(ctx, pd)
				if err == nil {
					_, err = e.rt.StartContainer(ctx, pd, pd.Spec.Containers[0], sb)
				}
				if err != nil {
					b.Error(err)
					return
				}
				lat.add(time.Since(start))
			})
		}
		wg.Wait()
		b.StopTimer()
		for _, pd := range pods {
			if err := e.rt.RemovePodSandbox(ctx, pd.Metadata.Uid); err != nil {
				b.Fatal(err)
			}
		}
		b.StartTimer()
	}
	b.StopTimer()
	lat.report(b)
}

func benchBaseline(b *testing.B, n int) {
	containertest.RequireRoot(b)
	for _, bin := range []string{"runc", "ip"} {
		if _, err := exec.LookPath(bin); err != nil {
			b.Skipf("needs %s (make deps-os installs runc and iproute2)", bin)
		}
	}
	const cniDir = "/usr/lib/cni"
	if _, err := os.Stat(filepath.Join(cniDir, "bridge")); err != nil {
		b.Skipf("needs the CNI bridge plugin in %s (Debian containernetworking-plugins)", cniDir)
	}
	forward := readFile("/proc/sys/net/ipv4/ip_forward")
	e := newEnv(b)
	ctx := context.Background()
	rootfs := filepath.Join(b.TempDir(), "rootfs")
	if _, err := e.rt.PullImage(ctx, newPod("x", "x"), busyboxImage, "IfNotPresent"); err != nil {
		b.Fatal(err)
	}
	if err := e.rt.Images().Rootfs(ctx, busyboxImage, rootfs); err != nil {
		b.Fatal(err)
	}
	bl := newBaseline(b, rootfs)
	var lat latencies
	b.ResetTimer()
	for range b.N {
		ids := make([]string, n)
		for j := range ids {
			ids[j] = fmt.Sprintf("pfb%s-%d", randHex(3), j)
		}
		var wg sync.WaitGroup
		for _, id := range ids {
			wg.Go(func() {
				start := time.Now()
				if err := bl.start(id, &lat); err != nil {
					b.Error(err)
					return
				}
				lat.add(time.Since(start))
			})
		}
		wg.Wait()
		b.StopTimer()
		for _, id := range ids {
			bl.stop(id)
		}
		b.StartTimer()
	}
	b.StopTimer()
	lat.report(b)
	if now := readFile("/proc/sys/net/ipv4/ip_forward"); now != forward {
		b.Errorf("net.ipv4.ip_forward changed from %s to %s", forward, now)
	}
}

// baseline runs pods the conventional way: ip netns add, the CNI bridge
// plugin (no gateway, no masquerade: nothing is forwarded) and runc.
type baseline struct {
	b       testing.TB
	dir     string // per-container bundles
	runcDir string // runc --root
	netconf []byte
	spec    map[string]any
	bridge  string
}

func newBaseline(b testing.TB, rootfs string) *baseline {
	dir := b.TempDir()
	bl := &baseline{b: b, dir: dir, runcDir: "/run/podflow-bench-runc-" + randHex(3), bridge: "pfbench" + randHex(3)}
	conf := map[string]any{
		"cniVersion": "1.0.0", "name": "podflow-bench", "type": "bridge", "bridge": bl.bridge,
		"isGateway": false, "ipMasq": false,
		"ipam": map[string]any{"type": "host-local", "subnet": "10.244.254.0/24", "dataDir": filepath.Join(dir, "ipam")},
	}
	bl.netconf, _ = json.Marshal(conf)
	// The default spec of `runc spec`, adapted.
	if out, err := exec.Command("runc", "spec", "--bundle", dir).CombinedOutput(); err != nil {
		b.Fatalf("runc spec: %v: %s", err, out)
	}
	raw, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		b.Fatal(err)
	}
	if err := json.Unmarshal(raw, &bl.spec); err != nil {
		b.Fatal(err)
	}
	proc := bl.spec["process"].(map[string]any)
	proc["terminal"] = false
	proc["args"] = []string{"sleep", "3600"}
	bl.spec["root"] = map[string]any{"path": rootfs, "readonly": false}
	b.Cleanup(func() {
		_ = exec.Command("ip", "link", "del", bl.bridge).Run()
		_ = os.RemoveAll(bl.runcDir)
		// runc delete removes each container's cgroup; their parent is ours.
		parents, _ := filepath.Glob("/sys/fs/cgroup/*/podflow-bench")
		for _, p := range parents {
			if err := os.Remove(p); err != nil {
				b.Errorf("remove cgroup %s: %v", p, err)
			}
		}
	})
	return bl
}

func (bl *baseline) start(id string, lat *latencies) error {
	t := time.Now()
	if out, err := exec.Command("ip", "netns", "add", id).CombinedOutput(); err != nil {
		return fmt.Errorf("ip netns add: %v: %s", err, out)
	}
	lat.step("netns", time.Since(t))
	t = time.Now()
	cni := exec.Command("/usr/lib/cni/bridge")
	cni.Env = []string{"CNI_COMMAND=ADD", "CNI_CONTAINERID=" + id, "CNI_NETNS=/run/netns/" + id, "CNI_IFNAME=eth0", "CNI_PATH=/usr/lib/cni"}
	cni.Stdin = bytes.NewReader(bl.netconf)
	if out, err := cni.CombinedOutput(); err != nil {
		return fmt.Errorf("CNI bridge ADD: %v: %s", err, out)
	}
	lat.step("cni-bridge", time.Since(t))
	// Bundle: config.json with the pod's netns and a podflow cgroup.
	bundle := filepath.Join(bl.dir, id)
	if err := os.MkdirAll(bundle, 0o755); err != nil {
		return err
	}
	spec := cloneSpec(bl.spec)
	lx := spec["linux"].(map[string]any)
	var nss []any
	for _, ns := range lx["namespaces"].([]any) {
		if ns.(map[string]any)["type"] != "network" {
			nss = append(nss, ns)
		}
	}
	lx["namespaces"] = append(nss, map[string]any{"type": "network", "path": "/run/netns/" + id})
	lx["cgroupsPath"] = "/podflow-bench/" + id
	spec["hostname"] = id
	b, _ := json.Marshal(spec)
	if err := os.WriteFile(filepath.Join(bundle, "config.json"), b, 0o644); err != nil {
		return err
	}
	t = time.Now()
	// No pipes: the detached container would inherit them and hold them
	// open. runc's own errors go to its log.
	logf := filepath.Join(bundle, "runc.log")
	if err := exec.Command("runc", "--root", bl.runcDir, "--log", logf, "run", "--detach", "--bundle", bundle, id).Run(); err != nil {
		return fmt.Errorf("runc run: %v: %s", err, readFile(logf))
	}
	lat.step("runc-run", time.Since(t))
	return nil
}

func (bl *baseline) stop(id string) {
	if out, err := exec.Command("runc", "--root", bl.runcDir, "delete", "--force", id).CombinedOutput(); err != nil {
		bl.b.Errorf("runc delete: %v: %s", err, out)
	}
	cni := exec.Command("/usr/lib/cni/bridge")
	cni.Env = []string{"CNI_COMMAND=DEL", "CNI_CONTAINERID=" + id, "CNI_NETNS=/run/netns/" + id, "CNI_IFNAME=eth0", "CNI_PATH=/usr/lib/cni"}
	cni.Stdin = bytes.NewReader(bl.netconf)
	if out, err := cni.CombinedOutput(); err != nil {
		bl.b.Errorf("CNI bridge DEL: %v: %s", err, out)
	}
	if out, err := exec.Command("ip", "netns", "del", id).CombinedOutput(); err != nil {
		bl.b.Errorf("ip netns del: %v: %s", err, out)
	}
}

func cloneSpec(m map[string]any) map[string]any {
	b, _ := json.Marshal(m)
	var out map[string]any
	_ = json.Unmarshal(b, &out)
	return out
}
