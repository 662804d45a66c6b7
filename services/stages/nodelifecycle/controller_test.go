package nodelifecycle

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/podrules"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/raftstore/raftstoretest"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/stage"
	"github.com/podflow/podflow/services/stage/stagetest"
)

func node(name string, heartbeat time.Time) *corev1.Node {
	return &corev1.Node{
		Metadata: &corev1.ObjectMeta{Name: name, Uid: "uid-" + name, CreationTimestamp: timestamppb.New(heartbeat)},
		Spec:     &corev1.NodeSpec{Taints: []*corev1.Taint{{Key: "dedicated", Value: "ml", Effect: EffectNoSchedule}}},
		Status: &corev1.NodeStatus{Conditions: []*corev1.NodeCondition{
			{Type: "Ready", Status: "True", Reason: "KubeletReady", LastHeartbeatTime: timestamppb.New(heartbeat)},
			{Type: "MemoryPressure", Status: "False", LastHeartbeatTime: timestamppb.New(heartbeat)},
		}},
	}
}

func tolerate(key string, secs ...int64) *corev1.Toleration {
	t := &corev1.Toleration{Key: key, Operator: "Exists", Effect: EffectNoExecute}
	if len(secs) > 0 {
		t.TolerationSeconds = proto.Int64(secs[0])
	}
	return t
}

func pod(name, node string, tols ...*corev1.Toleration) *corev1.Pod {
	return &corev1.Pod{
		Metadata: &corev1.ObjectMeta{Name: name, Namespace: "default", Uid: "uid-" + name, CreationTimestamp: timestamppb.Now()},
		Spec:     &corev1.PodSpec{NodeName: node, Tolerations: tols, Containers: []*corev1.Container{{Name: "c", Image: "busybox"}}},
		Status: &corev1.PodStatus{Phase: "Running", Conditions: []*corev1.PodCondition{
			{Type: podrules.PodReady, Status: podrules.ConditionTrue}}},
	}
}

