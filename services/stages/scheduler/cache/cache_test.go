package cache

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/podflow/podflow/services/stages/scheduler/framework"

	"github.com/podflow/podflow/proto/corev1"
)

func requested(t *testing.T, c *Cache, node string) (framework.Resources, int) {
	t.Helper()
	n, ok := c.NodeInfo(node)
	if !ok {
		t.Fatalf("node %q not in cache", node)
	}
	return n.Requested(), n.NumPods()
}

func TestCachePods(t *testing.T) {
	c := cacheWith(t, []*corev1.Node{mkNode("n1", "4", "8Gi"), mkNode("n2", "4", "8Gi")})
	const gi = 1 << 30
	check := func(step, node string, cpu int64, mem int64, pods int) {
		t.Helper()
		r, n := requested(t, c, node)
		if r.MilliCPU != cpu || r.Memory != mem || n != pods {
			t.Fatalf("%s: %s requested %dm %d bytes %d pods, want %dm %d bytes %d pods", step, node, r.MilliCPU, r.Memory, n, cpu, mem, pods)
		}
	}
	a := mkPod("a", "1", "1Gi", onNode("n1"))
	if err := c.AddPod(a); err != nil {
		t.Fatal(err)
	}
	check("add", "n1", 1000, gi, 1)
	if err := c.UpdatePod(mkPod("a", "2", "1Gi", onNode("n1"))); err != nil {
		t.Fatal(err)
	}
	check("update", "n1", 2000, gi, 1)

	b := mkPod("b", "500m", "", hostPort(80, "TCP", ""))
	if err := c.AssumePod(b, "n2"); err != nil {
		t.Fatal(err)
	}
	check("assume", "n2", 500, 0, 1)
	if !c.IsAssumed(b) {
		t.Error("b is not assumed")
	}
	if n, _ := c.NodeInfo("n2"); len(n.UsedPorts()) != 1 {
		t.Errorf("assumed pod's host port not accounted: %v", n.UsedPorts())
	}
	if err := c.AssumePod(b, "n1"); !errors.Is(err, framework.ErrPodExists) {
		t.Errorf("assume twice: %v, want ErrPodExists", err)
	}
	if err := c.ForgetPod(b); err != nil {
		t.Fatal(err)
	}
	check("forget", "n2", 0, 0, 0)
	if n, _ := c.NodeInfo("n2"); len(n.UsedPorts()) != 0 {
		t.Errorf("forgotten pod's port still used: %v", n.UsedPorts())
	}
	if err := c.ForgetPod(b); !errors.Is(err, framework.ErrPodNotFound) {
		t.Errorf("forget twice: %v, want ErrPodNotFound", err)
	}

	// Assumed on n2, bound on n1 by whoever won: the bound event moves it.
	if err := c.AssumePod(b, "n2"); err != nil {
		t.Fatal(err)
	}
	b.Spec.NodeName = "n1"
	if err := c.AddPod(b); err != nil {
		t.Fatal(err)
	}
	check("confirm elsewhere", "n2", 0, 0, 0)
	check("confirm elsewhere", "n1", 2500, gi, 2)
	if c.IsAssumed(b) {
		t.Error("b still assumed after its bound event")
	}
	if node, _ := c.PodNode(b); node != "n1" {
		t.Errorf("PodNode = %q, want n1", node)
	}
	if err := c.ForgetPod(b); !errors.Is(err, framework.ErrPodNotAssumed) {
		t.Errorf("forget a bound pod: %v, want ErrPodNotAssumed", err)
	}

	done := mkPod("a", "2", "1Gi", onNode("n1"))
	done.Status = &corev1.PodStatus{Phase: "Succeeded"}
	if err := c.UpdatePod(done); err != nil {
		t.Fatal(err)
	}
	check("terminated", "n1", 500, 0, 1)
	if err := c.RemovePod(b); err != nil {
		t.Fatal(err)
	}
	check("remove", "n1", 0, 0, 0)
	if err := c.RemovePod(b); !errors.Is(err, framework.ErrPodNotFound) {
		t.Errorf("remove twice: %v, want ErrPodNotFound", err)
	}
	if err := c.AddPod(mkPod("unbound", "", "")); !errors.Is(err, framework.ErrPodNotBound) {
		t.Errorf("add unbound: %v, want ErrPodNotBound", err)
	}
	if c.NumPods() != 0 {
		t.Errorf("NumPods = %d, want 0", c.NumPods())
	}
}

