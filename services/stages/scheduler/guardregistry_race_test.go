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

// TestBindComparesGuardRegistry attacks "every bind compares the
// registry" (bind.go) on a real store with two replicas, A and B, whose
// bind attempts the test drives one at a time (scheduler.BindKnowing):
//
//  1. B's bind of q, a pod with a DoNotSchedule zone spread (maxSkew 1,
//     app=s), lists q's rule in the guard registry (domainStale);
//  2. A binds p, a pod of app=s without rules, into q's zone (another
//     node: the node allocations do not conflict) knowing the registry as
//     it was before step 1 — so p's bind guards no domain and writes no
//     domain record. It must lose on the registry (domainStale,
//     ~zone-guards) instead of committing: had it committed, B's bind of
//     q on its decision (zone-0 and zone-1 empty) would commit too, no
//     domain record of A's to conflict on, and zone-0 would hold p and q
//     against zone-1's none (skew 2);
//  3. A refreshes: p's bind now guards on zone-0 (lists A as a writer,
//     then binds and writes A's zone-0 record); B's bind of q on its old
//     decision is stale on the registry, and its decision again (p in
//     zone-0) binds q into zone-1. Verify (one handler: a skew is a
//     violation) finds every binding within its rules.
//
// Without the registry compare, step 2 commits (red).
func TestBindComparesGuardRegistry(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	env, rs := twoReplicas(ctx, t)
	a, b := rs[0].Stage, rs[1].Stage
	// Another scheduler's pods: the replicas' own handling leaves them
	// alone, the test drives their binds.
	q, p := spreadPod("q", "s"), plainPod("p", "s")
	for _, pod := range []*corev1.Pod{q, p} {
		pod.Spec.SchedulerName = "pf-manual"
	}
	if err := env.CreatePods(ctx, []*corev1.Pod{q, p}); err != nil {
		t.Fatal(err)
	}
	stored := func(name string) *corev1.Pod {
		pod, err := objects.Get[*corev1.Pod](ctx, env.Store, "bench", name)
		if err != nil {
			t.Fatal(err)
		}
		return pod
	}
	bind := func(s *scheduler.Stage, who, name, node string, decidedAt int64, reg *scheduler.GuardRegistry) (string, string) {
		t.Helper()
		_, outcome, stale, err := s.BindKnowing(ctx, stored(name), node, decidedAt, reg)
		if err != nil {
			t.Fatalf("%s binds %s to %s: %v", who, name, node, err)
		}
		return outcome, stale
	}
	// refreshed reads the registry as after a lost race on it and
	// returns it as s then knows it.
	refreshed := func(s *scheduler.Stage) *scheduler.GuardRegistry {
		t.Helper()
		if err := s.Refresh(ctx, scheduler.GuardRegistryName); err != nil {
			t.Fatal(err)
		}
		reg, err := s.GuardRegistry()
		if err != nil {
			t.Fatal(err)
		}
		return reg
	}
	want := func(what, outcome, stale, wantOutcome, wantStale string) {
		t.Helper()
		if outcome != wantOutcome || stale != wantStale {
			t.Fatalf("%s: %s %q, want %s %q", what, outcome, stale, wantOutcome, wantStale)
		}
	}

	staleA, err := a.GuardRegistry() // A's view before q's rule is listed
	if err != nil {
		t.Fatal(err)
	}
	// 1. B lists q's rule (and itself as a writer).
	o, s := bind(b, "B", "q", "node-00000", 0, nil)
	want("B's first bind of q", o, s, "domainStale", scheduler.GuardRegistryName)
	reg, err := b.GuardRegistry()
	if err != nil {
		t.Fatal(err)
	}
	decidedQ := reg.Rev() // B decides q once its pod informer is here: p is not bound
	if decidedQ <= staleA.Rev() {
		t.Fatalf("registry at %d after listing q's rule, A knew %d", decidedQ, staleA.Rev())
	}

	// 2. A binds p into zone-0 knowing the registry without q's rule.
	o, s = bind(a, "A", "p", "node-00002", decidedQ, staleA)
	if o == "bound" {
		// Show what that lets through: q binds on its decision too.
		o2, s2 := bind(b, "B", "q", "node-00000", decidedQ, nil)
		rep, err := env.Verify(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Fatalf("A's bind of p on a registry without q's rule committed; B's bind of q on a decision without p then: %s %q; Verify: %v", o2, s2, rep.Err())
	}
	want("A's bind of p on the stale registry", o, s, "domainStale", scheduler.GuardRegistryName)

	// 3. A refreshes: p's bind guards on zone-0.
	o, s = bind(a, "A", "p", "node-00002", refreshed(a).Rev(), nil)
	want("A's bind of p listing A as a writer", o, s, "domainStale", scheduler.GuardRegistryName)
	o, s = bind(a, "A", "p", "node-00002", refreshed(a).Rev(), nil)
	want("A's guarded bind of p", o, s, "bound", "")
	allocs, _, err := objects.List[*corev1.NodeAllocation](ctx, env.Store, "")
	if err != nil {
		t.Fatal(err)
	}
	recordA := false
	for _, rec := range allocs {
		recordA = recordA || strings.HasPrefix(rec.GetMetadata().GetName(),
			scheduler.DomainRecordName(podtopologyspread.LabelTopologyZone, "zone-0", rs[0].Name+"."))
	}
	if !recordA {
		t.Errorf("p's bind wrote no zone-0 domain record of A's")
	}
	// B's bind of q on its decision without p: stale on the registry.
	o, s = bind(b, "B", "q", "node-00000", decidedQ, nil)
	want("B's bind of q on a decision without p", o, s, "domainStale", scheduler.GuardRegistryName)
	// Decided again with p in zone-0: q goes to zone-1.
	o, s = bind(b, "B", "q", "node-00001", refreshed(b).Rev(), nil)
	want("B's bind of q into zone-1", o, s, "bound", "")
	rep, err := env.Verify(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := rep.Err(); err != nil {
		t.Error(err)
	}
	if rep.Binds != 2 || rep.SpreadChecks == 0 {
		t.Errorf("history: %d binds, %d spread checks; want 2, some", rep.Binds, rep.SpreadChecks)
	}
}

// twoReplicas starts a store with one handler per replica (an unmet rule
// is a violation for Verify), nodes node-00000 and node-00002 in zone-0,
// node-00001 and node-00003 in zone-1, and two scheduler replicas.
func twoReplicas(ctx context.Context, t *testing.T) (*schedsim.Env, []*schedsim.Replica) {
	t.Helper()
	cfg := schedsim.DefaultConfig(t.TempDir())
	cfg.StoreNoSync = true
	cfg.Concurrency = 1
	env, err := schedsim.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(env.Close)
	if err := env.CreateNodes(ctx, zonedNodes(4, 2)); err != nil {
		t.Fatal(err)
	}
	return env, startReplicas(t, env, 2)
}
