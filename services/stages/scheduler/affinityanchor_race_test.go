package scheduler_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/podflow/podflow/services/stages/scheduler/plugins/podtopologyspread"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/stages/scheduler"
	"github.com/podflow/podflow/services/stages/scheduler/schedsim"
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
//     without the other: both decisions rely on the first-pod exemption.
//     Each one's first bind lists its term over the cluster domain and
//     its writer (domainStale on the registry); each decides again,
//     knowing the registry, still without the other's pod;
//  2. A binds its pod to node-00000, B to another domain (node-00001:
//     zone-1, another host). B must lose on the group's anchor or on A's
//     cluster record (domainStale) — had it committed, its pod would be
//     bound where no pod of the group is while A's is (Verify: its
//     required affinity selects no pod there);
//  3. B refreshes that record (its cache then holds A's pod), decides
//     again — no longer on the exemption, in A's pod's domain — and
//     binds. Verify (one handler: an unmet affinity is a violation)
//     finds every binding within its rules.
//
// Step 2 commits (red) only without both the anchor and the cluster
// records' compare: either alone guards two first pods (B's loses on the
// cluster record, compared first).
func TestFirstOfGroupAnchor(t *testing.T) {
	for _, tc := range []struct {
		name, key string
		join      func(node string) bool // the nodes that join the first pod on node-00000
	}{
		{"by zone", podtopologyspread.LabelTopologyZone, func(n string) bool { return n == "node-00000" || n == "node-00002" }},
		{"by hostname", podtopologyspread.LabelHostname, func(n string) bool { return n == "node-00000" }},
	} {
		t.Run(tc.name, func(t *testing.T) { raceFirstPods(t, tc.key, tc.join) })
	}
}

