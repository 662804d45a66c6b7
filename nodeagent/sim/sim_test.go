package sim_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/podflow/podflow/nodeagent"
	"github.com/podflow/podflow/nodeagent/nodeagenttest"
	"github.com/podflow/podflow/nodeagent/sim"
	corev1 "github.com/podflow/podflow/proto/corev1"
	eventsv1 "github.com/podflow/podflow/proto/eventsv1"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestIPAM(t *testing.T) {
	p, err := sim.NewIPAM("10.244.7.0/29") // .2 - .6: network, gateway, broadcast excluded
	if err != nil {
		t.Fatal(err)
	}
	if p.Size() != 5 {
		t.Fatalf("size = %d, want 5", p.Size())
	}
	seen := map[netip.Addr]bool{}
	var all []netip.Addr
	for i := range 5 {
		a, err := p.Allocate(fmt.Sprint(i))
		if err != nil {
			t.Fatal(err)
		}
		if seen[a] || !netip.MustParsePrefix("10.244.7.0/29").Contains(a) || a.As4()[3] < 2 || a.As4()[3] > 6 {
			t.Fatalf("allocated %s twice or outside the range", a)
		}
		seen[a] = true
		all = append(all, a)
	}
	if _, err := p.Allocate("x"); !errors.Is(err, sim.ErrRangeFull) {
		t.Fatalf("allocate from a full range: %v", err)
	}
	p.Release(all[2])
	a, err := p.Allocate("y")
	if err != nil || a != all[2] {
		t.Fatalf("after release got %s, %v; want %s", a, err, all[2])
	}
	p.Release(all[0])
	p.Release(all[1])
	// Next-fit: the address after the last one given out comes first.
	if a, _ := p.Allocate("z"); a != all[0] || p.InUse() != 4 {
		t.Fatalf("got %s with %d in use", a, p.InUse())
	}
	for _, bad := range []string{"10.244.7.0/31", "fd00::/64", "10.244.7.1/24", "nope"} {
		if _, err := sim.NewIPAM(bad); err == nil {
			t.Errorf("NewIPAM(%q) accepted", bad)
		}
	}
}

func TestRuntimeInjectionAndExits(t *testing.T) {
	rt, err := sim.New(sim.DefaultConfig("10.244.1.0/24"))
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	pod := func(ann ...string) *corev1.Pod {
		p := &corev1.Pod{Metadata: &corev1.ObjectMeta{Name: "p", Namespace: "default", Uid: fmt.Sprint(ann), Annotations: map[string]string{}},
			Spec: &corev1.PodSpec{Containers: []*corev1.Container{{Name: "app", Image: "nginx:1.27"}}}}
		for i := 0; i+1 < len(ann); i += 2 {
			p.Metadata.Annotations[ann[i]] = ann[i+1]
		}
		return p
	}
	if _, err := rt.RunPodSandbox(ctx, pod(sim.AnnotationSandbox, sim.Fail)); !errors.Is(err, nodeagent.ErrSandbox) {
		t.Errorf("sandbox: %v", err)
	}
	if err := rt.MountVolumes(ctx, pod(sim.AnnotationMount, sim.Fail), nil); !errors.Is(err, nodeagent.ErrMount) {
		t.Errorf("mount: %v", err)
	}
	if _, err := rt.PullImage(ctx, pod(sim.AnnotationImagePull, sim.Fail), "nginx:1.27", "IfNotPresent"); !errors.Is(err, nodeagent.ErrImagePull) {
		t.Errorf("pull: %v", err)
	}
	if _, err := rt.PullImage(ctx, pod(), "absent:1", "Never"); !errors.Is(err, nodeagent.ErrImageNeverPull) {
		t.Errorf("pull Never: %v", err)
	}
	if r, _ := rt.Probe(ctx, pod(sim.AnnotationReadiness, sim.Fail), nil, "", nodeagent.ProbeReadiness, nil); r.OK {
		t.Error("readiness probe passed despite the annotation")
	}
	if r, _ := rt.Probe(ctx, pod(sim.AnnotationReadiness, sim.Fail), nil, "", nodeagent.ProbeLiveness, nil); !r.OK {
		t.Error("liveness probe failed with only readiness injected")
	}

	p := pod(sim.AnnotationExitAfter, "1ms", sim.AnnotationExitCode, "3")
	sb, err := rt.RunPodSandbox(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := rt.RunPodSandbox(ctx, p); again != sb {
		t.Errorf("RunPodSandbox is not idempotent: %v then %v", sb, again)
	}
	id, err := rt.StartContainer(ctx, p, p.Spec.Containers[0], sb)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case ex := <-rt.ContainerExits(p.Metadata.Uid):
		if ex.ID != id || ex.ExitCode != 3 {
			t.Errorf("exit = %+v", ex)
		}
	case <-ctx.Done():
		t.Fatal("no exit")
	}
	if ex, err := rt.StopContainer(ctx, id, time.Second); err != nil || ex.ExitCode != 3 {
		t.Errorf("stopping an exited container: %+v, %v", ex, err)
	}
	if err := rt.RemovePodSandbox(ctx, p.Metadata.Uid); err != nil || rt.IPAM().InUse() != 0 || rt.Pods() != 0 {
		t.Errorf("remove: %v, %d IPs in use", err, rt.IPAM().InUse())
	}
}

