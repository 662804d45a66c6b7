package events

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/podrules"
	"github.com/podflow/podflow/raftstore/raftstoretest"
	"github.com/podflow/podflow/services/objects"
)

// TestCollect: against a real 3-replica store, Events last seen before the
// TTL are deleted — across several pages, by two collectors at once, each
// Event once — and Events seen since, even if first seen long ago, stay.
func TestCollect(t *testing.T) {
	old := collectPage
	collectPage = 7 // several pages
	t.Cleanup(func() { collectPage = old })

	cl := raftstoretest.MakeCluster(t, 3)
	st := objects.New(cl.Client(t))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	now := time.Now()
	at := func(d time.Duration) func() time.Time { return func() time.Time { return now.Add(d) } }
	pod := func(ns, name string) *corev1.ObjectReference {
		return &corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: name, Uid: "uid-" + name}
	}
	oldRec := &Recorder{Store: st, Component: "kubelet", Now: at(-2 * time.Hour)}
	freshRec := &Recorder{Store: st, Component: "kubelet", Now: at(-10 * time.Minute)}
	const expired = 20
	for i := range expired {
		ns := []string{"default", "kube-system", "team-a"}[i%3]
		if err := oldRec.Record(ctx, pod(ns, fmt.Sprintf("old-%02d", i)), podrules.EventNormal, "Pulled", "pulled", ""); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 5 {
		if err := freshRec.Record(ctx, pod("default", fmt.Sprintf("fresh-%d", i)), podrules.EventNormal, "Started", "started", ""); err != nil {
			t.Fatal(err)
		}
	}
	// First seen two hours ago, seen again ten minutes ago: it stays.
	again := pod("default", "again")
	if err := oldRec.Record(ctx, again, podrules.EventWarning, "BackOff", "back-off", "c1"); err != nil {
		t.Fatal(err)
	}
	if err := freshRec.Record(ctx, again, podrules.EventWarning, "BackOff", "back-off", "c2"); err != nil {
		t.Fatal(err)
	}

	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		total int
	)
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n, err := Collect(ctx, st, time.Hour, now)
			if err != nil {
				t.Error(err)
			}
			mu.Lock()
			total += n
			mu.Unlock()
		}()
	}
	wg.Wait()
	if total != expired {
		t.Errorf("the collectors deleted %d Events together, want each of the %d expired ones once", total, expired)
	}
	left, _, err := objects.List[*corev1.Event](ctx, st, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 6 {
		t.Errorf("%d Events left, want the 5 fresh ones and the one seen again", len(left))
	}
	for _, e := range left {
		if now.Sub(LastSeen(e)) > time.Hour {
			t.Errorf("expired Event %s/%s left", e.GetMetadata().GetNamespace(), e.GetMetadata().GetName())
		}
	}
	if n, err := Collect(ctx, st, time.Hour, now); err != nil || n != 0 {
		t.Errorf("a second collection deleted %d (%v), want 0", n, err)
	}
	if _, err := Collect(ctx, st, 0, now); err == nil {
		t.Error("a zero TTL was accepted")
	}
}
