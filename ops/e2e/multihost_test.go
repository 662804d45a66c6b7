package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/nodeagent/linux/network"
	"github.com/podflow/podflow/nodeagent/linux/proxy"
	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/objects"
)

// host is one `podflow up --init` or `--join`: a machine of a cluster of
// several, on its own loopback address.
type host struct {
	t    *testing.T
	name string
	ip   string
	dir  string
	args []string
	// netns: the host is this network namespace (nsenter --net, the
	// mount namespace shared), its node a Linux node.
	netns string
	cmd   *exec.Cmd
	out   *bytes.Buffer
	done  chan struct{}
	// killed: kill ended the host's processes and start has not run
	// since; nothing of it cleaned up after itself.
	killed bool
}

func (h *host) start() {
	h.t.Helper()
	h.out = &bytes.Buffer{}
	args := append([]string{"up", "--data-dir", h.dir, "--name", h.name, "--advertise", h.ip,
		"--nodes", "1", "--node-monitor-grace-period", "10s"}, h.args...)
	h.cmd = exec.Command(binary, args...)
	if h.netns != "" {
		args[7], args[8] = "--runtime", "linux"
		h.cmd = exec.Command("nsenter", append([]string{"--net=" + filepath.Join("/run/netns", h.netns), binary}, args...)...)
	}
	h.cmd.Dir = repoRoot
	h.cmd.Stdout, h.cmd.Stderr = lockedWriter{h.out}, lockedWriter{h.out}
	h.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := h.cmd.Start(); err != nil {
		h.t.Fatal(err)
	}
	h.done, h.killed = make(chan struct{}), false
	go func(cmd *exec.Cmd, done chan struct{}) { _ = cmd.Wait(); close(done) }(h.cmd, h.done)
	h.waitFor("podflow is running", 150*time.Second)
}

func (h *host) output() string { return syncBufString(h.out) }