func podCIDR(cfg sim.ClusterConfig, i int) string {
	p, err := cfg.NodePodCIDR(i)
	if err != nil {
		return err.Error()
	}
	return p.String()
}

func TestClusterConfig(t *testing.T) {
	for _, tc := range []struct {
		nodes   int
		cluster string
		first   string // sim-node-0001's pod CIDR
		last    string // the last node's
	}{
		{1, "10.244.0.0/16", "10.244.1.0/24", "10.244.1.0/24"},
		{255, "10.244.0.0/16", "10.244.1.0/24", "10.244.255.0/24"},
		{256, "10.244.0.0/15", "10.244.1.0/24", "10.245.0.0/24"},
		{5000, "10.224.0.0/11", "10.224.1.0/24", "10.243.136.0/24"},
		{65535, "10.0.0.0/8", "10.0.1.0/24", "10.255.255.0/24"},
	} {
		cfg := sim.DefaultClusterConfig(tc.nodes)
		if cfg.ClusterCIDR != tc.cluster {
			t.Errorf("%d nodes: cluster CIDR %s, want %s", tc.nodes, cfg.ClusterCIDR, tc.cluster)
		}
		if err := cfg.Validate(); err != nil {
			t.Errorf("%d nodes: %v", tc.nodes, err)
			continue
		}
		if first, last := podCIDR(cfg, 1), podCIDR(cfg, tc.nodes); first != tc.first || last != tc.last {
			t.Errorf("%d nodes: pod CIDRs %s … %s, want %s … %s", tc.nodes, first, last, tc.first, tc.last)
		}
	}
	// Too many nodes for the cluster CIDR: refused, naming both.
	cfg := sim.DefaultClusterConfig(5000)
	cfg.ClusterCIDR = "10.244.0.0/16"
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "10.244.0.0/16 holds 255 node CIDRs of /24") {
		t.Errorf("5000 nodes in 10.244.0.0/16: %v", err)
	}
	// A longer mask fits them: /29s (6 pod addresses each).
	cfg.NodeCIDRMaskSize = 29
	if err := cfg.Validate(); err != nil {
		t.Errorf("5000 /29s in 10.244.0.0/16: %v", err)
	}
	if got := podCIDR(cfg, 5000); got != "10.244.156.64/29" {
		t.Errorf("node 5000's /29: %s", got)
	}
	for _, bad := range []struct {
		cidr string
		mask int
	}{{"10.244.0.0/16", 15}, {"10.244.0.0/16", 31}, {"10.244.0.1/16", 24}, {"fd00::/64", 120}, {"x", 24}} {
		cfg := sim.DefaultClusterConfig(3)
		cfg.ClusterCIDR, cfg.NodeCIDRMaskSize = bad.cidr, bad.mask
		if err := cfg.Validate(); err == nil {
			t.Errorf("cluster CIDR %s with /%d accepted", bad.cidr, bad.mask)
		}
	}
	// Past 10.0.0.0/8 the sizing stops and Validate refuses.
	if err := sim.DefaultClusterConfig(1 << 16).Validate(); err == nil {
		t.Error("65536 /24s in 10.0.0.0/8 accepted")
	}
	cfg = sim.DefaultClusterConfig(0)
	if err := cfg.Validate(); err == nil {
		t.Error("0 nodes accepted")
	}
}

