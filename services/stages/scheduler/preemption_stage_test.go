package scheduler_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/podflow/podflow/services/stages/scheduler/cache"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/stages/scheduler"
	"github.com/podflow/podflow/services/stages/scheduler/schedsim"
)

// TestPreemptionReplicas: on a full cluster (3 nodes of 4 cpu, twelve
// 1-cpu pods of priority 0) three scheduler replicas on a real store
// place three 2-cpu pods of priority 1000 by preemption: each preempts
// exactly two victims on one node, is nominated there, and binds there
// once its victims are gone; the victims get DisruptionTarget
// (PreemptionByScheduler) and a Preempted Event, their deletion goes
// through PodDeleteRequested; no pod is nominated twice and no victim is
// marked without its preemptor nominated in the same transaction. The
// room a preemption frees is reserved for its preemptor in the node's
// allocation record, which every bind compares: a replica that has not yet
// seen the nomination cannot bind another high pod into it (without the
// reservation that happened about 3 runs in 10, and the preemptor then
// preempted two more victims).
//
// The kill cases stop the replica that preempts first right after the
// preemption transaction ("nominated": no deletion requested yet) or
// right after the deletion requests ("requested": not yet bound): the
// other replicas finish the job — they request the marked victims'
// deletion again, and bind the preemptor when the victims are gone — and
// the same invariants hold.
func TestPreemptionReplicas(t *testing.T) {
	for _, killAt := range []string{"", "nominated", "requested"} {
		name := "no kill"
		if killAt != "" {
			name = "killed after " + killAt
		}
		t.Run(name, func(t *testing.T) { testPreemption(t, killAt) })
	}
}

func testPreemption(t *testing.T, killAt string) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	var mu sync.Mutex
	replicas := map[string]*schedsim.Replica{}
	var killed atomic.Pointer[schedsim.Replica]
	restore := scheduler.SetPreemptHook(func(point, replica string, pod *corev1.Pod) {
		if point != killAt {
			return
		}
		mu.Lock()
		r := replicas[replica]
		mu.Unlock()
		if r != nil && killed.CompareAndSwap(nil, r) {
			r.Sever()
		}
	})
	// Removed after env.Close has stopped the replicas that call it.
	t.Cleanup(restore)
	cfg := schedsim.DefaultConfig(t.TempDir())
	cfg.StoreNoSync = true
	cfg.AckWait = 2 * time.Second // a killed replica's events come back soon
	cfg.ResyncPeriod = time.Second
	cfg.Stage.OrphanAge = 3 * time.Second
	env, err := schedsim.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(env.Close)
	if err := env.CreateNodes(ctx, schedsim.Nodes(3, "4", "16Gi", 110)); err != nil {
		t.Fatal(err)
	}

	for _, r := range startReplicas(t, env, 3) {
		mu.Lock()
		replicas[r.Name] = r
		mu.Unlock()
	}
	fin, err := env.StartFinalizer(ctx)
	if err != nil {
		t.Fatal(err)
	}

	low := make([]*corev1.Pod, 12)
	for i := range low {
		low[i] = schedsim.Pod("bench", fmt.Sprintf("low-%02d", i), "1", "64Mi")
	}
	if err := env.Submit(ctx, low); err != nil {
		t.Fatal(err)
	}
	if err := env.Scheduled.Wait(ctx, len(low)); err != nil {
		t.Fatal(err)
	}
	high := make([]*corev1.Pod, 3)
	for i := range high {
		p := schedsim.Pod("bench", fmt.Sprintf("high-%d", i), "2", "64Mi")
		p.Spec.Priority = ptr(int32(1000))
		high[i] = p
	}
	if err := env.Submit(ctx, high); err != nil {
		t.Fatal(err)
	}
	if err := env.Scheduled.Wait(ctx, len(low)+len(high)); err != nil {
		t.Fatal(err)
	}
	if r := killed.Load(); r != nil {
		r.Kill()
	} else if killAt != "" {
		t.Fatalf("no replica reached %q", killAt)
	}
	// The last victims' finalization and the preemptors' binds are done;
	// wait until the store has no victim left (the Finalizer deletes them
	// as their requests arrive).
	get := benchPods(ctx, t, env)
	waitUntil(t, "every victim gone", func() bool {
		pods, _, err := objects.List[*corev1.Pod](ctx, env.Store, "bench")
		if err != nil {
			t.Fatal(err)
		}
		return len(pods) == len(low)+len(high)-2*len(high)
	})

	// Preempted Events name the preemptor's uid and the node.
	evs, _, err := objects.List[*corev1.Event](ctx, env.Store, "bench")
	if err != nil {
		t.Fatal(err)
	}
	preempted := 0
	victimsOn := map[string]map[string]int{} // preemptor uid -> node -> victims
	for _, ev := range evs {
		if ev.GetReason() != scheduler.ReasonPreempted {
			continue
		}
		preempted++
		var uid, node string
		if _, err := fmt.Sscanf(ev.GetMessage(), "Preempted by pod %s on node %s", &uid, &node); err != nil || !strings.HasPrefix(node, "node-") {
			t.Errorf("Preempted Event message %q", ev.GetMessage())
			continue
		}
		if victimsOn[uid] == nil {
			victimsOn[uid] = map[string]int{}
		}
		victimsOn[uid][node]++
	}
	if preempted != 2*len(high) {
		t.Errorf("%d Preempted Events, want %d (two victims per preemptor: no preemption took room reserved for another)", preempted, 2*len(high))
	}
	// Each preemptor is bound where its two victims were. Usually that is
	// one preemptor per node; two on one node is as kube-scheduler would
	// do it when the second preemption comes after the first preemptor's
	// victims are gone (the node then holds it and two low pods, a
	// candidate as good as the others: two victims of priority 0).
	bound := map[string]int{}
	for _, h := range high {
		p := get(h.GetMetadata().GetName())
		node := p.GetSpec().GetNodeName()
		if node == "" || p.GetStatus().GetNominatedNodeName() != "" {
			t.Errorf("%s: node %q, nominatedNodeName %q; want bound, nomination cleared", h.GetMetadata().GetName(), node, p.GetStatus().GetNominatedNodeName())
		}
		if v := victimsOn[p.GetMetadata().GetUid()]; len(v) != 1 || v[node] != 2 {
			t.Errorf("%s bound to %s, its victims by node %v; want two on %s", h.GetMetadata().GetName(), node, v, node)
		}
		bound[node]++
	}
	t.Logf("preemptors bound by node %v", bound)
	for _, l := range low {
		if _, err := objects.Get[*corev1.Pod](ctx, env.Store, "bench", l.GetMetadata().GetName()); err == nil {
			continue
		}
		if n := fin.Requested(l.GetMetadata().GetUid()); n == 0 {
			t.Errorf("victim %s gone without a PodDeleteRequested", l.GetMetadata().GetName())
		}
	}
	if err := fin.Err(); err != nil {
		t.Error(err)
	}

	rep, err := env.Verify(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := rep.Err(); err != nil {
		t.Error(err)
	}
	if rep.Nominations != len(high) || rep.Victims != 2*len(high) || len(rep.NominatedUnbound) != 0 || len(rep.VictimsLeft) != 0 {
		t.Errorf("history: %d nominations, %d victims, nominated but unbound %v, victims left %v; want %d, %d, none, none",
			rep.Nominations, rep.Victims, rep.NominatedUnbound, rep.VictimsLeft, len(high), 2*len(high))
	}
	var preemptions int64
	for _, r := range replicas {
		preemptions += r.Stage.Counters.Preemptions.Load()
	}
	t.Logf("preemptions committed %d, killed at %q", preemptions, killAt)
}

