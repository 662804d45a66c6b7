package scheduler_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/podflow/podflow/services/stages/scheduler/plugins/interpodaffinity"
	"github.com/podflow/podflow/services/stages/scheduler/plugins/podtopologyspread"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/podrules"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/stages/scheduler/schedsim"
)

// zonedNodes returns n nodes of 8 cpu over zones zone-0..zone-<zones-1>
// (round robin).
func zonedNodes(n, zones int) []*corev1.Node {
	nodes := schedsim.Nodes(n, "8", "32Gi", 110)
	for i, node := range nodes {
		node.Metadata.Labels[podtopologyspread.LabelTopologyZone] = fmt.Sprintf("zone-%d", i%zones)
	}
	return nodes
}

func appSelector(app string) *corev1.LabelSelector {
	return &corev1.LabelSelector{MatchLabels: map[string]string{"app": app}}
}

// antiAffinePod is a pod of app that no other pod of app may share a
// hostname with.
func antiAffinePod(name, app string) *corev1.Pod {
	return antiPod(name, app, podtopologyspread.LabelHostname, app)
}

// antiPod is a pod of app that no pod of avoid may share a domain of key
// with (required pod anti-affinity).
func antiPod(name, app, key, avoid string) *corev1.Pod {
	p := schedsim.Pod("bench", name, "100m", "64Mi")
	p.Metadata.Labels = map[string]string{"app": app}
	p.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: []*corev1.PodAffinityTerm{{TopologyKey: key, LabelSelector: appSelector(avoid)}},
	}}
	return p
}

// affinePod is a pod of app that must share a zone with a pod of target.
func affinePod(name, app, target string) *corev1.Pod {
	p := schedsim.Pod("bench", name, "100m", "64Mi")
	p.Metadata.Labels = map[string]string{"app": app}
	p.Spec.Affinity = &corev1.Affinity{PodAffinity: &corev1.PodAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: []*corev1.PodAffinityTerm{{TopologyKey: podtopologyspread.LabelTopologyZone, LabelSelector: appSelector(target)}},
	}}
	return p
}

// plainPod is a pod of app without terms.
func plainPod(name, app string) *corev1.Pod {
	p := schedsim.Pod("bench", name, "100m", "64Mi")
	p.Metadata.Labels = map[string]string{"app": app}
	return p
}

// spreadPod is a pod of app spread by zone, maxSkew 1, DoNotSchedule.
func spreadPod(name, app string) *corev1.Pod {
	p := schedsim.Pod("bench", name, "100m", "64Mi")
	p.Metadata.Labels = map[string]string{"app": app}
	p.Spec.TopologySpreadConstraints = []*corev1.TopologySpreadConstraint{{
		MaxSkew: 1, TopologyKey: podtopologyspread.LabelTopologyZone, WhenUnsatisfiable: "DoNotSchedule", LabelSelector: appSelector(app),
	}}
	return p
}