func TestClusterThousandNodes(t *testing.T) {
	const n = 1000
	store, pub := nodeagenttest.NewStore(), nodeagenttest.NewPublisher()
	cfg := sim.DefaultClusterConfig(n)
	cfg.Agent.HeartbeatInterval = 100 * time.Millisecond
	cfg.Agent.NodeStatusReportFrequency = cfg.Agent.HeartbeatInterval // the status written at every heartbeat
	cfg.Agent.ResyncPeriod = 200 * time.Millisecond
	base := runtime.NumGoroutine()
	c, err := sim.NewCluster(cfg, store, pub)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if store.Nodes() != n {
		t.Fatalf("%d nodes registered, want %d", store.Nodes(), n)
	}
	// Idle nodes cost no goroutines: one loop (plus its pool while a tick runs).
	if g := runtime.NumGoroutine() - base; g > cfg.Parallelism+5 {
		t.Errorf("%d goroutines for %d idle nodes", g, n)
	}
	err = pub.Wait(ctx, func(envs []*eventsv1.Envelope) bool {
		beats := map[string]int{}
		for _, e := range envs {
			if e.Type() == "NodeHeartbeat" {
				beats[e.GetNodeName()]++
			}
		}
		if len(beats) < n {
			return false
		}
		// A heartbeat is published before its status update is written.
		for name, b := range beats {
			if b < 2 || store.StatusUpdates(name) < 2 {
				return false
			}
		}
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{1, 256, 1000} {
		name := fmt.Sprintf("sim-node-%04d", i)
		node, ok := store.Node(name)
		if !ok {
			t.Fatalf("%s not registered", name)
		}
		want := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(244 + i/256), byte(i % 256), 0}), 24).String()
		if node.GetSpec().GetPodCidr() != want || node.GetStatus().GetCapacity()["pods"] != "110" || store.StatusUpdates(name) < 2 {
			t.Errorf("%s: podCIDR %s (want %s), capacity %v, %d status updates", name, node.GetSpec().GetPodCidr(), want,
				node.GetStatus().GetCapacity(), store.StatusUpdates(name))
		}
	}

	// A pod bound to one of them runs there, with an IP from its CIDR.
	pod := &corev1.Pod{
		Metadata: &corev1.ObjectMeta{Name: "web", Namespace: "default", Uid: "uid-web"},
		Spec:     &corev1.PodSpec{NodeName: "sim-node-0513", Containers: []*corev1.Container{{Name: "app", Image: "nginx:1.27"}}},
	}
	store.PutPod(pod)
	if err := c.HandlePodBound(ctx, pod); err != nil {
		t.Fatal(err)
	}
	err = pub.Wait(ctx, func(envs []*eventsv1.Envelope) bool {
		for _, e := range envs {
			if e.Type() == "PodReady" && e.GetNodeName() == "sim-node-0513" {
				return true
			}
		}
		return false
	})
	if err != nil {
		t.Fatal(err)
	}
	a, _ := c.Agent("sim-node-0513")
	st, _ := a.PodStatus("uid-web")
	if ip := netip.MustParseAddr(st.GetPodIp()); !netip.MustParsePrefix("10.246.1.0/24").Contains(ip) {
		t.Errorf("pod IP %s outside sim-node-0513's CIDR 10.246.1.0/24", ip)
	}
	// Removed from the store, the pod is torn down by the periodic
	// reconcile, which lists the store once for every node.
	store.DeletePod("uid-web")
	err = pub.Wait(ctx, func(envs []*eventsv1.Envelope) bool {
		for _, e := range envs {
			if e.Type() == "PodDeleted" && e.GetPodUid() == "uid-web" {
				return true
			}
		}
		return false
	})
	if err != nil {
		t.Fatal(err)
	}
	if store.PodLists() == 0 {
		t.Error("the cluster reconciled without listing pods once for all nodes")
	}
	if r, _ := c.Runtime("sim-node-0513"); r.IPAM().InUse() != 0 {
		t.Error("IP not released")
	}
	if err := c.HandlePodBound(ctx, &corev1.Pod{Metadata: &corev1.ObjectMeta{Uid: "x"}, Spec: &corev1.PodSpec{NodeName: "nope"}}); !errors.Is(err, nodeagent.ErrWrongNode) {
		t.Errorf("bind to an unknown node: %v", err)
	}
}

