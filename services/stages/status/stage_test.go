package status

import (
	"context"
	"testing"
	"time"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/podrules"
	"github.com/podflow/podflow/raftstore/raftstoretest"
	"github.com/podflow/podflow/services/events"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/stage"
)

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
