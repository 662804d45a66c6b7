package scheduler

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/podflow/podflow/services/stages/scheduler/cache"
	"github.com/podflow/podflow/services/stages/scheduler/framework"

	"github.com/podflow/podflow/proto/corev1"
)

// variedCluster returns n nodes of varied sizes; some are tainted for
// GPUs, some cordoned or not ready, all labelled with a zone.
func variedCluster(rng *rand.Rand, n int) []*corev1.Node {
	nodes := make([]*corev1.Node, n)
	for i := range nodes {
		opts := []nodeOpt{
			labels("topology.kubernetes.io/zone", fmt.Sprintf("zone-%d", i%3), "cores", fmt.Sprint(2<<(i%4))),
			maxPods(fmt.Sprint(10 + rng.IntN(100))),
			images(int64(100+rng.IntN(900))<<20, fmt.Sprintf("app-%d:latest", rng.IntN(20))),
		}
		switch r := rng.IntN(100); {
		case r < 10:
			opts = append(opts, taints(tnt("dedicated", "gpu", "NoSchedule")))
		case r < 15:
			opts = append(opts, taints(tnt("spot", "", "PreferNoSchedule")))
		case r < 17:
			opts = append(opts, cordoned)
		case r < 19:
			opts = append(opts, ready("False"))
		}
		cpu := 2 << (i % 4)                  // 2, 4, 8 or 16 cores
		mem := fmt.Sprintf("%dGi", 4<<(i%4)) // 4–32 GiB
		nodes[i] = mkNode(fmt.Sprintf("node-%04d", i), fmt.Sprint(cpu), mem, opts...)
	}
	return nodes
}

// variedPod returns a pod with random requests; some select a zone, some
// tolerate the GPU taint, some need a host port or prefer a zone.
func variedPod(rng *rand.Rand, i int) *corev1.Pod {
	opts := []podOpt{image(fmt.Sprintf("app-%d", rng.IntN(20)))}
	switch r := rng.IntN(100); {
	case r < 10:
		opts = append(opts, nodeSelector("topology.kubernetes.io/zone", fmt.Sprintf("zone-%d", rng.IntN(3))))
	case r < 15:
		opts = append(opts, tolerate("dedicated", "Equal", "gpu", "NoSchedule"))
	case r < 20:
		opts = append(opts, hostPort(int32(9100+rng.IntN(2)), "TCP", ""))
	case r < 25:
		opts = append(opts, preferred(10, term(expr("cores", "Gt", "4"))))
	case r < 28:
		opts = append(opts, required(term(expr("cores", "In", "8", "16"))))
	}
	cpu := fmt.Sprintf("%dm", 100+rng.IntN(1900))
	mem := fmt.Sprintf("%dMi", 64+rng.IntN(4000))
	if rng.IntN(10) == 0 {
		cpu, mem = "", "" // best effort
	}
	return mkPod(fmt.Sprintf("pod-%05d", i), cpu, mem, opts...)
}

// TestScheduleNeverOvercommits schedules 5,000 pods one by one onto 500
// nodes, assuming each, until the cluster is full. It checks every
// decision against the filters, every FitError against every node, and at
// the end that no node is overcommitted.
func TestScheduleNeverOvercommits(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	nodes := variedCluster(rng, 500)
	c := cacheWith(t, nodes)
	s := newTestScheduler(t)
	snap := framework.NewSnapshot()
	placed := map[string][]*corev1.Pod{}
	var scheduled, unschedulable int
	for i := range 5000 {
		pod := variedPod(rng, i)
		c.UpdateSnapshot(snap)
		res, err := s.Schedule(pod, snap)
		var fe *framework.FitError
		switch {
		case errors.As(err, &fe):
			unschedulable++
			// Nothing was sampled away: every node was filtered and
			// rejected, for the reasons the filters give.
			if len(fe.NodeReasons) != snap.NumNodes() {
				t.Fatalf("pod %d: FitError covers %d of %d nodes", i, len(fe.NodeReasons), snap.NumNodes())
			}
			for _, n := range snap.Nodes() {
				reasons, err := Filter(pod, n)
				if err != nil {
					t.Fatal(err)
				}
				if reasons == nil || !reflect.DeepEqual(fe.NodeReasons[n.Name()], reasons) {
					t.Fatalf("pod %d: node %s verdict %q, FitError says %q", i, n.Name(), reasons, fe.NodeReasons[n.Name()])
				}
			}
			continue
		case err != nil:
			t.Fatal(err)
		}
		n, _ := snap.Get(res.Node)
		if reasons, _ := Filter(pod, n); reasons != nil {
			t.Fatalf("pod %d placed on %s which fails %q", i, res.Node, reasons)
		}
		if err := c.AssumePod(pod, res.Node); err != nil {
			t.Fatal(err)
		}
		pod.Spec.NodeName = res.Node
		placed[res.Node] = append(placed[res.Node], pod)
		scheduled++
	}
	if unschedulable == 0 || scheduled < 2500 {
		t.Fatalf("scheduled %d, unschedulable %d: the cluster should fill up", scheduled, unschedulable)
	}
	t.Logf("scheduled %d pods, %d unschedulable", scheduled, unschedulable)

	// Recompute every node's load from the placed pods alone.
	for _, node := range nodes {
		name := node.Metadata.Name
		alloc, err := framework.NodeAllocatable(node)
		if err != nil {
			t.Fatal(err)
		}
		var sum framework.Resources
		ports := map[framework.HostPort]bool{}
		for _, pod := range placed[name] {
			r, _, _ := framework.PodRequests(pod)
			sum.Add(r)
			for _, hp := range framework.PodHostPorts(pod) {
				if ports[hp] {
					t.Errorf("%s: host port %v bound twice", name, hp)
				}
				ports[hp] = true
			}
		}
		if sum.MilliCPU > alloc.MilliCPU || sum.Memory > alloc.Memory || sum.EphemeralStorage > alloc.EphemeralStorage ||
			int64(len(placed[name])) > alloc.Pods {
			t.Errorf("%s overcommitted: %+v of %+v with %d pods", name, sum, alloc, len(placed[name]))
		}
		if n, _ := c.NodeInfo(name); n.Requested() != sum || n.NumPods() != len(placed[name]) {
			t.Errorf("%s: cache says %+v %d pods, placed pods sum to %+v %d", name, n.Requested(), n.NumPods(), sum, len(placed[name]))
		}
		// The same accounting, as the bind transaction keeps it.
		var rec *corev1.NodeAllocation
		for _, pod := range placed[name] {
			if reasons, err := cache.CheckAllocationFit(node, rec, pod); err != nil || reasons != nil {
				t.Fatalf("%s: bind re-check of %s failed: %q %v", name, pod.Metadata.Name, reasons, err)
			}
			rec, _, _ = cache.MergeAllocation(rec, name, pod)
		}
	}
}