// TestRuntimeSysctls: the sim admits sysctls as the Linux runtime does
// (nodeagent.PodSysctls): safe ones, unsafe ones its AllowedUnsafeSysctls
// match; others are SysctlForbidden; a bad pattern is a config error.
func TestRuntimeSysctls(t *testing.T) {
	pod := func(uid, name string) *corev1.Pod {
		return &corev1.Pod{Metadata: &corev1.ObjectMeta{Uid: uid, Namespace: "default", Name: uid},
			Spec: &corev1.PodSpec{SecurityContext: &corev1.PodSecurityContext{Sysctls: []*corev1.Sysctl{{Name: name, Value: "1"}}}}}
	}
	cfg := sim.DefaultConfig("10.244.1.0/24")
	cfg.AllowedUnsafeSysctls = []string{"kernel.msg*"}
	rt, err := sim.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	for _, tc := range []struct {
		sysctl    string
		forbidden bool
	}{
		{"net.ipv4.tcp_syncookies", false},
		{"kernel.msgmax", false},
		{"net.core.somaxconn", true},
		{"kernel.panic", true},
	} {
		t.Run(tc.sysctl, func(t *testing.T) {
			_, err := rt.RunPodSandbox(context.Background(), pod("uid-"+tc.sysctl, tc.sysctl))
			if got := errors.Is(err, nodeagent.ErrSysctlForbidden); got != tc.forbidden || (!tc.forbidden && err != nil) {
				t.Fatalf("RunPodSandbox = %v, want forbidden %v", err, tc.forbidden)
			}
		})
	}
	cfg.AllowedUnsafeSysctls = []string{"kernel.panic"}
	if _, err := sim.New(cfg); err == nil {
		t.Error("sim.New with a non-namespaced allowed sysctl succeeded")
	}
}

