package status

import (
	"context"
	"errors"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/podrules"
	"github.com/podflow/podflow/raftstore/raftstoretest"
	"github.com/podflow/podflow/services/events"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/stage"
)

func node(name string, heartbeat time.Time) *corev1.Node {
	return &corev1.Node{
		Metadata: &corev1.ObjectMeta{Name: name},
		Status: &corev1.NodeStatus{Conditions: []*corev1.NodeCondition{{
			Type: "Ready", Status: "True", LastHeartbeatTime: timestamppb.New(heartbeat),
		}}},
	}
}

// TestSilentNodeMarkedNotReady: against a real 3-replica store, a node
// whose heartbeats stopped longer than the grace period ago is marked
// Ready=Unknown (NodeStatusUnknown), and a node that heartbeats is not.
func TestSilentNodeMarkedNotReady(t *testing.T) {
	cl := raftstoretest.MakeCluster(t, 3)
	st := objects.New(cl.Client(t))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	now := time.Now()
	for _, n := range []*corev1.Node{node("silent", now.Add(-time.Minute)), node("alive", now.Add(-time.Second))} {
		if _, err := st.Create(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	cfg := DefaultConfig()
	cfg.NodeMonitorGracePeriod = 40 * time.Second
	s, err := NewStage(stage.Env{Store: st, Stage: "status", Replica: "status-test"}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	s.now = func() time.Time { return now }
	runCtx, stop := context.WithCancel(ctx)
	g, gctx := errgroup.WithContext(runCtx)
	if err := s.Start(gctx, g); err != nil {
		t.Fatal(err)
	}
	defer func() {
		stop()
		if err := g.Wait(); err != nil && !errors.Is(err, context.Canceled) {
			t.Error(err)
		}
	}()
	raftstoretest.WaitFor(t, 10*time.Second, "the informer to see both nodes", func() bool { return len(s.nodes.List("")) == 2 })
	if err := s.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	// Reconciling again changes nothing (idempotent).
	if err := s.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	silent, err := objects.Get[*corev1.Node](ctx, st, "", "silent")
	if err != nil {
		t.Fatal(err)
	}
	c := podrules.NodeCondition(silent, "Ready")
	if c.GetStatus() != "Unknown" || c.GetReason() != "NodeStatusUnknown" || c.GetMessage() != "Kubelet stopped posting node status." {
		t.Fatalf("silent node Ready condition %v", c)
	}
	alive, err := objects.Get[*corev1.Node](ctx, st, "", "alive")
	if err != nil {
		t.Fatal(err)
	}
	if podrules.NodeCondition(alive, "Ready").GetStatus() != "True" {
		t.Fatalf("a heartbeating node was marked %v", podrules.NodeCondition(alive, "Ready"))
	}
}

// TestReconcileCollectsEvents: reconciliation deletes Events older than
// EventTTL, at most once per EventCollectInterval.
func TestReconcileCollectsEvents(t *testing.T) {
	cl := raftstoretest.MakeCluster(t, 1)
	st := objects.New(cl.Client(t))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	now := time.Now()
	old := &events.Recorder{Store: st, Component: "kubelet", Now: func() time.Time { return now.Add(-2 * time.Hour) }}
	record := func(name string) {
		t.Helper()
		ref := &corev1.ObjectReference{Kind: "Pod", Namespace: "default", Name: name, Uid: "uid-" + name}
		if err := old.Record(ctx, ref, podrules.EventNormal, "Pulled", "pulled", ""); err != nil {
			t.Fatal(err)
		}
	}
	count := func() int {
		t.Helper()
		evs, _, err := objects.List[*corev1.Event](ctx, st, "")
		if err != nil {
			t.Fatal(err)
		}
		return len(evs)
	}
	cfg := DefaultConfig()
	s, err := NewStage(stage.Env{Store: st, Stage: "status", Replica: "status-test"}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	s.now = func() time.Time { return now }
	record("a")
	if err := s.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if n := count(); n != 0 {
		t.Fatalf("%d Events left after reconciling, want the expired one deleted", n)
	}
	record("b")
	if err := s.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if n := count(); n != 1 {
		t.Fatalf("%d Events, want 1: the next collection waits for EventCollectInterval", n)
	}
	s.now = func() time.Time { return now.Add(cfg.EventCollectInterval) }
	if err := s.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if n := count(); n != 0 {
		t.Fatalf("%d Events left, want the expired one deleted an interval later", n)
	}
}