// waitFor waits until the host's output says what.
func (h *host) waitFor(what string, timeout time.Duration) {
	h.t.Helper()
	deadline := time.Now().Add(timeout)
	for !strings.Contains(h.output(), what) {
		select {
		case <-h.done:
			h.t.Fatalf("%s: podflow up exited:\n%s", h.name, h.output())
		default:
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("%s: no %q in %s:\n%s", h.name, what, timeout, h.output())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// stop ends the host's up (SIGTERM: it stops its processes).
func (h *host) stop() {
	if h.cmd == nil || h.cmd.Process == nil {
		return
	}
	_ = h.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-h.done:
	case <-time.After(60 * time.Second):
		killTree(h.cmd.Process.Pid)
		<-h.done
	}
}

// kill SIGKILLs every process of the host at once: its up and every
// descendant (NATS, the store replica, the stages, the node agent).
func (h *host) kill() {
	killTree(h.cmd.Process.Pid)
	<-h.done
	h.killed = true
}

// stopHosts stops every host at once (each stops its processes in turn;
// a Linux node decommissions itself), logs each one's output and the ends
// of its logs when t failed, and leaves nothing of a Linux host in the
// kernel: a host killed and not started again (a test that failed midway)
// is swept (sweepHost), and what a host that stopped left behind is an
// error, swept as well.
func stopHosts(t *testing.T, hosts []*host) {
	t.Helper()
	var wg sync.WaitGroup
	for _, h := range hosts {
		wg.Go(h.stop)
	}
	wg.Wait()
	for _, h := range hosts {
		if t.Failed() && h.out != nil {
			t.Logf("%s's up:\n%s", h.name, h.output())
			for _, log := range []string{"store", "nats", "join"} {
				b, _ := os.ReadFile(filepath.Join(h.dir, "logs", log+".log"))
				if lines := strings.Split(strings.TrimSpace(string(b)), "\n"); len(lines) > 0 {
					t.Logf("%s's %s.log, last lines:\n%s", h.name, log, strings.Join(lines[max(0, len(lines)-25):], "\n"))
				}
			}
		}
	}
	// What a host left in the kernel; the data directories share one
	// temporary root, so the killed hosts are swept before the others are
	// checked.
	left := func(h *host) string {
		l := kernelObjects(t, h.name)
		if tables := netnsTables(h); tables != "" {
			l += " nftables " + tables
		}
		return strings.TrimSpace(l)
	}
	sweep := func(h *host) {
		if err := sweepHost(h); err != nil {
			t.Errorf("sweep %s: %v", h.name, err)
		}
		if l := left(h); l != "" {
			t.Errorf("%s swept, still left: %s", h.name, l)
		}
	}
	for _, h := range hosts {
		if h.netns != "" && h.killed {
			if l := left(h); l != "" {
				t.Logf("%s was killed; sweeping %s", h.name, l)
				sweep(h)
			}
		}
	}
	for _, h := range hosts {
		if h.netns != "" && !h.killed {
			if l := left(h); l != "" {
				t.Errorf("%s left %s", h.name, l)
				sweep(h)
			}
		}
	}
}

// netnsTables lists the nftables tables of the node of h in h's network
// namespace (its proxy's and hostPorts', named after the node and its
// bridge), "" without the nft command.
func netnsTables(h *host) string {
	out, err := exec.Command("ip", "netns", "exec", h.netns, "nft", "list", "tables").Output()
	if err != nil {
		return ""
	}
	var mine []string
	for _, l := range strings.Split(string(out), "\n") {
		if f := strings.Fields(l); len(f) == 3 && f[0] == "table" &&
			(strings.Contains(f[2], proxy.TableFor(h.name)) || strings.Contains(f[2], network.BridgeNameFor(h.name))) {
			mine = append(mine, f[1]+" "+f[2])
		}
	}
	return strings.Join(mine, ", ")
}

// sweepHost removes what the Linux node of a host whose processes are
// gone left in the kernel, as its node agent's decommission would have:
// the processes left in its cgroups (killed) and the cgroups, the mounts
// under its data directory and its pods' network namespaces, and in the
// host's network namespace its bridge, veths and nftables tables.
func sweepHost(h *host) error {
	var errs []error
	bridge := network.BridgeNameFor(h.name)
	// Cgroups, in every hierarchy, deepest first, once their processes
	// are gone.
	roots, _ := filepath.Glob("/sys/fs/cgroup/podflow-" + h.name)
	more, _ := filepath.Glob("/sys/fs/cgroup/*/podflow-" + h.name)
	roots = append(roots, more...)
	// On cgroup v1 each container also has a device cgroup of its own,
	// named by its id (its pod directory's containers/<id>), which the
	// shim or the node agent would have removed.
	for _, pattern := range []string{"/nodes/*/pods/*/containers/*", "/*/nodes/*/pods/*/containers/*"} {
		ctrs, _ := filepath.Glob(h.dir + pattern)
		for _, c := range ctrs {
			if dev := filepath.Join("/sys/fs/cgroup/devices", "podflow-dev-"+filepath.Base(c)); dirExists(dev) {
				roots = append(roots, dev)
			}
		}
	}
	for _, root := range roots {
		var dirs []string
		_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			for range 50 {
				b, _ := os.ReadFile(filepath.Join(dirs[i], "cgroup.procs"))
				pids := strings.Fields(string(b))
				for _, p := range pids {
					if pid, err := strconv.Atoi(p); err == nil {
						_ = syscall.Kill(pid, syscall.SIGKILL)
					}
				}
				if err := os.Remove(dirs[i]); err == nil || os.IsNotExist(err) {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			if _, err := os.Stat(dirs[i]); err == nil {
				errs = append(errs, fmt.Errorf("cgroup %s stays", dirs[i]))
			}
		}
	}
	// Mounts under its data directory or of its pods, deepest first.
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	var mounts []string
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 4 &&
			(strings.HasPrefix(f[4], h.dir+"/") || strings.Contains(f[4], "podflow-"+bridge+"-") || strings.Contains(f[4], "podflow-"+h.name)) {
			mounts = append(mounts, f[4])
		}
	}
	for i := len(mounts) - 1; i >= 0; i-- {
		if err := syscall.Unmount(mounts[i], syscall.MNT_DETACH); err != nil && err != syscall.EINVAL && err != syscall.ENOENT {
			errs = append(errs, fmt.Errorf("unmount %s: %w", mounts[i], err))
		}
	}
	// Its pods' network namespaces.
	pns, _ := filepath.Glob(filepath.Join(network.NetnsDir, "podflow-"+bridge+"-*"))
	for _, p := range pns {
		if out, err := exec.Command("ip", "netns", "delete", filepath.Base(p)).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("ip netns delete %s: %v: %s", filepath.Base(p), err, out))
		}
	}
	// In the host's namespace: the bridge and its ports, the tables.
	if out, err := exec.Command("ip", "-n", h.netns, "-o", "link", "show", "master", bridge).Output(); err == nil {
		for _, l := range strings.Split(string(out), "\n") {
			if f := strings.Fields(l); len(f) > 1 {
				name, _, _ := strings.Cut(strings.TrimSuffix(f[1], ":"), "@")
				_ = exec.Command("ip", "-n", h.netns, "link", "delete", name).Run()
			}
		}
	}
	_ = exec.Command("ip", "-n", h.netns, "link", "delete", bridge).Run()
	for _, tbl := range strings.Split(netnsTables(h), ", ") {
		if f := strings.Fields(tbl); len(f) == 2 {
			if out, err := exec.Command("ip", "netns", "exec", h.netns, "nft", "delete", "table", f[0], f[1]).CombinedOutput(); err != nil {
				errs = append(errs, fmt.Errorf("nft delete table %s: %v: %s", tbl, err, out))
			}
		}
	}
	return errors.Join(errs...)
}