// TestDeadNodeTaintedAndEvicted (issue 39, item 4): against a real
// 3-replica store, a node silent past the grace period goes Unknown with
// kube's reason and message, gets the unreachable NoExecute and
// NoSchedule taints (its own taint kept), its pods' Ready goes False; a
// pod that does not tolerate the taint is evicted at once, one tolerating
// it for 5 s after 5 s, the admission default (300 s) after 300 s, one
// tolerating it forever never — each eviction a DisruptionTarget
// condition and a graceful deletion handed to the node. A node that
// heartbeats is untouched, and the dead node's taints go once it
// heartbeats again.
func TestDeadNodeTaintedAndEvicted(t *testing.T) {
	cl := raftstoretest.MakeCluster(t, 3)
	st := objects.New(cl.Client(t))
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	t0 := time.Now()
	objs := []objects.Object{
		node("dead", t0.Add(-time.Minute)), node("alive", t0.Add(-time.Second)),
		pod("intolerant", "dead"),
		pod("short", "dead", tolerate(TaintNodeUnreachable, 5), tolerate(TaintNodeNotReady, 5)),
		pod("default", "dead", tolerate(TaintNodeNotReady, 300), tolerate(TaintNodeUnreachable, 300)),
		pod("forever", "dead", &corev1.Toleration{Operator: "Exists"}),
		pod("elsewhere", "alive"),
	}
	for _, o := range objs {
		if _, err := st.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	pub := &stagetest.Publisher{}
	c, err := New(stage.Env{Store: st, Pub: pub, Stage: "status", Replica: "status-test", Log: slog.New(slog.DiscardHandler)}, DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	now := t0
	c.now = func() time.Time { return now }
	runCtx, stop := context.WithCancel(ctx)
	g, gctx := errgroup.WithContext(runCtx)
	if err := c.Start(gctx, g); err != nil {
		t.Fatal(err)
	}
	defer func() {
		stop()
		if err := g.Wait(); err != nil && !errors.Is(err, context.Canceled) {
			t.Error(err)
		}
	}()
	getNode := func(name string) *corev1.Node {
		t.Helper()
		n, err := objects.Get[*corev1.Node](ctx, st, "", name)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	getPod := func(name string) *corev1.Pod {
		t.Helper()
		p, err := objects.Get[*corev1.Pod](ctx, st, "default", name)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	synced := func() {
		t.Helper()
		nodes, _, err := objects.List[*corev1.Node](ctx, st, "")
		if err != nil {
			t.Fatal(err)
		}
		pods, _, err := objects.List[*corev1.Pod](ctx, st, "")
		if err != nil {
			t.Fatal(err)
		}
		latest := func(objs ...objects.Object) (r int64) {
			for _, o := range objs {
				r = max(r, objects.Revision(o))
			}
			return r
		}
		var all []objects.Object
		for _, p := range pods {
			all = append(all, p)
		}
		podRev := latest(all...)
		nodeRev := latest(nodes[0], nodes[1])
		raftstoretest.WaitFor(t, 10*time.Second, "the informers to catch up", func() bool {
			return c.nodes.Revision() >= nodeRev && c.pods.Revision() >= podRev && len(c.pods.List("")) == 5
		})
	}
	evicted := func() map[string]bool {
		out := map[string]bool{}
		for _, name := range []string{"intolerant", "short", "default", "forever", "elsewhere"} {
			p := getPod(name)
			if p.GetMetadata().GetDeletionTimestamp() != nil {
				d := podrules.PodCondition(p.GetStatus(), DisruptionTarget)
				if d.GetStatus() != "True" || d.GetReason() != ReasonDeletionByTaintManager || d.GetMessage() != MessageDeletionByTaint {
					t.Errorf("%s deleted with DisruptionTarget %v", name, d)
				}
				out[name] = true
			}
		}
		return out
	}
	pass := func(at time.Duration) map[string]bool {
		t.Helper()
		// The live node's agent heartbeats.
		if _, err := objects.Mutate(ctx, st, "", "alive", func(n *corev1.Node) error {
			n.Status = node("alive", t0.Add(at)).Status
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		synced()
		now = t0.Add(at)
		if err := c.Pass(ctx); err != nil {
			t.Fatal(err)
		}
		return evicted()
	}

	got := pass(0)
	dead := getNode("dead")
	for _, typ := range []string{"Ready", "MemoryPressure"} {
		cond := podrules.NodeCondition(dead, typ)
		if cond.GetStatus() != "Unknown" || cond.GetReason() != ReasonNodeStatusUnknown || cond.GetMessage() != MessageStoppedPosting {
			t.Errorf("dead node's %s: %v", typ, cond)
		}
	}
	var keys []string
	for _, tn := range dead.GetSpec().GetTaints() {
		keys = append(keys, tn.GetKey()+":"+tn.GetEffect())
		if managed(tn) && !tn.GetTimeAdded().AsTime().Equal(t0) {
			t.Errorf("taint %v added at %v, want %v", tn, tn.GetTimeAdded().AsTime(), t0)
		}
	}
	if want := "dedicated:NoSchedule " + TaintNodeUnreachable + ":NoExecute " + TaintNodeUnreachable + ":NoSchedule"; joined(keys) != want {
		t.Errorf("dead node's taints %q, want %q", joined(keys), want)
	}
	for _, name := range []string{"short", "default", "forever"} {
		if podrules.IsPodReady(getPod(name)) {
			t.Errorf("pod %s on the dead node is still Ready", name)
		}
	}
	alive := getNode("alive")
	if podrules.NodeCondition(alive, "Ready").GetStatus() != "True" || len(alive.GetSpec().GetTaints()) != 1 || !podrules.IsPodReady(getPod("elsewhere")) {
		t.Errorf("the live node or its pod changed: %v, %v", alive, getPod("elsewhere").GetStatus())
	}
	if !got["intolerant"] || len(got) != 1 {
		t.Fatalf("evicted at once: %v, want only the pod without a toleration", got)
	}
	if ty := pub.Types(); len(ty) != 1 || ty[0] != "PodDeleteRequested" {
		t.Fatalf("published %v, want one PodDeleteRequested for the node", ty)
	}
	if got := pass(4 * time.Second); len(got) != 1 {
		t.Fatalf("after 4 s evicted %v", got)
	}
	if got := pass(6 * time.Second); !got["short"] || len(got) != 2 {
		t.Fatalf("after 6 s evicted %v, want the 5 s toleration's pod too", got)
	}
	if got := pass(299 * time.Second); len(got) != 2 {
		t.Fatalf("after 299 s evicted %v", got)
	}
	if got := pass(301 * time.Second); !got["default"] || got["forever"] || got["elsewhere"] {
		t.Fatalf("after 301 s evicted %v, want the default's pod, never the one tolerating forever nor the live node's", got)
	}

	// The node heartbeats again: Ready, untainted but for its own taint.
	if _, err := objects.Mutate(ctx, st, "", "dead", func(n *corev1.Node) error {
		n.Status = node("dead", t0.Add(302*time.Second)).Status
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	pass(303 * time.Second)
	if ts := getNode("dead").GetSpec().GetTaints(); len(ts) != 1 || ts[0].GetKey() != "dedicated" {
		t.Fatalf("a node back to Ready keeps taints %v", ts)
	}
}

func joined(s []string) string {
	out := ""
	for i, x := range s {
		if i > 0 {
			out += " "
		}
		out += x
	}
	return out
}

// TestEvictionTime: kube's taint manager's arithmetic.
func TestEvictionTime(t *testing.T) {
	t0 := time.Unix(1000, 0)
	unreach := &corev1.Taint{Key: TaintNodeUnreachable, Effect: EffectNoExecute, TimeAdded: timestamppb.New(t0)}
	other := &corev1.Taint{Key: "gpu", Value: "x", Effect: EffectNoExecute, TimeAdded: timestamppb.New(t0.Add(time.Minute))}
	sched := &corev1.Taint{Key: "s", Effect: EffectNoSchedule}
	for _, tc := range []struct {
		name   string
		tols   []*corev1.Toleration
		taints []*corev1.Taint
		at     time.Time
		ok     bool
	}{
		{"no NoExecute taint", nil, []*corev1.Taint{sched}, time.Time{}, false},
		{"not tolerated", nil, []*corev1.Taint{unreach}, time.Time{}, true},
		{"one of two not tolerated", []*corev1.Toleration{tolerate(TaintNodeUnreachable, 30)}, []*corev1.Taint{unreach, other}, time.Time{}, true},
		{"tolerated 30 s", []*corev1.Toleration{tolerate(TaintNodeUnreachable, 30)}, []*corev1.Taint{unreach}, t0.Add(30 * time.Second), true},
		{"smallest of matching", []*corev1.Toleration{tolerate(TaintNodeUnreachable, 30), tolerate("", 10)}, []*corev1.Taint{unreach}, t0.Add(10 * time.Second), true},
		{"forever", []*corev1.Toleration{tolerate(TaintNodeUnreachable)}, []*corev1.Taint{unreach}, time.Time{}, false},
		{"negative is now", []*corev1.Toleration{tolerate(TaintNodeUnreachable, -5)}, []*corev1.Taint{unreach}, t0, true},
		{"earliest taint", []*corev1.Toleration{{Operator: "Exists", Effect: EffectNoExecute, TolerationSeconds: proto.Int64(60)}}, []*corev1.Taint{other, unreach}, t0.Add(time.Minute), true},
		{"Equal needs the value", []*corev1.Toleration{{Key: "gpu", Value: "y", Effect: EffectNoExecute}}, []*corev1.Taint{other}, time.Time{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			at, ok := EvictionTime(tc.tols, tc.taints)
			if ok != tc.ok || !at.Equal(tc.at) {
				t.Fatalf("EvictionTime = %v, %v; want %v, %v", at, ok, tc.at, tc.ok)
			}
		})
	}
}

// countingKV counts a real store's Gets by key and Lists by prefix.
type countingKV struct {
	objects.KV
	mu    sync.Mutex
	gets  map[string]int
	lists map[string]int
}

func newCountingKV(kv objects.KV) *countingKV {
	return &countingKV{KV: kv, gets: map[string]int{}, lists: map[string]int{}}
}

func (c *countingKV) Get(ctx context.Context, key string, opts ...raftstore.ReadOption) (*raftstore.KV, error) {
	c.mu.Lock()
	c.gets[key]++
	c.mu.Unlock()
	return c.KV.Get(ctx, key, opts...)
}

func (c *countingKV) List(ctx context.Context, prefix string, opts ...raftstore.ReadOption) ([]*raftstore.KV, int64, error) {
	c.mu.Lock()
	c.lists[prefix]++
	c.mu.Unlock()
	return c.KV.List(ctx, prefix, opts...)
}

// take returns the Gets of key since the last take of it.
func (c *countingKV) take(key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.gets[key]
	delete(c.gets, key)
	return n
}

// takeLists returns the Lists of prefix since the last takeLists of it.
func (c *countingKV) takeLists(prefix string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.lists[prefix]
	delete(c.lists, prefix)
	return n
}

// testConfig is DefaultConfig for a test that calls Pass itself: the
// controller's own passes come only once a grace period (40 s) has gone,
// after such a test has ended, so they neither race with its clock nor
// add to the store requests it counts.
func testConfig() Config {
	cfg := DefaultConfig()
	cfg.MonitorPeriod = cfg.GracePeriod
	return cfg
}

// nodeLease is node's Lease in kube-node-lease renewed at renewed, as
// the node agents write it (ops/processes/nodewire).
func nodeLease(node string, renewed time.Time) *corev1.Unstructured {
	lease := objects.Leases.New().(*corev1.Unstructured)
	lease.Metadata = &corev1.ObjectMeta{Name: node, Namespace: NodeLeaseNamespace, Uid: "lease-" + node, CreationTimestamp: timestamppb.New(renewed)}
	lease.Content = []byte(`{"spec":{"holderIdentity":"` + node + `","leaseDurationSeconds":40,"renewTime":"` +
		renewed.UTC().Format("2006-01-02T15:04:05.000000Z07:00") + `"}}`)
	return lease
}

// renewLease renews node's Lease at renewed in the store, as its agent
// does, and returns the revision written.
func renewLease(ctx context.Context, t *testing.T, st *objects.Store, node string, renewed time.Time) int64 {
	t.Helper()
	obj, err := st.GetKind(ctx, objects.Leases, NodeLeaseNamespace, node)
	if err != nil {
		t.Fatal(err)
	}
	l := obj.(*corev1.Unstructured)
	l.Content = nodeLease(node, renewed).Content
	rev, err := st.Update(ctx, l)
	if err != nil {
		t.Fatal(err)
	}
	return rev
}

// TestLeaseKeepsANodeAlive: a node whose status has not changed for five
// minutes (kubelet's nodeStatusReportFrequency) but whose Lease in
// kube-node-lease its agent renewed is alive (kubelet writes its status
// only on a change or every 5 minutes, and renews its Lease every 10 s);
// a renewal keeps it alive for another grace period; once the Lease too
// is older than the grace period, it goes Unknown. As kube's
// tryUpdateNodeHealth with its leaseLister, a pass decides on the
// informers' copies: it lists no Lease, and reads neither a live node nor
// its Lease from the store; only a node about to be written is read, with
// its Lease.
func TestLeaseKeepsANodeAlive(t *testing.T) {
	cl := raftstoretest.MakeCluster(t, 1)
	kv := newCountingKV(objects.RaftKV(cl.Client(t)))
	st := objects.FromKV(kv)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	t0 := time.Now()
	if _, err := st.Create(ctx, node("quiet", t0.Add(-5*time.Minute))); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Create(ctx, nodeLease("quiet", t0)); err != nil {
		t.Fatal(err)
	}
	c, err := New(stage.Env{Store: st, Pub: &stagetest.Publisher{}, Stage: "nodelifecycle", Replica: "t"}, testConfig())
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	g, gctx := errgroup.WithContext(runCtx)
	if err := c.Start(gctx, g); err != nil {
		t.Fatal(err)
	}
	defer func() { stop(); _ = g.Wait() }()
	raftstoretest.WaitFor(t, 10*time.Second, "the informer to see the node", func() bool { return len(c.nodes.List("")) == 1 })
	ready := func(at time.Duration) string {
		t.Helper()
		c.now = func() time.Time { return t0.Add(at) }
		if err := c.Pass(ctx); err != nil {
			t.Fatal(err)
		}
		n, err := objects.Get[*corev1.Node](ctx, st, "", "quiet")
		if err != nil {
			t.Fatal(err)
		}
		return podrules.NodeCondition(n, "Ready").GetStatus()
	}
	key := objects.Nodes.Key("", "quiet")
	leaseKey := objects.Leases.Key(NodeLeaseNamespace, "quiet")
	leases := objects.Leases.Prefix(NodeLeaseNamespace)
	reads := func(what string, wantNode, wantLease int) {
		t.Helper()
		if got := kv.take(key) - 1; got != wantNode { // less the test's own read
			t.Errorf("%s: the pass read the node %d times, want %d", what, got, wantNode)
		}
		if got := kv.take(leaseKey); got != wantLease {
			t.Errorf("%s: the pass read the node's Lease %d times, want %d", what, got, wantLease)
		}
		if got := kv.takeLists(leases); got != 0 {
			t.Errorf("%s: the pass listed the node Leases %d times, want 0", what, got)
		}
	}
	kv.take(key)
	kv.take(leaseKey)
	kv.takeLists(leases)
	if got := ready(time.Second); got != "True" {
		t.Fatalf("a node with a fresh Lease is %s", got)
	}
	reads("a live node", 0, 0)

	// Its agent renews the Lease at 30 s: alive at 60 s, 60 s after the
	// first renewal.
	rev := renewLease(ctx, t, st, "quiet", t0.Add(30*time.Second))
	kv.take(leaseKey)
	raftstoretest.WaitFor(t, 10*time.Second, "the Lease informer to see the renewal", func() bool { return c.leaseInf.Revision() >= rev })
	if got := ready(60 * time.Second); got != "True" {
		t.Fatalf("a node whose Lease was renewed 30 s ago is %s", got)
	}
	reads("a renewed node", 0, 0)

	if got := ready(71 * time.Second); got != "Unknown" {
		t.Fatalf("a node whose Lease is 41 s old is %s", got)
	}
	reads("a node gone silent", 1, 1)
}

// TestLeaseReadFreshBeforeWriting: a pass whose Lease informer is behind
// (here, it still holds a renewal older than the grace period) reads the
// node's Lease from the store before marking it Unknown, and leaves a
// node whose fresh Lease is renewed untouched, as kube decides on the
// lister and writes on a fresh read.
func TestLeaseReadFreshBeforeWriting(t *testing.T) {
	cl := raftstoretest.MakeCluster(t, 1)
	st := objects.New(cl.Client(t))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	t0 := time.Now()
	nodeRev, err := st.Create(ctx, node("busy", t0.Add(-5*time.Minute)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Create(ctx, nodeLease("busy", t0)); err != nil {
		t.Fatal(err)
	}
	c, err := New(stage.Env{Store: st, Pub: &stagetest.Publisher{}, Stage: "nodelifecycle", Replica: "t"}, testConfig())
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	g, gctx := errgroup.WithContext(runCtx)
	if err := c.Start(gctx, g); err != nil {
		t.Fatal(err)
	}
	defer func() { stop(); _ = g.Wait() }()
	// The informer holds the renewal at t0; the store gets one at t0+50s
	// that the informer is made not to have seen.
	renewLease(ctx, t, st, "busy", t0.Add(50*time.Second))
	raftstoretest.WaitFor(t, 10*time.Second, "the Lease informer to see the renewal", func() bool {
		got, _ := c.renewals.get("busy")
		return got.After(t0)
	})
	c.renewals.mu.Lock()
	c.renewals.m["busy"] = t0
	c.renewals.mu.Unlock()
	c.now = func() time.Time { return t0.Add(60 * time.Second) }
	if err := c.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	n, err := objects.Get[*corev1.Node](ctx, st, "", "busy")
	if err != nil {
		t.Fatal(err)
	}
	if got := podrules.NodeCondition(n, "Ready").GetStatus(); got != "True" || objects.Revision(n) != nodeRev {
		t.Fatalf("a node whose Lease the store has renewed 10 s ago is %s (revision %d, was %d)", got, objects.Revision(n), nodeRev)
	}
}

// TestNeedsWriteIsHealthChanged: needsWrite, which decides on the
// informer's node without copying it, says a write is needed exactly when
// health changes a copy — on random nodes: each monitored condition
// True, False, Unknown or missing, heartbeats and Lease renewals fresh
// or past the grace period, managed taints of either key and effect
// (twice, sometimes) beside the node's own.
func TestNeedsWriteIsHealthChanged(t *testing.T) {
	r := rand.New(rand.NewPCG(41, 3))
	c := &Controller{cfg: DefaultConfig()}
	now := time.Unix(10_000, 0)
	statuses := []string{podrules.ConditionTrue, podrules.ConditionFalse, podrules.ConditionUnknown, ""}
	ages := []time.Duration{time.Second, 39 * time.Second, 41 * time.Second, time.Hour}
	taints := []*corev1.Taint{
		{Key: TaintNodeNotReady, Effect: EffectNoExecute}, {Key: TaintNodeNotReady, Effect: EffectNoSchedule},
		{Key: TaintNodeUnreachable, Effect: EffectNoExecute}, {Key: TaintNodeUnreachable, Effect: EffectNoSchedule},
		{Key: TaintNodeUnreachable, Effect: "PreferNoSchedule"}, {Key: "dedicated", Value: "ml", Effect: EffectNoExecute},
	}
	writes := 0
	for i := range 5000 {
		n := &corev1.Node{Metadata: &corev1.ObjectMeta{Name: "n", CreationTimestamp: timestamppb.New(now.Add(-time.Hour))},
			Spec: &corev1.NodeSpec{}, Status: &corev1.NodeStatus{}}
		if r.IntN(10) == 0 {
			n.Spec, n.Status = nil, nil
		}
		for _, typ := range monitoredConditions {
			st := statuses[r.IntN(len(statuses))]
			if st == "" || n.Status == nil {
				continue
			}
			n.Status.Conditions = append(n.Status.Conditions, &corev1.NodeCondition{Type: typ, Status: st,
				LastHeartbeatTime: timestamppb.New(now.Add(-ages[r.IntN(len(ages))]))})
		}
		for range r.IntN(4) {
			if n.Spec != nil {
				n.Spec.Taints = append(n.Spec.Taints, taints[r.IntN(len(taints))].CloneVT())
			}
		}
		renewed, leased := now.Add(-ages[r.IntN(len(ages))]), r.IntN(2) == 0
		leases := func(string) (time.Time, bool) { return renewed, leased }
		before := n.CloneVT()
		need := c.needsWrite(n, now, leases)
		if !proto.Equal(n, before) {
			t.Fatalf("node %d: needsWrite changed the node", i)
		}
		_, changed := c.health(n.CloneVT(), now, leases)
		if need != changed {
			t.Fatalf("node %d: needsWrite %v, health changed %v: %v (lease %v %v)", i, need, changed, n, renewed, leased)
		}
		if need {
			writes++
		}
	}
	if writes < 300 || writes > 4700 {
		t.Fatalf("%d of 5000 random nodes needed a write: the test does not exercise both answers", writes)
	}
}