// TestTopologyReplicas: three scheduler replicas on a real store race to
// place, on 9 nodes over 3 zones, the replicas of Deployment-like apps;
// schedsim.Verify re-checks every binding in the store's history
// against the rules at its revision.
//
//   - anti-affinity by hostname: twelve replicas with required
//     anti-affinity on kubernetes.io/hostname; nine bind, one per node,
//     three stay Pending with kube-scheduler's anti-affinity message.
//     The node's NodeAllocation compare in the bind transaction makes
//     this safe across replicas.
//   - spread by zone: twelve replicas with maxSkew 1 DoNotSchedule on
//     topology.kubernetes.io/zone, four per zone, each replica running one
//     handler at a time (so that Verify's spread check is exact), with
//     three replicas and with one. Across replicas the bind transaction
//     of a pod with a zone-wide DoNotSchedule constraint compares and
//     rewrites the chosen zone's record (scheduler.DomainRecordName): two
//     replicas deciding at once on caches that lack each other's bind
//     conflict instead of both placing a pod in the zone (without that
//     compare, MUTATION runs in 10 showed skew 2).
func TestTopologyReplicas(t *testing.T) {
	const perApp = 12
	t.Run("anti-affinity by hostname", func(t *testing.T) {
		var pods []*corev1.Pod
		for i := range perApp {
			pods = append(pods, antiAffinePod(fmt.Sprintf("web-%02d", i), "web"))
		}
		list, nodes := runTopology(t, pods, 9, 3, 0)
		webOn := map[string]int{}
		for _, p := range list {
			node := p.GetSpec().GetNodeName()
			if node != "" {
				webOn[node]++
				continue
			}
			c := podrules.PodCondition(p.GetStatus(), podrules.PodScheduled)
			if want := "0/9 nodes are available: 9 " + interpodaffinity.ReasonPodAntiAffinity + "."; c.GetReason() != "Unschedulable" || !strings.HasPrefix(c.GetMessage(), want) {
				t.Errorf("%s: PodScheduled %s %q, want Unschedulable %q", p.GetMetadata().GetName(), c.GetReason(), c.GetMessage(), want)
			}
		}
		for _, n := range nodes {
			if c := webOn[n.GetMetadata().GetName()]; c != 1 {
				t.Errorf("node %s holds %d web pods, want 1", n.GetMetadata().GetName(), c)
			}
		}
	})
	spreadByZone := func(t *testing.T, replicas int) {
		var pods []*corev1.Pod
		for i := range perApp {
			pods = append(pods, spreadPod(fmt.Sprintf("spread-%02d", i), "spread"))
		}
		list, nodes := runTopology(t, pods, perApp, replicas, 1)
		zoneOf, in := map[string]string{}, map[string]int{}
		for _, n := range nodes {
			zoneOf[n.GetMetadata().GetName()] = n.GetMetadata().GetLabels()[podtopologyspread.LabelTopologyZone]
		}
		for _, p := range list {
			in[zoneOf[p.GetSpec().GetNodeName()]]++
		}
		for z := range 3 {
			if c := in[fmt.Sprintf("zone-%d", z)]; c != perApp/3 {
				t.Errorf("zone-%d holds %d pods, want %d (%v)", z, c, perApp/3, in)
			}
		}
	}
	t.Run("spread by zone", func(t *testing.T) { spreadByZone(t, 3) })
	// Guards that no web pod may share a zone with, and web pods without
	// terms (but kept out of zone-2 by node affinity, so some guards
	// always bind), submitted interleaved: whichever lands first in a
	// zone keeps the other kind out of it, so how many bind varies, and
	// the rest stay Unschedulable. A web pod's replica may not yet have seen a
	// guard another replica just bound into the zone: the guard's rule is
	// listed in the guard registry, which the web pod's bind compares, so
	// it guards on the zone's record too (and conflicts with the guard's
	// bind, or refreshes and sees it) instead of joining it.
	t.Run("anti-affinity by zone", func(t *testing.T) {
		var pods []*corev1.Pod
		for i := range perApp {
			web := plainPod(fmt.Sprintf("web-%02d", i), "web")
			web.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
				NodeSelectorTerms: []*corev1.NodeSelectorTerm{{MatchExpressions: []*corev1.NodeSelectorRequirement{{Key: podtopologyspread.LabelTopologyZone, Operator: "In", Values: []string{"zone-0", "zone-1"}}}}},
			}}}
			pods = append(pods, antiPod(fmt.Sprintf("guard-%02d", i), "guard", podtopologyspread.LabelTopologyZone, "web"), web)
		}
		list, nodes := runTopology(t, pods, -1, 3, 0)
		zoneOf := map[string]string{}
		for _, n := range nodes {
			zoneOf[n.GetMetadata().GetName()] = n.GetMetadata().GetLabels()[podtopologyspread.LabelTopologyZone]
		}
		apps := map[string]map[string]int{} // zone -> app -> pods
		for _, p := range list {
			if node := p.GetSpec().GetNodeName(); node != "" {
				z := zoneOf[node]
				if apps[z] == nil {
					apps[z] = map[string]int{}
				}
				apps[z][p.GetMetadata().GetLabels()["app"]]++
			}
		}
		for z, in := range apps {
			if in["guard"] > 0 && in["web"] > 0 {
				t.Errorf("%s holds %d guards and %d web pods", z, in["guard"], in["web"])
			}
		}
		t.Logf("zones: %v", apps)
	})
	// One replica decides one pod at a time on a cache that holds its
	// own binds, so the rule holds.
	t.Run("spread by zone, one replica", func(t *testing.T) { spreadByZone(t, 1) })
}

