package controller

import (
	"testing"
	"time"
)

func TestGoneNames(t *testing.T) {
	g := NewGoneNames(time.Minute)
	t0 := time.Unix(1000, 0)
	g.Add("ns", "a", t0)
	if !g.Has("ns", "a", t0.Add(59*time.Second)) {
		t.Fatal("a name gone 59s ago is forgotten (ttl 1m)")
	}
	if g.Has("other", "a", t0) || g.Has("ns", "b", t0) {
		t.Fatal("a name never gone is remembered")
	}
	if g.Has("ns", "a", t0.Add(time.Minute)) {
		t.Fatal("a name gone a ttl ago is still remembered")
	}
	// Gone again later: the newer time counts, and expiring the older
	// entry keeps it.
	g.Add("ns", "a", t0.Add(50*time.Second))
	g.Add("ns", "b", t0.Add(61*time.Second))
	if !g.Has("ns", "a", t0.Add(100*time.Second)) || g.Len() != 2 {
		t.Fatalf("a name gone twice: has %v, %d names", g.Has("ns", "a", t0.Add(100*time.Second)), g.Len())
	}
	// Adding expires what is older than the ttl: memory stays bounded.
	g.Add("ns", "c", t0.Add(200*time.Second))
	if g.Len() != 1 || len(g.order) != 1 {
		t.Fatalf("%d names, %d in order after all but one expired", g.Len(), len(g.order))
	}
}