func TestCacheNodes(t *testing.T) {
	c := NewCache()
	// A pod can arrive before its node: it is accounted, the node is not
	// scheduled onto until it arrives.
	if err := c.AddPod(mkPod("early", "1", "", onNode("late"))); err != nil {
		t.Fatal(err)
	}
	if _, ok := c.Snapshot().Get("late"); ok || c.NumNodes() != 0 {
		t.Fatal("a node known only from a pod is in the snapshot")
	}
	if err := c.AddNode(mkNode("late", "4", "8Gi")); err != nil {
		t.Fatal(err)
	}
	if r, n := requested(t, c, "late"); r.MilliCPU != 1000 || n != 1 {
		t.Fatalf("late node: %dm %d pods, want 1000m 1 pod", r.MilliCPU, n)
	}
	// An update replaces what the node offers and keeps its pods.
	if err := c.UpdateNode(mkNode("late", "2", "8Gi", cordoned)); err != nil {
		t.Fatal(err)
	}
	n, _ := c.NodeInfo("late")
	if n.Allocatable().MilliCPU != 2000 || !n.Unschedulable() || n.Requested().MilliCPU != 1000 {
		t.Fatalf("after update: %+v", n)
	}
	// Removing the node keeps its pods until their own events.
	if err := c.RemoveNode("late"); err != nil {
		t.Fatal(err)
	}
	if _, ok := c.Snapshot().Get("late"); ok {
		t.Fatal("removed node in the snapshot")
	}
	if err := c.RemoveNode("late"); !errors.Is(err, framework.ErrNodeNotFound) {
		t.Errorf("remove twice: %v, want ErrNodeNotFound", err)
	}
	if err := c.AddNode(mkNode("late", "4", "8Gi")); err != nil {
		t.Fatal(err)
	}
	if r, _ := requested(t, c, "late"); r.MilliCPU != 1000 {
		t.Fatalf("re-added node lost its pod: %dm", r.MilliCPU)
	}
	if err := c.RemoveNode("late"); err != nil {
		t.Fatal(err)
	}
	if err := c.RemovePod(mkPod("early", "", "")); err != nil {
		t.Fatal(err)
	}
	if len(c.nodes) != 0 || c.head != nil {
		t.Errorf("cache still holds %d node items after the last pod of a removed node left", len(c.nodes))
	}
	if err := c.AddNode(&corev1.Node{}); !errors.Is(err, framework.ErrInvalidObject) {
		t.Errorf("nameless node: %v, want ErrInvalidObject", err)
	}
	if err := c.AddNode(mkNode("bad", "four", "1Gi")); !errors.Is(err, framework.ErrInvalidObject) {
		t.Errorf("bad quantity: %v, want ErrInvalidObject", err)
	}
}

func TestSnapshotCopiesOnlyChangedNodes(t *testing.T) {
	c := uniformCluster(t, nodeNames("n", 10))
	snap := c.Snapshot()
	before := map[string]*framework.NodeInfo{}
	for _, n := range snap.Nodes() {
		before[n.Name()] = n
		n.AccountPod(framework.Resources{}) // a marker (one pod, no requests) a copy from the cache would overwrite
	}
	if err := c.AssumePod(mkPod("p", "1", "1Gi"), "n0003"); err != nil {
		t.Fatal(err)
	}
	c.UpdateSnapshot(snap)
	for _, n := range snap.Nodes() {
		if before[n.Name()] != n {
			t.Errorf("%s: NodeInfo pointer changed", n.Name())
		}
		switch {
		case n.Name() == "n0003" && (n.NumPods() != 1 || n.Requested().MilliCPU != 1000):
			t.Errorf("changed node not updated: %d pods %dm", n.NumPods(), n.Requested().MilliCPU)
		case n.Name() != "n0003" && n.NumPods() != 1:
			t.Errorf("unchanged node %s was copied again", n.Name())
		}
	}
	if snap.Generation() != c.generation {
		t.Errorf("snapshot generation %d, cache %d", snap.Generation(), c.generation)
	}
}