// drive returns a test's steps on env's replicas: decide decides the
// stored pod name on s; bind binds d's pod to node, the node's allocation
// read fresh first (only domain records, anchors and the registry may
// conflict), and returns the outcome and the record to refresh.
func drive(ctx context.Context, t *testing.T, env *schedsim.Env) (
	decide func(s *scheduler.Stage, who, name string) *scheduler.Decision,
	bind func(s *scheduler.Stage, who string, d *scheduler.Decision, node string) (string, string),
) {
	decide = func(s *scheduler.Stage, who, name string) *scheduler.Decision {
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
	bind = func(s *scheduler.Stage, who string, d *scheduler.Decision, node string) (string, string) {
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
	return decide, bind
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
	decide, bind := drive(ctx, t, env)

	// 1. Both decide on caches without the other's pod, list their
	// terms and writers, and decide again.
	da, db := decide(a, "A", "grp-a"), decide(b, "B", "grp-b")
	if !da.FirstOfGroup || !db.FirstOfGroup {
		t.Fatalf("first-pod exemption: A's decision %v, B's %v; want both", da.FirstOfGroup, db.FirstOfGroup)
	}
	for _, r := range []struct {
		s        *scheduler.Stage
		who, pod string
		d        *scheduler.Decision
	}{{a, "A", "grp-a", da}, {b, "B", "grp-b", db}} {
		if err := r.s.Refresh(ctx, scheduler.GuardRegistryName); err != nil {
			t.Fatal(err)
		}
		if o, s := bind(r.s, r.who, r.d, "node-00003"); o != "domainStale" || s != scheduler.GuardRegistryName {
			t.Fatalf("%s's first bind of %s: %s %q, want domainStale %q", r.who, r.pod, o, s, scheduler.GuardRegistryName)
		}
	}
	for _, s := range []*scheduler.Stage{a, b} {
		if err := s.Refresh(ctx, scheduler.GuardRegistryName); err != nil {
			t.Fatal(err)
		}
	}
	da, db = decide(a, "A", "grp-a"), decide(b, "B", "grp-b")
	if !da.FirstOfGroup || !db.FirstOfGroup {
		t.Fatalf("first-pod exemption after listing: A's decision %v, B's %v; want both", da.FirstOfGroup, db.FirstOfGroup)
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
	if cluster := scheduler.DomainRecordName(scheduler.ClusterKey, scheduler.ClusterValue, ""); o != "domainStale" || (s != anchors[0] && !strings.HasPrefix(s, cluster)) {
		t.Fatalf("B's bind on the exemption: %s %q, want domainStale on %q or %q…", o, s, anchors[0], cluster)
	}
	// 3. B refreshes that record and decides again: A's pod is there.
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

// TestFirstPodGuardsCluster attacks the cluster-wide guard of the
// first-pod exemption (firstPodRules, domainguard.go) on a real store
// with two replicas, A and B, driven one step at a time: F is the first
// pod of app=web (required affinity to app=web by zone), W a plain
// app=web pod without rules.
//
//  0. B binds a zone-spread pod of another app into zone-1: B is a listed
//     writer;
//  1. A decides F on the exemption; its bind into zone-1 lists F's term
//     over the cluster domain (domainStale on the registry);
//  2. A decides F again, knowing the registry: the exemption still holds
//     (no web pod is bound);
//  3. B binds W into zone-0: a listed term selects it, so it writes B's
//     cluster record (without the listing it writes nothing);
//  4. A's bind of F must lose on B's cluster record — had it committed,
//     F would be bound in zone-1 while its term selects W in zone-0 only
//     (Verify: its required affinity selects no pod there);
//  5. A refreshes that record, decides F again — W in its cache, no
//     exemption — into W's zone, and binds. Verify finds no violation.
//
// Red with step 1's listing skipped and with the first-pod bind's compare
// of the other writers' cluster records removed.
func TestFirstPodGuardsCluster(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	env, rs := twoReplicas(ctx, t) // node-00000 and node-00002 are zone-0, node-00001 and node-00003 zone-1
	a, b := rs[0].Stage, rs[1].Stage
	first := selfAffinePod("web-f", "web", podtopologyspread.LabelTopologyZone)
	plain := plainPod("web-w", "web")
	plain.Spec.SchedulerName = "pf-manual"
	spread := spreadPod("other-s", "other")
	spread.Spec.SchedulerName = "pf-manual"
	if err := env.CreatePods(ctx, []*corev1.Pod{first, plain, spread}); err != nil {
		t.Fatal(err)
	}
	decide, bind := drive(ctx, t, env)
	refresh := func(s *scheduler.Stage, name string) {
		t.Helper()
		if err := s.Refresh(ctx, name); err != nil {
			t.Fatal(err)
		}
	}
	want := func(step, o, s, wantO, wantS string) {
		t.Helper()
		if o != wantO || s != wantS {
			t.Fatalf("%s: %s %q, want %s %q", step, o, s, wantO, wantS)
		}
	}

	// 0. B lists its writer (and the spread rule), then binds the spread pod.
	o, s := bind(b, "B", decide(b, "B", "other-s"), "node-00003")
	want("B's first bind of the spread pod", o, s, "domainStale", scheduler.GuardRegistryName)
	refresh(b, scheduler.GuardRegistryName)
	o, s = bind(b, "B", decide(b, "B", "other-s"), "node-00003")
	want("B's bind of the spread pod", o, s, "bound", "")

	// 1. A's bind of F on the exemption lists F's term.
	refresh(a, scheduler.GuardRegistryName)
	d := decide(a, "A", "web-f")
	if !d.FirstOfGroup {
		t.Fatal("A's decision of F: no first-pod exemption")
	}
	o, s = bind(a, "A", d, "node-00001")
	want("A's first bind of F", o, s, "domainStale", scheduler.GuardRegistryName)

	// 2. A decides F again, knowing the registry.
	refresh(a, scheduler.GuardRegistryName)
	d = decide(a, "A", "web-f")
	if !d.FirstOfGroup {
		t.Fatal("A's second decision of F: no first-pod exemption")
	}

	// 3. B binds W into zone-0.
	refresh(b, scheduler.GuardRegistryName)
	o, s = bind(b, "B", decide(b, "B", "web-w"), "node-00000")
	want("B's bind of W", o, s, "bound", "")

	// 4. A's bind of F into zone-1 loses on B's cluster record.
	o, s = bind(a, "A", d, "node-00001")
	if o == "bound" {
		rep, err := env.Verify(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Fatalf("A's bind of F on the exemption committed after W's; Verify: %v", rep.Err())
	}
	if o != "domainStale" || !strings.HasPrefix(s, scheduler.DomainRecordName(scheduler.ClusterKey, scheduler.ClusterValue, "")) {
		t.Fatalf("A's bind of F after W's: %s %q, want domainStale on B's cluster record", o, s)
	}

	// 5. A refreshes it and joins W's zone.
	refresh(a, s)
	d = decide(a, "A", "web-f")
	if d.FirstOfGroup || (d.Node != "node-00000" && d.Node != "node-00002") {
		t.Fatalf("A's decision of F after W: %s (first-pod exemption %v), want zone-0 without it", d.Node, d.FirstOfGroup)
	}
	o, s = bind(a, "A", d, d.Node)
	want("A's bind of F into W's zone", o, s, "bound", "")
	rep, err := env.Verify(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := rep.Err(); err != nil {
		t.Error(err)
	}
	if rep.Binds != 3 || rep.AffinityChecks != 1 {
		t.Errorf("history: %d binds, %d affinity terms checked; want 3, 1", rep.Binds, rep.AffinityChecks)
	}
}
