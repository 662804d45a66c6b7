package scheduler_test

import (
	"context"
	"testing"
	"time"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/scheduler"
)

// selfAffinePod is a pod of app that must share a domain of key with a
// pod of app: the first of them goes anywhere.
func selfAffinePod(name, app, key string) *corev1.Pod {
	p := plainPod(name, app)
	p.Spec.SchedulerName = "pf-manual" // the test drives its decisions and binds
	p.Spec.Affinity = &corev1.Affinity{PodAffinity: &corev1.PodAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: []*corev1.PodAffinityTerm{{TopologyKey: key, LabelSelector: appSelector(app)}},
	}}
	return p
}

// TestFirstOfGroupAnchor attacks the first-pod anchor (affinityanchor.go)
// on a real store with two replicas, A and B, whose decisions and binds
// the test drives one at a time (scheduler.Decide, BindDecision), for a
// self-affine group by zone and one by hostname:
//
//  1. A decides the group's first pod, B its second, each on a cache
//     without the other: both decisions rely on the first-pod exemption;
//  2. A binds its pod to node-00000, B to another domain (node-00001:
//     zone-1, another host). B must lose on the group's anchor
//     (domainStale) — had it committed, its pod would be bound where no
//     pod of the group is while A's is (Verify: its required affinity
//     selects no pod there);
//  3. B refreshes the anchor (its cache then holds A's pod), decides
//     again — no longer on the exemption, in A's pod's domain — and
//     binds. Verify (one handler: an unmet affinity is a violation)
//     finds every binding within its rules.
//
// Without the anchor (no compare, no write), step 2 commits (red).
func TestFirstOfGroupAnchor(t *testing.T) {
	for _, tc := range []struct {
		name, key string
		join      func(node string) bool // the nodes that join the first pod on node-00000
	}{
		{"by zone", scheduler.LabelTopologyZone, func(n string) bool { return n == "node-00000" || n == "node-00002" }},
		{"by hostname", scheduler.LabelHostname, func(n string) bool { return n == "node-00000" }},
	} {
		t.Run(tc.name, func(t *testing.T) { raceFirstPods(t, tc.key, tc.join) })
	}
}

// raceFirstPods runs TestFirstOfGroupAnchor's steps for a group
// self-affine by key.
func raceFirstPods(t *testing.T, key string, join func(node string) bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	env, rs := twoReplicas(ctx, t) // node-00000 and node-00002 are zone-0, node-00001 and node-00003 zone-1
	a, b := rs[0].Stage, rs[1].Stage
	first, second := selfAffinePod("grp-a", "grp", key), selfAffinePod("grp-b", "grp", key)
	if err := env.CreatePods(ctx, []*corev1.Pod{first, second}); err != nil {
		t.Fatal(err)
	}
	anchors := scheduler.AffinityAnchors(first)
	if len(anchors) != 1 {
		t.Fatalf("anchors %v, want one", anchors)
	}
	decide := func(s *scheduler.Stage, who, name string) *scheduler.Decision {
		t.Helper()
		pod, err := objects.Get[*corev1.Pod](ctx, env.Store, "bench", name)
		if err != nil {
			t.Fatal(err)
		}
		d, err := s.Decide(pod)
		if err != nil {
			t.Fatalf("%s decides %s: %v", who, name, err)
		}
		return d
	}
	// bind binds d's pod to node, its allocation read fresh first: only
	// the anchor may conflict.
	bind := func(s *scheduler.Stage, who string, d *scheduler.Decision, node string) (string, string) {
		t.Helper()
		if err := s.Refresh(ctx, node); err != nil {
			t.Fatal(err)
		}
		_, outcome, stale, err := s.BindDecision(ctx, d, node)
		if err != nil {
			t.Fatalf("%s binds to %s: %v", who, node, err)
		}
		return outcome, stale
	}

	// 1. Both decide on caches without the other's pod.
	da, db := decide(a, "A", "grp-a"), decide(b, "B", "grp-b")
	if !da.FirstOfGroup || !db.FirstOfGroup {
		t.Fatalf("first-pod exemption: A's decision %v, B's %v; want both", da.FirstOfGroup, db.FirstOfGroup)
	}
	// 2. A binds into node-00000's domain, B into node-00001's.
	if o, s := bind(a, "A", da, "node-00000"); o != "bound" {
		t.Fatalf("A's bind of the first pod: %s %q", o, s)
	}
	o, s := bind(b, "B", db, "node-00001")
	if o == "bound" {
		rep, err := env.Verify(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Fatalf("B's bind of a second first pod into another domain committed; Verify: %v", rep.Err())
	}
	if o != "domainStale" || s != anchors[0] {
		t.Fatalf("B's bind on the exemption: %s %q, want domainStale %q", o, s, anchors[0])
	}
	// 3. B refreshes the anchor and decides again: A's pod is there.
	if err := b.Refresh(ctx, s); err != nil {
		t.Fatal(err)
	}
	db = decide(b, "B", "grp-b")
	if db.FirstOfGroup || !join(db.Node) {
		t.Fatalf("B's decision after the anchor: %s (first-pod exemption %v), want one joining node-00000 without it", db.Node, db.FirstOfGroup)
	}
	if o, s := bind(b, "B", db, db.Node); o != "bound" {
		t.Fatalf("B's bind to %s: %s %q", db.Node, o, s)
	}
	rep, err := env.Verify(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := rep.Err(); err != nil {
		t.Error(err)
	}
	if rep.Binds != 2 || rep.AffinityChecks != 2 {
		t.Errorf("history: %d binds, %d affinity terms checked; want 2 of each", rep.Binds, rep.AffinityChecks)
	}
}