func TestSnapshotIsIsolatedFromLaterChanges(t *testing.T) {
	c := uniformCluster(t, nodeNames("n", 3))
	old := c.Snapshot()
	if err := c.AssumePod(mkPod("p", "1", "1Gi"), "n0001"); err != nil {
		t.Fatal(err)
	}
	if err := c.RemoveNode("n0002"); err != nil {
		t.Fatal(err)
	}
	if n, _ := old.Get("n0001"); n.NumPods() != 0 || old.NumNodes() != 3 {
		t.Errorf("an older snapshot saw later changes: %d pods, %d nodes", n.NumPods(), old.NumNodes())
	}
	fresh := c.Snapshot()
	if n, _ := fresh.Get("n0001"); n.NumPods() != 1 || fresh.NumNodes() != 2 {
		t.Errorf("fresh snapshot: %d pods, %d nodes", n.NumPods(), fresh.NumNodes())
	}
}

func TestSnapshotImageCounts(t *testing.T) {
	c := cacheWith(t, []*corev1.Node{
		mkNode("a", "1", "1Gi", images(100, "app:latest", "app:v1")),
		mkNode("b", "1", "1Gi", images(100, "app:latest")),
	})
	snap := c.Snapshot()
	if snap.Image("app:latest").Nodes != 2 || snap.Image("app:v1").Nodes != 1 {
		t.Fatalf("image counts %v", snap.ImageCounts)
	}
	if err := c.UpdateNode(mkNode("b", "1", "1Gi", images(100, "db:latest"))); err != nil {
		t.Fatal(err)
	}
	if err := c.RemoveNode("a"); err != nil {
		t.Fatal(err)
	}
	c.UpdateSnapshot(snap)
	if len(snap.ImageCounts) != 1 || snap.Image("db:latest").Nodes != 1 {
		t.Fatalf("image counts %v, want db:latest on 1 node", snap.ImageCounts)
	}
}

// TestCacheMatchesModel applies a long random sequence of events and checks
// after each that an incrementally updated snapshot equals a fresh one and
// that every node's accounting equals the sum over the pods on it.
func TestCacheMatchesModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	c := NewCache()
	snap := framework.NewSnapshot()
	type modelPod struct {
		pod     *corev1.Pod
		node    string
		assumed bool
	}
	pods := map[string]*modelPod{}
	nodes := map[string]bool{}
	nodeName := func() string { return fmt.Sprintf("n%d", rng.IntN(8)) }
	for step := range 3000 {
		switch op := rng.IntN(8); op {
		case 0, 1: // add or update a node
			name := nodeName()
			if err := c.UpdateNode(mkNode(name, fmt.Sprint(1+rng.IntN(8)), "8Gi", images(1, fmt.Sprintf("img%d", rng.IntN(3))))); err != nil {
				t.Fatal(err)
			}
			nodes[name] = true
		case 2: // remove a node
			name := nodeName()
			err := c.RemoveNode(name)
			if nodes[name] != (err == nil) {
				t.Fatalf("step %d: RemoveNode(%s) = %v, node present %v", step, name, err, nodes[name])
			}
			delete(nodes, name)
		default: // pod events
			name := fmt.Sprintf("p%d", rng.IntN(40))
			mp := pods[name]
			pod := mkPod(name, fmt.Sprintf("%dm", rng.IntN(1000)), fmt.Sprintf("%dMi", rng.IntN(100)))
			if rng.IntN(4) == 0 {
				pod = mkPod(name, "100m", "", hostPort(int32(8000+rng.IntN(3)), "TCP", ""))
			}
			switch {
			case mp == nil && rng.IntN(2) == 0:
				node := nodeName()
				if err := c.AssumePod(pod, node); err != nil {
					t.Fatal(err)
				}
				pods[name] = &modelPod{pod, node, true}
			case mp == nil:
				pod.Spec.NodeName = nodeName()
				if err := c.AddPod(pod); err != nil {
					t.Fatal(err)
				}
				pods[name] = &modelPod{pod, pod.Spec.NodeName, false}
			case mp.assumed && rng.IntN(2) == 0:
				if err := c.ForgetPod(mp.pod); err != nil {
					t.Fatal(err)
				}
				delete(pods, name)
			case rng.IntN(3) == 0:
				if err := c.RemovePod(mp.pod); err != nil {
					t.Fatal(err)
				}
				delete(pods, name)
			default: // bound (or re-bound) event
				pod.Spec.NodeName = nodeName()
				if err := c.UpdatePod(pod); err != nil {
					t.Fatal(err)
				}
				pods[name] = &modelPod{pod, pod.Spec.NodeName, false}
			}
		}
		c.UpdateSnapshot(snap)
		fresh := c.Snapshot()
		if !reflect.DeepEqual(snap.ByName, fresh.ByName) || !reflect.DeepEqual(snap.ImageCounts, fresh.ImageCounts) || len(snap.NodeList) != len(fresh.NodeList) {
			t.Fatalf("step %d: incremental snapshot differs from a fresh one", step)
		}
		want := map[string]framework.Resources{}
		count, ports := map[string]int{}, map[string]int{}
		for _, mp := range pods {
			ports[mp.node] += len(framework.PodHostPorts(mp.pod))
			r, _, _ := framework.PodRequests(mp.pod)
			w := want[mp.node]
			w.Add(r)
			want[mp.node] = w
			count[mp.node]++
		}
		if snap.NumNodes() != len(nodes) {
			t.Fatalf("step %d: %d nodes in snapshot, model has %d", step, snap.NumNodes(), len(nodes))
		}
		for name := range nodes {
			n, ok := snap.Get(name)
			if !ok || n.Requested() != want[name] || n.NumPods() != count[name] || len(n.UsedPorts()) != ports[name] {
				t.Fatalf("step %d: node %s requested %+v %d pods, want %+v %d", step, name, n.Requested(), n.NumPods(), want[name], count[name])
			}
		}
		if c.NumPods() != len(pods) {
			t.Fatalf("step %d: cache has %d pods, model %d", step, c.NumPods(), len(pods))
		}
	}
}