// TestClusterHeartbeatListsNodesOnce: a cluster over a NodeLister reads
// its nodes with one list per heartbeat round; each agent compares its
// status with its node's and writes only a change, as kubelet does: the
// node whose stored Ready condition another writer changed (the node
// lifecycle controller's Unknown) is written at once, the others not.
func TestClusterHeartbeatListsNodesOnce(t *testing.T) {
	const n = 50
	store, pub := nodeagenttest.NewStore(), nodeagenttest.NewPublisher()
	c, err := sim.NewCluster(sim.DefaultClusterConfig(n), store, pub)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, name := range c.NodeNames() { // registered, without the cluster's loop
		a, _ := c.Agent(name)
		if err := a.Start(ctx); err != nil {
			t.Fatal(err)
		}
	}
	lists := store.NodeLists()
	for range 3 {
		if err := c.Heartbeat(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if got := store.NodeLists() - lists; got != 3 {
		t.Errorf("3 heartbeat rounds listed the nodes %d times, want 3", got)
	}
	for _, name := range c.NodeNames() {
		if u := store.StatusUpdates(name); u != 0 {
			t.Fatalf("%s: %d status writes of an unchanged status, want 0", name, u)
		}
	}
	quiet := c.NodeNames()[7]
	stored, _ := store.Node(quiet)
	for _, cond := range stored.GetStatus().GetConditions() {
		if cond.GetType() == "Ready" {
			cond.Status, cond.Reason = "Unknown", "NodeStatusUnknown"
		}
	}
	if err := store.RegisterNode(ctx, stored); err != nil {
		t.Fatal(err)
	}
	if err := c.Heartbeat(ctx); err != nil {
		t.Fatal(err)
	}
	for _, name := range c.NodeNames() {
		if want := map[bool]int{true: 1}[name == quiet]; store.StatusUpdates(name) != want {
			t.Errorf("%s: %d status writes, want %d", name, store.StatusUpdates(name), want)
		}
	}
	if n, _ := store.Node(quiet); n.GetStatus().GetConditions()[0].GetStatus() != "True" {
		t.Errorf("%s after its heartbeat: %v", quiet, n.GetStatus().GetConditions())
	}
}

// TestNaturalExitReleasedByRemoval: a container's exit that waits for the
// pod's one exit slot (the agent not reading) ends once the pod's sandbox
// is removed, before the runtime closes.
func TestNaturalExitReleasedByRemoval(t *testing.T) {
	rt, err := sim.New(sim.DefaultConfig("10.244.1.0/24"))
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	ctx := context.Background()
	p := &corev1.Pod{Metadata: &corev1.ObjectMeta{Name: "p", Namespace: "default", Uid: "u1",
		Annotations: map[string]string{sim.AnnotationExitAfter: "1ms"}},
		Spec: &corev1.PodSpec{Containers: []*corev1.Container{{Name: "a", Image: "busybox"}, {Name: "b", Image: "busybox"}}}}
	sb, err := rt.RunPodSandbox(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range p.Spec.Containers {
		if _, err := rt.StartContainer(ctx, p, c, sb); err != nil {
			t.Fatal(err)
		}
	}
	// One exit fills the slot, the other waits for it.
	waitStacks(t, func(s string) bool {
		return len(rt.ContainerExits("u1")) == 1 && strings.Contains(s, "naturalExit")
	})
	if err := rt.RemovePodSandbox(ctx, "u1"); err != nil {
		t.Fatal(err)
	}
	waitStacks(t, func(s string) bool { return !strings.Contains(s, "naturalExit") })
}

// waitStacks waits until cond holds for the stacks of every goroutine.
func waitStacks(t *testing.T, cond func(stacks string) bool) {
	t.Helper()
	buf := make([]byte, 1<<20)
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if cond(string(buf[:runtime.Stack(buf, true)])) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("timed out waiting for the goroutines' stacks")
		}
	}
}

// byNodeStore is a store whose pods are listed by node
// (nodeagent.NodePodsLister); the pods of its broken node cannot be
// decoded.
type byNodeStore struct {
	*nodeagenttest.Store
	broken string
	lists  int
}

func (s *byNodeStore) ListPodsByNode(ctx context.Context) (func(string) ([]*corev1.Pod, error), error) {
	s.lists++
	pods, err := s.ListPods(ctx)
	if err != nil {
		return nil, err
	}
	return func(node string) ([]*corev1.Pod, error) {
		if node == s.broken {
			return nil, errors.New("undecodable pod")
		}
		var out []*corev1.Pod
		for _, p := range pods {
			if p.GetSpec().GetNodeName() == node {
				out = append(out, p)
			}
		}
		return out, nil
	}, nil
}

// TestClusterReconcileByNode: over a nodeagent.NodePodsLister a
// reconcile lists the pods once and hands each node its own: a pod gone
// from the store is torn down, one still there is kept, and a node whose
// pods cannot be decoded takes none of its pods for gone.
func TestClusterReconcileByNode(t *testing.T) {
	store := &byNodeStore{Store: nodeagenttest.NewStore(), broken: "sim-node-0002"}
	pub := nodeagenttest.NewPublisher()
	cfg := sim.DefaultClusterConfig(2)
	cfg.Agent.ResyncPeriod = time.Hour // only the reconciles below
	c, err := sim.NewCluster(cfg, store, pub)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	pod := func(name, node string) *corev1.Pod {
		p := &corev1.Pod{Metadata: &corev1.ObjectMeta{Name: name, Namespace: "default", Uid: "uid-" + name},
			Spec: &corev1.PodSpec{NodeName: node, Containers: []*corev1.Container{{Name: "app", Image: "nginx"}}}}
		store.PutPod(p)
		if err := c.HandlePodBound(ctx, p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	pod("gone", "sim-node-0001")
	pod("kept", "sim-node-0001")
	pod("unread", "sim-node-0002")
	err = pub.Wait(ctx, func(envs []*eventsv1.Envelope) bool { return len(ofTypes(envs, "PodReady")) == 3 })
	if err != nil {
		t.Fatal(err)
	}
	store.DeletePod("uid-gone")
	store.DeletePod("uid-unread")
	lists := store.lists
	if err := c.Reconcile(ctx); err == nil {
		t.Error("reconcile of a node whose pods cannot be decoded: no error")
	}
	if store.lists != lists+1 {
		t.Errorf("%d lists by node for one reconcile, want 1", store.lists-lists)
	}
	err = pub.Wait(ctx, func(envs []*eventsv1.Envelope) bool { return len(ofTypes(envs, "PodDeleted")) > 0 })
	if err != nil {
		t.Fatal(err)
	}
	a1, _ := c.Agent("sim-node-0001")
	a2, _ := c.Agent("sim-node-0002")
	if _, ok := a1.PodStatus("uid-gone"); ok {
		t.Error("a pod gone from the store still has a worker")
	}
	if _, ok := a1.PodStatus("uid-kept"); !ok {
		t.Error("a pod in the store lost its worker")
	}
	if _, ok := a2.PodStatus("uid-unread"); !ok {
		t.Error("a pod of a node whose pods could not be decoded was taken for gone")
	}
}

func ofTypes(envs []*eventsv1.Envelope, typ eventsv1.Type) (out []*eventsv1.Envelope) {
	for _, e := range envs {
		if e.Type() == typ {
			out = append(out, e)
		}
	}
	return out
}
