package nodeagent

import (
	"fmt"
	"testing"
	"time"
)

// TestTombstonesBounded: a tombstone is kept for the TTL and no longer,
// and at most max are kept, the oldest dropped first.
func TestTombstonesBounded(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ts := newTombstones(10*time.Minute, 3)
	ts.add("a", t0)
	ts.prune(t0.Add(10 * time.Minute))
	if !ts.has("a") {
		t.Fatal("tombstone dropped before its TTL")
	}
	ts.prune(t0.Add(10*time.Minute + time.Nanosecond))
	if ts.has("a") {
		t.Fatal("tombstone kept past its TTL")
	}
	for i := range 4 {
		ts.add(fmt.Sprint("u", i), t0.Add(time.Duration(i)*time.Second))
	}
	if ts.len() != 3 || ts.has("u0") || !ts.has("u1") || !ts.has("u3") {
		t.Fatalf("after 4 adds with max 3: len %d, u0 %v u1 %v u3 %v", ts.len(), ts.has("u0"), ts.has("u1"), ts.has("u3"))
	}
	// A uid added again is kept from its later time.
	ts.add("u1", t0.Add(5*time.Minute))
	ts.prune(t0.Add(12 * time.Minute))
	if !ts.has("u1") || ts.has("u2") || ts.len() != 1 {
		t.Fatalf("re-added u1 %v, u2 %v, len %d", ts.has("u1"), ts.has("u2"), ts.len())
	}
}

// TestAgentTombstoneBounds: the agent keeps tombstones ≥ 10 minutes (two
// resyncs if longer) and at most 64k.
func TestAgentTombstoneBounds(t *testing.T) {
	cfg := DefaultConfig("n", "10.244.0.0/24")
	a := &Agent{deleted: agentTombstones(cfg)}
	if a.deleted.ttl < 10*time.Minute || a.deleted.max != 1<<16 {
		t.Fatalf("ttl %s, max %d", a.deleted.ttl, a.deleted.max)
	}
	now := time.Now()
	for i := range maxTombstones + 10 {
		a.deleted.add(fmt.Sprint(i), now)
	}
	if a.deleted.len() != maxTombstones || a.deleted.has("0") || !a.deleted.has(fmt.Sprint(maxTombstones+9)) {
		t.Fatalf("len %d", a.deleted.len())
	}
}