// killTree SIGKILLs pid and its descendants, found in /proc.
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

// podflowAt runs a podflow command with the client configuration of dir.
func podflowAt(t *testing.T, dir string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(binary, append([]string{"--config", filepath.Join(dir, "config.json")}, args...)...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestThreeHosts (issue 39): three hosts on loopback addresses of their
// own run the real binaries with up --init and up --join, the simulated
// runtime for nodes: the third server makes the streams R3 and the store
// three voters, and the aggregator proxies through every server's API
// (aggregatorOnEveryHost). Every process of the first host is killed: the store
// re-elects, publishes and applies made meanwhile succeed and no
// acknowledged PodRequested is lost, the dead host's node goes NotReady
// and its pods are evicted after their tolerationSeconds (by the node
// lifecycle controller's leader, elected again if it was on the dead
// host); a ReplicaSet's pod that was there is re-created on a live host;
// the host comes back and finishes the evictions. Then the third host leaves (up --leave):
// the store has two voters, its node and its host record are gone.
//
// The hosts listen on 127.0.0.21-23 but dial out from 127.0.0.1, as a
// machine with several addresses may dial from another than the one it
// advertises: their NATS servers form a full mesh only by advertising
// their own route addresses.
func TestThreeHosts(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-host test in -short mode")
	}
	// Three whole hosts and a host kill: a heavy test. Its fixed ports are
	// on 127.0.0.21-23, where no other test listens.
	parallel(t, heavyLoad)
	base := t.TempDir()
	hosts := []*host{
		{t: t, name: "h1", ip: "127.0.0.21", dir: filepath.Join(base, "h1"), args: []string{"--init"}},
		{t: t, name: "h2", ip: "127.0.0.22", dir: filepath.Join(base, "h2")},
		{t: t, name: "h3", ip: "127.0.0.23", dir: filepath.Join(base, "h3")},
	}
	t.Cleanup(func() { stopHosts(t, hosts) })
	start := time.Now()
	hosts[0].start()
	tok := regexp.MustCompile(`--token (K10\S+)`).FindStringSubmatch(hosts[0].output())
	if tok == nil {
		t.Fatalf("no join token in:\n%s", hosts[0].output())
	}
	for _, h := range hosts[1:] {
		h.args = []string{"--join", "127.0.0.21", "--token", tok[1]}
		h.start()
	}
	hosts[0].waitFor("the streams are R3", 120*time.Second)
	t.Logf("three hosts up, R3 and three voters in %s", time.Since(start).Round(time.Second))

	// The cluster from the second host: the admin's bus and store.
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	bc, err := bus.ReadClientConfig(filepath.Join(hosts[1].dir, "nats", "client.json"))
	if err != nil {
		t.Fatal(err)
	}
	bc.Name = "e2e-three-hosts"
	conn, err := bus.Connect(ctx, bc)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	kv, err := raftstore.NewClient(conn.NATS(), raftstore.DefaultClientConfig())
	if err != nil {
		t.Fatal(err)
	}
	st := objects.New(kv)
	voters := func() (n int, leader string) {
		sts, err := kv.Status(ctx, time.Second)
		if err != nil {
			return 0, ""
		}
		for _, s := range sts {
			if s.State == "Leader" {
				leader = s.ID
				for _, srv := range s.Servers {
					if srv.Suffrage == "Voter" {
						n++
					}
				}
			}
		}
		return n, leader
	}
	until(t, 30*time.Second, "three store voters", func() bool { n, _ := voters(); return n == 3 })
	// Every stream on the three servers, its replicas caught up.
	for _, name := range []string{bus.EventsStream, bus.NodesStream, bus.DLQStream} {
		until(t, 60*time.Second, name+" on three current replicas", func() bool {
			s, err := conn.JetStream().Stream(ctx, name)
			if err != nil {
				return false
			}
			info := s.CachedInfo()
			if info.Config.Replicas != 3 || info.Cluster == nil || len(info.Cluster.Replicas) != 2 {
				return false
			}
			for _, r := range info.Cluster.Replicas {
				if !r.Current {
					return false
				}
			}
			// And its consumers.
			n := 0
			for ci := range s.ListConsumers(ctx).Info() {
				n++
				if ci.Cluster == nil || len(ci.Cluster.Replicas) != 2 {
					t.Logf("consumer %s of %s: cluster %+v", ci.Name, name, ci.Cluster)
					return false
				}
				for _, r := range ci.Cluster.Replicas {
					if !r.Current {
						return false
					}
				}
			}
			return true
		})
	}

	// The aggregator on every server's api replica.
	aggregatorOnEveryHost(t, hosts)

	manifest := filepath.Join(base, "pods.yaml")
	writePods := func(name string) {
		if err := os.WriteFile(manifest, []byte(`apiVersion: v1
kind: Pod
metadata: {name: `+name+`}
spec:
  tolerations:
  - {key: node.kubernetes.io/unreachable, operator: Exists, effect: NoExecute, tolerationSeconds: 5}
  containers: [{name: c, image: nginx}]
`), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	writePods("before")
	if out, err := podflowAt(t, hosts[1].dir, "publish", "-f", manifest, "--count", "6"); err != nil {
		t.Fatalf("publish: %v\n%s", err, out)
	}
	acked := []string{"before-0", "before-1", "before-2", "before-3", "before-4", "before-5"}
	onH1 := ""
	until(t, 60*time.Second, "six running pods, one on each host's node", func() bool {
		pods, _, err := objects.List[*corev1.Pod](ctx, st, "default")
		running, nodes := 0, map[string]bool{}
		for _, p := range pods {
			if p.GetStatus().GetPhase() == "Running" {
				running++
				nodes[p.GetSpec().GetNodeName()] = true
				if p.GetSpec().GetNodeName() == "h1-sim-0001" {
					onH1 = p.GetMetadata().GetName()
				}
			}
		}
		return err == nil && running == 6 && len(nodes) == 3
	})

	// A ReplicaSet whose one pod prefers the first host's node.
	rsManifest := filepath.Join(base, "rs.yaml")
	if err := os.WriteFile(rsManifest, []byte(keepReplicaSetYAML), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := podflowAt(t, hosts[1].dir, "apply", "-f", rsManifest); err != nil {
		t.Fatalf("apply the ReplicaSet: %v\n%s", err, out)
	}
	keepOnH1 := ""
	until(t, 60*time.Second, "the ReplicaSet's pod running on the first host's node", func() bool {
		keepOnH1 = ""
		for _, p := range replicaSetPods(ctx, t, st, "keep") {
			if p.GetStatus().GetPhase() == "Running" && p.GetSpec().GetNodeName() == "h1-sim-0001" {
				keepOnH1 = p.GetMetadata().GetName()
			}
		}
		return keepOnH1 != ""
	})

	// Every process of the first host, at once: the raft leader, a NATS
	// server, a replica of every stage and a node.
	_, leaderBefore := voters()
	holderBefore := leaseHolder(ctx, st, "podflow-nodelifecycle")
	hosts[0].kill()
	killed := time.Now()
	writePods("during")
	out, err := podflowAt(t, hosts[1].dir, "publish", "-f", manifest, "--count", "3")
	if err != nil {
		t.Fatalf("publish with the first host dead: %v\n%s", err, out)
	}
	acked = append(acked, "during-0", "during-1", "during-2")
	writePods("applied")
	// A pod's way through the stages waits for the consumers the dead
	// host led to elect new leaders: --request-timeout bounds it.
	applyStart := time.Now()
	if out, err := podflowAt(t, hosts[2].dir, "--request-timeout", "2m", "apply", "-f", manifest); err != nil {
		t.Fatalf("apply with the first host dead: %v\n%s", err, out)
	}
	acked = append(acked, "applied")
	t.Logf("published and applied %s after the first host died (the apply took %s)", time.Since(killed).Round(time.Millisecond), time.Since(applyStart).Round(time.Millisecond))
	until(t, 30*time.Second, "a store leader on a live host", func() bool {
		n, leader := voters()
		return n == 3 && leader != "" && leader != "h1"
	})
	_, leaderAfter := voters()
	t.Logf("store leader %s before, %s after", leaderBefore, leaderAfter)
	for _, name := range acked {
		until(t, 30*time.Second, "acknowledged pod "+name+" stored", func() bool {
			_, err := objects.Get[*corev1.Pod](ctx, st, "default", name)
			return err == nil
		})
	}
	until(t, 90*time.Second, "the dead host's pod "+onH1+" evicted", func() bool {
		p, err := objects.Get[*corev1.Pod](ctx, st, "default", onH1)
		if err != nil {
			return false
		}
		for _, c := range p.GetStatus().GetConditions() {
			if c.GetType() == "DisruptionTarget" && c.GetReason() == "DeletionByTaintManager" {
				return p.GetMetadata().GetDeletionTimestamp() != nil
			}
		}
		return false
	})
	n, err := objects.Get[*corev1.Node](ctx, st, "", "h1-sim-0001")
	if err != nil {
		t.Fatal(err)
	}
	if got := taintKeys(n); !strings.Contains(got, "node.kubernetes.io/unreachable:NoExecute") {
		t.Fatalf("the dead host's node has taints %q", got)
	}
	holderAfter := leaseHolder(ctx, st, "podflow-nodelifecycle")
	t.Logf("evicted %s after the host died; the node lifecycle controller's leader %s before, %s after",
		time.Since(killed).Round(time.Second), holderBefore, holderAfter)
	if strings.HasPrefix(holderAfter, "nodelifecycle-h1_") || holderAfter == "" {
		t.Errorf("the node lifecycle controller's Lease is held by %q, not a live host's replica", holderAfter)
	}
	// The ReplicaSet's pod was evicted too, and its controller made
	// another on a live host.
	replacement := ""
	until(t, 60*time.Second, "the ReplicaSet's pod re-created on a live host", func() bool {
		replacement = ""
		for _, p := range replicaSetPods(ctx, t, st, "keep") {
			if p.GetMetadata().GetName() == keepOnH1 {
				if p.GetMetadata().GetDeletionTimestamp() == nil {
					return false // not evicted yet
				}
				continue
			}
			if p.GetStatus().GetPhase() == "Running" && p.GetMetadata().GetDeletionTimestamp() == nil && p.GetSpec().GetNodeName() != "h1-sim-0001" {
				replacement = p.GetMetadata().GetName() + " on " + p.GetSpec().GetNodeName()
			}
		}
		return replacement != ""
	})
	t.Logf("the ReplicaSet's pod %s was re-created as %s, %s after the host died", keepOnH1, replacement, time.Since(killed).Round(time.Second))

	// The host comes back: its node is Ready and untainted, the pods it
	// held are gone, the store has its three voters.
	hosts[0].args = []string{"--init"}
	hosts[0].start()
	until(t, 60*time.Second, "the first host's node back, its evicted pod gone", func() bool {
		n, err := objects.Get[*corev1.Node](ctx, st, "", "h1-sim-0001")
		if err != nil || taintKeys(n) != "" {
			return false
		}
		_, err = objects.Get[*corev1.Pod](ctx, st, "default", onH1)
		return err != nil
	})
	until(t, 30*time.Second, "three voters", func() bool { n, _ := voters(); return n == 3 })

	// The third host leaves: stopped, then up --leave. The store has two
	// voters, and the host and its node are gone.
	hosts[2].stop()
	leave := exec.Command(binary, "up", "--leave", "--data-dir", hosts[2].dir)
	if out, err := leave.CombinedOutput(); err != nil || !strings.Contains(string(out), "h3 left the cluster") {
		t.Fatalf("up --leave: %v\n%s", err, out)
	}
	until(t, 30*time.Second, "two voters", func() bool { n, _ := voters(); return n == 2 })
	if _, err := objects.Get[*corev1.Node](ctx, st, "", "h3-sim-0001"); err == nil {
		t.Error("the node of the host that left is still there")
	}
	if _, err := kv.Get(ctx, "/registry/podflow/hosts/h3"); err == nil {
		t.Error("the host that left is still recorded")
	}
	t.Logf("whole test %s", time.Since(start).Round(time.Second))
}

// keepReplicaSetYAML is a ReplicaSet of one pod that prefers the first
// host's node and tolerates its unreachability for 5 s.
const keepReplicaSetYAML = `apiVersion: apps/v1
kind: ReplicaSet
metadata: {name: keep}
spec:
  replicas: 1
  selector:
    matchLabels: {app: keep}
  template:
    metadata:
      labels: {app: keep}
    spec:
      affinity:
        nodeAffinity:
          preferredDuringSchedulingIgnoredDuringExecution:
          - weight: 100
            preference:
              matchFields: [{key: metadata.name, operator: In, values: [h1-sim-0001]}]
      tolerations:
      - {key: node.kubernetes.io/unreachable, operator: Exists, effect: NoExecute, tolerationSeconds: 5}
      containers: [{name: c, image: nginx}]
`

// replicaSetPods are the pods of default owned by ReplicaSet name.
func replicaSetPods(ctx context.Context, t *testing.T, st *objects.Store, name string) []*corev1.Pod {
	t.Helper()
	pods, _, err := objects.List[*corev1.Pod](ctx, st, "default")
	if err != nil {
		return nil
	}
	var out []*corev1.Pod
	for _, p := range pods {
		for _, o := range p.GetMetadata().GetOwnerReferences() {
			if o.GetKind() == "ReplicaSet" && o.GetName() == name {
				out = append(out, p)
			}
		}
	}
	return out
}

// leaseHolder is the holderIdentity of Lease kube-system/name ("" if
// none).
func leaseHolder(ctx context.Context, st *objects.Store, name string) string {
	obj, err := st.GetKind(ctx, objects.Leases, "kube-system", name)
	if err != nil {
		return ""
	}
	var c struct {
		Spec struct {
			HolderIdentity string `json:"holderIdentity"`
		} `json:"spec"`
	}
	if u, ok := obj.(*corev1.Unstructured); !ok || json.Unmarshal(u.GetContent(), &c) != nil {
		return ""
	}
	return c.Spec.HolderIdentity
}

func taintKeys(n *corev1.Node) string {
	var keys []string
	for _, t := range n.GetSpec().GetTaints() {
		keys = append(keys, t.GetKey()+":"+t.GetEffect())
	}
	return strings.Join(keys, " ")
}

// until polls cond until it holds or timeout passes.
func until(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	eventually(t, timeout, what, func() (bool, string) { return cond(), "" })
}

func dirExists(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}
