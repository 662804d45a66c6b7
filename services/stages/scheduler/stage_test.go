package scheduler_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/podflow/podflow/services/stages/scheduler/cache"
	"github.com/podflow/podflow/services/stages/scheduler/framework"

	"go.uber.org/goleak"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/eventsv1"
	"github.com/podflow/podflow/proto/podrules"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/stages/scheduler/schedsim"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// deadline bounds each wait on a condition.
const deadline = 20 * time.Second

// scale returns the nodes and pods of the replica tests. The shape
// (500 nodes, 5,000 pods) runs without the race detector and -short; under
// -race, which slows the whole in-process system (bus, three store
// replicas, three schedulers) about tenfold on this 2-core machine, 300
// nodes and 600 pods keep the package within its time budget.
func scale(t *testing.T) (nodes, pods int) {
	if raceEnabled || testing.Short() {
		return 300, 600
	}
	return 500, 5000
}

// startEnv starts a bus, a 3-replica store and writes nodes sized so that
// the pods fill about 90% of the cluster's cpu: the last pods are placed
// on nearly full nodes, where replicas race for the same room.
func startEnv(t *testing.T, numNodes, numPods int, ackWait time.Duration) *schedsim.Env {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cfg := schedsim.DefaultConfig(t.TempDir())
	cfg.StoreNoSync = true
	cfg.AckWait = ackWait
	env, err := schedsim.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(env.Close)
	slots := (numPods*10/9 + numNodes - 1) / numNodes // pods of 250m per node
	if err := env.CreateNodes(ctx, schedsim.Nodes(numNodes, fmt.Sprintf("%dm", 250*slots), "64Gi", 110)); err != nil {
		t.Fatal(err)
	}
	return env
}

func startReplicas(t *testing.T, env *schedsim.Env, n int) []*schedsim.Replica {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	var rs []*schedsim.Replica
	for i := range n {
		r, err := env.StartReplica(ctx, fmt.Sprintf("scheduler-%d", i))
		if err != nil {
			t.Fatal(err)
		}
		rs = append(rs, r)
	}
	return rs
}

func verify(t *testing.T, env *schedsim.Env, numPods int, replicas []*schedsim.Replica) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rep, err := env.Verify(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := rep.Err(); err != nil {
		t.Error(err)
	}
	if rep.Pods != numPods || rep.Bound != numPods || rep.Binds != numPods {
		t.Errorf("store: %d pods, %d bound, %d binds in the history; want %d of each", rep.Pods, rep.Bound, rep.Binds, numPods)
	}
	var scheduled, conflicts int64
	for _, r := range replicas {
		scheduled += r.Stage.Counters.Scheduled.Load()
		conflicts += r.Stage.Counters.Conflicts.Load()
		t.Logf("%s: scheduled %d, conflicts %d, unschedulable %d, errors %d", r.Name, r.Stage.Counters.Scheduled.Load(),
			r.Stage.Counters.Conflicts.Load(), r.Stage.Counters.Unschedulable.Load(), r.Stage.Counters.Errors.Load())
	}
	// A killed replica may have committed binds it never counted.
	if scheduled > int64(numPods) {
		t.Errorf("replicas counted %d committed binds for %d pods", scheduled, numPods)
	}
	ph := env.Scheduled.Phases()
	if ph.Pods != numPods {
		t.Errorf("PodScheduled for %d pods in the stream, want %d", ph.Pods, numPods)
	}
	t.Logf("%d allocation writes checked; conflicts %d (events say %d over %d pods); filter %s; score %s; bind %s",
		rep.AllocationWrites, conflicts, ph.Conflicts, ph.PodsWithConflicts, ph.Filter, ph.Score, ph.Bind)
}