// runTopology starts a store with 9 nodes over 3 zones and replicas
// (with concurrency handlers each, 0: the runner's default),
// submits pods, waits until bound of them are bound and the rest
// Unschedulable (bound -1: until each is one or the other), checks Verify,
// and returns the pods and nodes.
func runTopology(t *testing.T, pods []*corev1.Pod, bound, replicas, concurrency int) ([]*corev1.Pod, []*corev1.Node) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	cfg := schedsim.DefaultConfig(t.TempDir())
	cfg.StoreNoSync = true
	cfg.Concurrency = concurrency
	env, err := schedsim.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(env.Close)
	nodes := zonedNodes(9, 3)
	if err := env.CreateNodes(ctx, nodes); err != nil {
		t.Fatal(err)
	}
	rs := startReplicas(t, env, replicas)
	if err := env.Submit(ctx, pods); err != nil {
		t.Fatal(err)
	}
	if bound >= 0 {
		if err := env.Scheduled.Wait(ctx, bound); err != nil {
			t.Fatal(err)
		}
	}
	var list []*corev1.Pod
	verified := false
	defer func() {
		if !t.Failed() {
			return
		}
		if !verified {
			if rep, err := env.Verify(ctx); err == nil && rep.Err() != nil {
				t.Log(rep.Err())
			}
		}
		for _, p := range list {
			if p.GetSpec().GetNodeName() == "" {
				c := podrules.PodCondition(p.GetStatus(), podrules.PodScheduled)
				t.Logf("unbound %s: PodScheduled %s %s %q", p.GetMetadata().GetName(), c.GetStatus(), c.GetReason(), c.GetMessage())
			}
		}
	}()
	waitUntil(t, fmt.Sprintf("%d pods bound, the rest Unschedulable", bound), func() bool {
		list, _, err = objects.List[*corev1.Pod](ctx, env.Store, "bench")
		if err != nil {
			t.Fatal(err)
		}
		n, b := 0, 0
		for _, p := range list {
			switch {
			case p.GetSpec().GetNodeName() != "":
				b++
			case podrules.PodCondition(p.GetStatus(), podrules.PodScheduled).GetReason() == "Unschedulable":
				n++
			}
		}
		if bound < 0 && n+b == len(pods) {
			bound = b
		}
		return n == len(pods)-bound
	})
	rep, err := env.Verify(ctx)
	if err != nil {
		t.Fatal(err)
	}
	verified = true
	if err := rep.Err(); err != nil {
		t.Error(err)
	}
	if rep.Binds != bound || rep.AntiAffinityChecks+rep.SpreadChecks == 0 {
		t.Errorf("history: %d binds, %d anti-affinity and %d spread checks; want %d, some", rep.Binds, rep.AntiAffinityChecks, rep.SpreadChecks, bound)
	}
	if len(rep.SpreadSkews) > 0 {
		t.Logf("spread skews at revision (replicas bind out of decision order):\n  %s", strings.Join(rep.SpreadSkews, "\n  "))
	}
	var conflicts int64
	for _, r := range rs {
		conflicts += r.Stage.Counters.Conflicts.Load()
	}
	t.Logf("binds %d (lost races %d), anti-affinity terms checked %d, spread constraints checked %d", rep.Binds, conflicts, rep.AntiAffinityChecks, rep.SpreadChecks)
	return list, nodes
}