// TestCacheDeparted: a node's Departed count stays while pods are added,
// assumed, confirmed and updated in place on it, and changes when one
// leaves it (removed, forgotten, moved, finished), and a node entry made
// anew never takes a count an earlier one had.
func TestCacheDeparted(t *testing.T) {
	c := cacheWith(t, []*corev1.Node{mkNode("n1", "4", "8Gi"), mkNode("n2", "4", "8Gi")})
	departed := func(node string) int64 {
		t.Helper()
		n, ok := c.NodeInfo(node)
		if !ok {
			t.Fatalf("node %q not in cache", node)
		}
		return n.Departed()
	}
	seen := map[int64]string{departed("n1"): "n1 made", departed("n2"): "n2 made"}
	if len(seen) != 2 {
		t.Fatalf("two nodes share the count %v", seen)
	}
	stays := func(step string, err error) {
		t.Helper()
		before := departed("n1")
		if err != nil {
			t.Fatal(err)
		}
		if departed("n1") != before {
			t.Errorf("%s: Departed changed", step)
		}
	}
	was := departed("n1")
	changes := func(step string, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		d := departed("n1")
		if prev, ok := seen[d]; ok {
			t.Errorf("%s: Departed is %d, as after %s", step, d, prev)
		}
		seen[d], was = step, d
	}
	stays("add", c.AddPod(mkPod("a", "1", "1Gi", onNode("n1"))))
	stays("update in place", c.UpdatePod(mkPod("a", "2", "1Gi", onNode("n1"))))
	b := mkPod("b", "1", "1Gi")
	stays("assume", c.AssumePod(b, "n1"))
	stays("confirm", c.AddPod(mkPod("b", "1", "1Gi", onNode("n1"))))
	if departed("n1") != was {
		t.Fatal("Departed changed before any pod left")
	}
	changes("remove", c.RemovePod(mkPod("a", "2", "1Gi", onNode("n1"))))
	stays("assume again", c.AssumePod(mkPod("c", "1", "1Gi"), "n1"))
	changes("forget", c.ForgetPod(mkPod("c", "1", "1Gi")))
	changes("move", c.AddPod(mkPod("b", "1", "1Gi", onNode("n2"))))
	stays("add again", c.AddPod(mkPod("d", "1", "1Gi", onNode("n1"))))
	done := mkPod("d", "1", "1Gi", onNode("n1"))
	done.Status = &corev1.PodStatus{Phase: "Succeeded"}
	changes("finish", c.AddPod(done))
	if err := c.RemovePod(done); err != nil && !errors.Is(err, framework.ErrPodNotFound) {
		t.Fatal(err)
	}
	if err := c.RemoveNode("n1"); err != nil {
		t.Fatal(err)
	}
	if err := c.AddNode(mkNode("n1", "4", "8Gi")); err != nil {
		t.Fatal(err)
	}
	changes("node made anew", nil)
}