// TestReplicasNeverDoubleBindOrOvercommit runs 3 scheduler replicas on one
// consumer against a real store and bus: every pod is bound exactly once,
// no node is overcommitted at any revision, and each node's
// NodeAllocation matches the pods bound to it.
func TestReplicasNeverDoubleBindOrOvercommit(t *testing.T) {
	numNodes, numPods := scale(t)
	env := startEnv(t, numNodes, numPods, 30*time.Second)
	replicas := startReplicas(t, env, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	pods := schedsim.Pods(numPods, "250m", "256Mi")
	if err := env.Submit(ctx, pods); err != nil {
		t.Fatal(err)
	}
	if err := env.Scheduled.Wait(ctx, numPods); err != nil {
		t.Fatal(err)
	}
	verify(t, env, numPods, replicas)
	for _, r := range replicas {
		if r.Stage.Counters.Scheduled.Load() == 0 {
			t.Errorf("%s scheduled nothing: the replicas did not share the work", r.Name)
		}
	}
}

// TestReplicaKilledMidRun kills one of 3 replicas (its connection closed
// without draining) while pods are being scheduled: the others finish
// the work — the events it held come back after AckWait — with the same
// guarantees.
func TestReplicaKilledMidRun(t *testing.T) {
	numNodes, numPods := scale(t)
	env := startEnv(t, numNodes, numPods, 3*time.Second)
	replicas := startReplicas(t, env, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	pods := schedsim.Pods(numPods, "250m", "256Mi")
	if err := env.CreatePods(ctx, pods); err != nil {
		t.Fatal(err)
	}
	published := make(chan error, 1)
	go func() { published <- env.Publish(ctx, pods) }()
	if err := env.Scheduled.Wait(ctx, numPods/3); err != nil {
		t.Fatal(err)
	}
	victim := replicas[0]
	// Killed at work: once it has bound pods too (under load a replica's
	// first binds can come after a third of the pods are bound by the
	// others). A run that ends first fails below.
	for victim.Stage.Counters.Scheduled.Load() == 0 && env.Scheduled.Len() < numPods && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	victim.Kill()
	killedAt := env.Scheduled.Len()
	if err := <-published; err != nil {
		t.Fatal(err)
	}
	if err := env.Scheduled.Wait(ctx, numPods); err != nil {
		t.Fatal(err)
	}
	t.Logf("killed %s after %d of %d pods were scheduled", victim.Name, killedAt, numPods)
	if killedAt >= numPods {
		t.Fatalf("the replica was killed after the run ended")
	}
	if victim.Stage.Counters.Scheduled.Load() == 0 {
		t.Errorf("%s scheduled nothing before it was killed", victim.Name)
	}
	verify(t, env, numPods, replicas)
}

// TestUnschedulable: a pod no node fits is marked PodScheduled=False
// (Unschedulable) with kube-scheduler's message, gets a FailedScheduling
// Event and a PodUnschedulable event with every node's verdict, and is
// scheduled as soon as room appears — a node becoming Ready, a new node,
// a bound pod deleted — though its backoff is far longer than the test.
func TestUnschedulable(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	env := startSlowRetryEnv(ctx, t)
	small := schedsim.Node("small", "1", "8Gi", 110)
	gpu := schedsim.Node("gpu", "8", "64Gi", 110)
	gpu.Spec.Taints = []*corev1.Taint{{Key: "dedicated", Value: "gpu", Effect: "NoSchedule"}}
	notReady := schedsim.Node("late", "4", "16Gi", 110)
	notReady.Status.Conditions[0].Status = "False"
	if err := env.CreateNodes(ctx, []*corev1.Node{small, gpu, notReady}); err != nil {
		t.Fatal(err)
	}
	startReplicas(t, env, 1)

	waitFor := func(what string, cond func() bool) { t.Helper(); waitUntil(t, what, cond) }
	get := benchPods(ctx, t, env)

	// 1. Nothing fits: kube-scheduler's words everywhere.
	big := schedsim.Pod("bench", "big", "2", "1Gi")
	if err := env.Submit(ctx, []*corev1.Pod{big}); err != nil {
		t.Fatal(err)
	}
	const want = "0/3 nodes are available: 1 Insufficient cpu, 1 node(s) had untolerated taint {dedicated: gpu}, 1 node(s) had untolerated taint {node.kubernetes.io/not-ready: }. preemption: 0/3 nodes are available: 1 No preemption victims found for incoming pod, 2 Preemption is not helpful for scheduling.."
	var cond *corev1.PodCondition
	waitFor("PodScheduled=False", func() bool {
		cond = podrules.PodCondition(get("big").GetStatus(), "PodScheduled")
		return cond != nil
	})
	if cond.GetStatus() != "False" || cond.GetReason() != "Unschedulable" || cond.GetMessage() != want {
		t.Errorf("PodScheduled = %s/%s %q, want False/Unschedulable %q", cond.GetStatus(), cond.GetReason(), cond.GetMessage(), want)
	}
	name := podrules.EventName(podrules.PodRef(big), podrules.EventWarning, eventsv1.ReasonFailedScheduling, want, "default-scheduler")
	var ev *corev1.Event
	var err error
	waitFor("the FailedScheduling Event", func() bool {
		ev, err = objects.Get[*corev1.Event](ctx, env.Store, "bench", name)
		return err == nil
	})
	if ev.GetType() != "Warning" || ev.GetMessage() != want || ev.GetInvolvedObject().GetUid() != big.GetMetadata().GetUid() {
		t.Errorf("FailedScheduling event = %v", ev)
	}
	// The PodUnschedulable event is published before the Event is recorded.
	unsched := streamEvents(ctx, t, env, big.GetMetadata().GetUid(), "PodUnschedulable")
	if len(unsched) == 0 {
		t.Fatal("no PodUnschedulable event in the stream")
	}
	pu := unsched[0].GetPodUnschedulable()
	verdicts := map[string][]string{}
	for _, v := range pu.GetVerdicts() {
		verdicts[v.GetNode()] = v.GetReasons()
	}
	if pu.GetMessage() != want || len(verdicts) != 3 || fmt.Sprint(verdicts["small"]) != "[Insufficient cpu]" {
		t.Errorf("PodUnschedulable = %v", pu)
	}

	// 2. The NotReady node becomes Ready: scheduled at once, not after
	// the 10-minute backoff.
	if _, err := objects.Mutate(ctx, env.Store, "", "late", func(n *corev1.Node) error {
		n.Status.Conditions[0].Status = "True"
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	waitFor("big bound to late", func() bool { return get("big").GetSpec().GetNodeName() == "late" })
	if c := podrules.PodCondition(get("big").GetStatus(), "PodScheduled"); c.GetStatus() != "True" {
		t.Errorf("PodScheduled after the bind = %v", c)
	}

	// 3. A new node: the next pod that fits nowhere goes there at once.
	big2 := schedsim.Pod("bench", "big2", "3", "1Gi")
	if err := env.Submit(ctx, []*corev1.Pod{big2}); err != nil {
		t.Fatal(err)
	}
	waitFor("big2 unschedulable", func() bool {
		return podrules.PodCondition(get("big2").GetStatus(), "PodScheduled").GetReason() == "Unschedulable"
	})
	if err := env.CreateNodes(ctx, []*corev1.Node{schedsim.Node("new", "4", "16Gi", 110)}); err != nil {
		t.Fatal(err)
	}
	waitFor("big2 bound to new", func() bool { return get("big2").GetSpec().GetNodeName() == "new" })

	// 4. A bound pod goes away (as the status stage finalizes a deletion:
	// pod and allocation in one transaction): the waiting pod takes its room.
	big3 := schedsim.Pod("bench", "big3", "3", "1Gi")
	if err := env.Submit(ctx, []*corev1.Pod{big3}); err != nil {
		t.Fatal(err)
	}
	waitFor("big3 unschedulable", func() bool {
		return podrules.PodCondition(get("big3").GetStatus(), "PodScheduled").GetReason() == "Unschedulable"
	})
	deleteBound(ctx, t, env, get("big2"))
	waitFor("big3 bound to new", func() bool { return get("big3").GetSpec().GetNodeName() == "new" })

	rep, err := env.Verify(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := rep.Err(); err != nil {
		t.Error(err)
	}
}

// deleteBound removes a bound pod and releases its allocation in one
// transaction, as the status stage does once the node has finished it.
func deleteBound(ctx context.Context, t *testing.T, env *schedsim.Env, pod *corev1.Pod) {
	t.Helper()
	node := pod.GetSpec().GetNodeName()
	alloc, err := objects.Get[*corev1.NodeAllocation](ctx, env.Store, "", node)
	if err != nil {
		t.Fatal(err)
	}
	next, changed := cache.ReleaseAllocation(alloc, framework.PodKey(pod))
	if !changed {
		t.Fatalf("pod %s is not in the allocation of %s", pod.GetMetadata().GetName(), node)
	}
	b, err := objects.Encode(next)
	if err != nil {
		t.Fatal(err)
	}
	podKey := objects.Pods.Key(pod.GetMetadata().GetNamespace(), pod.GetMetadata().GetName())
	allocKey := objects.NodeAllocations.Key("", node)
	if _, err := env.Store.Client().Txn(ctx, raftstore.Txn{
		Compares: []raftstore.Compare{{Key: podKey, ModRevision: objects.Revision(pod)}, {Key: allocKey, ModRevision: objects.Revision(alloc)}},
		Ops:      []raftstore.Op{{Type: raftstore.OpDelete, Key: podKey}, {Type: raftstore.OpPut, Key: allocKey, Value: b}},
	}); err != nil {
		t.Fatal(err)
	}
}

// streamEvents returns the events of type typ about pod uid in the events
// stream.
func streamEvents(ctx context.Context, t *testing.T, env *schedsim.Env, uid string, typ eventsv1.Type) []*eventsv1.Envelope {
	t.Helper()
	envs, err := env.StreamEvents(ctx, uid, typ)
	if err != nil {
		t.Fatal(err)
	}
	return envs
}

// TestReconcileSchedulesLostPods: a pod whose PodPersisted never arrived
// is scheduled by reconciliation once it is OrphanAge old, and its
// PodScheduled is published.
func TestReconcileSchedulesLostPods(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cfg := schedsim.DefaultConfig(t.TempDir())
	cfg.StoreNoSync = true
	cfg.ResyncPeriod, cfg.Stage.OrphanAge = 200*time.Millisecond, 500*time.Millisecond
	env, err := schedsim.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer env.Close()
	if err := env.CreateNodes(ctx, schedsim.Nodes(3, "4", "16Gi", 110)); err != nil {
		t.Fatal(err)
	}
	replicas := startReplicas(t, env, 2)
	pods := schedsim.Pods(5, "100m", "100Mi")
	if err := env.CreatePods(ctx, pods); err != nil { // no PodPersisted
		t.Fatal(err)
	}
	wctx, wcancel := context.WithTimeout(ctx, deadline)
	defer wcancel()
	if err := env.Scheduled.Wait(wctx, len(pods)); err != nil {
		t.Fatal(err)
	}
	verify(t, env, len(pods), replicas)
}