func ptr[T any](v T) *T { return &v }

// TestReservationSweep: a reservation whose nominee is gone is released
// (at start by Reconcile, on a fresh read of the pod; later when the pod
// informer sees the nominee deleted), and one whose nominee is still
// nominated to the node is kept; schedsim.Verify flags the stale one.
func TestReservationSweep(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cfg := schedsim.DefaultConfig(t.TempDir())
	cfg.StoreNoSync = true
	env, err := schedsim.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(env.Close)
	if err := env.CreateNodes(ctx, schedsim.Nodes(1, "4", "16Gi", 110)); err != nil {
		t.Fatal(err)
	}
	const node = "node-00000"
	nominee := schedsim.Pod("bench", "nominee", "64", "64Mi") // fits nowhere: stays nominated
	nominee.Spec.Priority = ptr(int32(1000))
	nominee.Status = &corev1.PodStatus{NominatedNodeName: node}
	if err := env.CreatePods(ctx, []*corev1.Pod{nominee}); err != nil {
		t.Fatal(err)
	}
	ghost := schedsim.Pod("bench", "ghost", "1", "64Mi") // never stored: deleted long ago
	ghost.Metadata.Uid = "ghost-uid"
	alloc, _, err := cache.ReserveAllocation(nil, node, nominee)
	if err != nil {
		t.Fatal(err)
	}
	if alloc, _, err = cache.ReserveAllocation(alloc, node, ghost); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Store.Create(ctx, alloc); err != nil {
		t.Fatal(err)
	}
	reserved := func() map[string]cache.Reservation {
		a, err := objects.Get[*corev1.NodeAllocation](ctx, env.Store, "", node)
		if err != nil {
			t.Fatal(err)
		}
		res, err := cache.Reservations(a)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	// Verify flags the stale reservation (and only it).
	rep, err := env.Verify(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Violations) != 1 || !strings.Contains(rep.Violations[0], "reserves room for pod bench/ghost (uid ghost-uid), which is not nominated to it") {
		t.Errorf("Verify before the sweep: %q, want the ghost's reservation", rep.Violations)
	}
	r := startReplicas(t, env, 1)[0]
	// A reconciliation of our own: once it returns, it has swept.
	if err := r.Stage.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if res := reserved(); len(res) != 1 || res[nominee.GetMetadata().GetUid()].Pod == nil {
		t.Fatalf("reservations after Reconcile %v, want only the nominee's", res)
	}
	if _, err := env.Store.Delete(ctx, objects.Pods, "bench", "nominee", 0); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the deleted nominee's reservation released", func() bool { return len(reserved()) == 0 })
	// The replica counts a release once its commit has returned: the
	// store shows the release a moment before the counter does.
	waitUntil(t, "the release counted", func() bool { return r.Stage.Counters.ReservationsReleased.Load() >= 2 })
	if n := r.Stage.Counters.ReservationsReleased.Load(); n != 2 {
		t.Errorf("%d reservations released, want 2", n)
	}
	if rep, err := env.Verify(ctx); err != nil || rep.Err() != nil {
		t.Errorf("Verify after the sweep: %v %v", err, rep.Err())
	}
}
