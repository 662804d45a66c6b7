package endpoints

import (
	"context"
	"slices"
	"testing"
)

func TestServiceQueue(t *testing.T) {
	q := newServiceQueue()
	q.add("default", "before-open") // the informer's initial list: Reconcile's
	q.open()
	for _, n := range []string{"web", "db", "web", "web"} {
		q.add("default", n)
	}
	keys, ok := q.take(context.Background())
	if want := []serviceKey{{"default", "web"}, {"default", "db"}}; !ok || !slices.Equal(keys, want) {
		t.Fatalf("take = %v %v, want %v: each once, in first-queued order, none from before open", keys, ok, want)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if keys, ok := q.take(ctx); ok {
		t.Errorf("take on an empty queue and a done ctx = %v, want false", keys)
	}
	q.add("default", "web")
	if keys, _ := q.take(context.Background()); !slices.Equal(keys, []serviceKey{{"default", "web"}}) {
		t.Errorf("after a take, a key queues again: got %v", keys)
	}
}