// TestVerifyTopology attacks Verify's topology checks with bindings
// written straight to the store (no scheduler): each broken rule is
// reported at its binding, and the same shapes that keep the rules are
// not. Required pod affinity: a pod bound where no pod its terms select
// is (and not the first of a self-affine group) is reported.
func TestVerifyTopology(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cfg := schedsim.DefaultConfig(t.TempDir())
	cfg.StoreNoSync = true
	cfg.Concurrency = 1 // spread skews are violations
	env, err := schedsim.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(env.Close)
	if err := env.CreateNodes(ctx, zonedNodes(6, 3)); err != nil {
		t.Fatal(err)
	}
	on := func(p *corev1.Pod, node int) *corev1.Pod {
		p.Spec.NodeName = fmt.Sprintf("node-%05d", node)
		return p
	}
	terminating := func(p *corev1.Pod) *corev1.Pod {
		p.Metadata.DeletionTimestamp = timestamppb.Now()
		return p
	}
	// Written in this order, one at a time. node-0 and node-3 are
	// zone-0, node-1 and node-4 zone-1, node-2 and node-5 zone-2.
	pods := []*corev1.Pod{
		on(antiAffinePod("web-a", "web"), 0),
		on(antiAffinePod("web-b", "web"), 1), // fine: another host
		on(antiAffinePod("web-c", "web"), 0), // own anti-affinity broken
		on(plainPod("db-a", "db"), 2),
		on(antiAffinePod("db-guard", "db"), 5),      // fine: db-a is on another host
		on(plainPod("db-b", "db"), 5),               // db-guard's anti-affinity broken (symmetry)
		on(plainPod("web-plain", "other"), 1),       // fine: no term selects it
		on(spreadPod("s-0", "s"), 0),                // zone-0: 1
		on(spreadPod("s-1", "s"), 1),                // zone-1: 1
		on(spreadPod("s-2", "s"), 3),                // zone-0: 2, skew 2 > 1: broken
		on(terminating(spreadPod("s-t", "s")), 4),   // terminating: not counted
		on(spreadPod("s-3", "s"), 5),                // zone-2: 1, fine
		on(spreadPod("s-4", "s"), 4),                // zone-1: 2, fine (zone-0 has 2)
		on(affinePod("cache-a", "cache", "web"), 3), // fine: web-a is in zone-0
		on(affinePod("cache-b", "cache", "web"), 2), // zone-2 has no web pod: broken
		on(affinePod("grp-a", "grp", "grp"), 2),     // fine: the first of a self-affine group
		on(affinePod("grp-b", "grp", "grp"), 4),     // zone-1 has no grp pod (grp-a is in zone-2): broken
		on(affinePod("grp-c", "grp", "grp"), 5),     // fine: zone-2
	}
	for _, p := range pods {
		if err := env.CreatePods(ctx, []*corev1.Pod{p}); err != nil {
			t.Fatal(err)
		}
	}
	rep, err := env.Verify(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, v := range rep.Violations {
		if strings.Contains(v, "affinity") || strings.Contains(v, "spread") {
			got = append(got, v)
		}
	}
	want := []string{
		"pod bench/web-c bound to node-00000 at revision", "its required anti-affinity (kubernetes.io/hostname=node-00000) selects bench/web-a on node-00000",
		"pod bench/web-c bound to node-00000 at revision", "the required anti-affinity of bench/web-a on node-00000 (kubernetes.io/hostname=node-00000) selects it",
		"pod bench/db-b bound to node-00005 at revision", "the required anti-affinity of bench/db-guard on node-00005 (kubernetes.io/hostname=node-00005) selects it",
		"pod bench/s-2 bound to node-00003 at revision", "DoNotSchedule spread on topology.kubernetes.io/zone has skew 2 > maxSkew 1",
		"pod bench/cache-b bound to node-00002 at revision", "its required affinity (topology.kubernetes.io/zone=zone-2) selects no pod there",
		"pod bench/grp-b bound to node-00004 at revision", "its required affinity (topology.kubernetes.io/zone=zone-1) selects no pod there",
	}
	if len(got) != len(want)/2 {
		t.Fatalf("topology violations:\n  %s\nwant %d", strings.Join(got, "\n  "), len(want)/2)
	}
	for i, v := range got {
		if !strings.Contains(v, want[2*i]) || !strings.Contains(v, want[2*i+1]) {
			t.Errorf("violation %d: %q, want %q … %q", i, v, want[2*i], want[2*i+1])
		}
	}
}
