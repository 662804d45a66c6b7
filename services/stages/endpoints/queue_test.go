package endpoints

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/podflow/podflow/proto/corev1"
)

func keysOf(items []queued) []serviceKey {
	var out []serviceKey
	for _, it := range items {
		out = append(out, it.serviceKey)
	}
	return out
}

func TestServiceQueue(t *testing.T) {
	q := newServiceQueue()
	q.add("default", "before-open") // the informer's initial list: Reconcile's
	q.open()
	for _, n := range []string{"web", "db", "web", "web"} {
		q.add("default", n)
	}
	items, ok := q.take(context.Background())
	if want := []serviceKey{{"default", "web"}, {"default", "db"}}; !ok || !slices.Equal(keysOf(items), want) {
		t.Fatalf("take = %v %v, want %v: each once, in first-queued order, none from before open", items, ok, want)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if items, ok := q.take(ctx); ok {
		t.Errorf("take on an empty queue and a done ctx = %v, want false", items)
	}
	q.add("default", "web")
	if items, _ := q.take(context.Background()); !slices.Equal(keysOf(items), []serviceKey{{"default", "web"}}) {
		t.Errorf("after a take, a key queues again: got %v", items)
	}
}

// TestServiceQueueCauses: the pods that queued a Service are kept with
// it, once each, at their latest state and first time.
func TestServiceQueueCauses(t *testing.T) {
	q := newServiceQueue()
	q.open()
	p := func(uid, rv string) *corev1.Pod {
		return &corev1.Pod{Metadata: &corev1.ObjectMeta{Uid: uid, ResourceVersion: rv}}
	}
	t0 := time.Unix(100, 0)
	q.add("default", "web", cause{pod: p("a", "1"), at: t0})
	q.add("default", "web")
	q.add("default", "web", cause{pod: p("b", "2"), at: t0.Add(time.Second)}, cause{pod: p("a", "3"), at: t0.Add(2 * time.Second)})
	items, _ := q.take(context.Background())
	if len(items) != 1 || len(items[0].causes) != 2 {
		t.Fatalf("take = %v, want web caused by a and b", items)
	}
	a, b := items[0].causes[0], items[0].causes[1]
	if a.pod.GetMetadata().GetResourceVersion() != "3" || !a.at.Equal(t0) || b.pod.GetMetadata().GetUid() != "b" {
		t.Errorf("causes %v, want a at its latest state (3) and first time, then b", items[0].causes)
	}
}
