package raftstore

import "testing"

// TestContentHash: two state machines that applied the same writes hash
// equal at the same revision, one whose value differs at that revision (a
// diverged replica) or whose key is missing hashes differently, and the
// hash moves with every write.
func TestContentHash(t *testing.T) {
	a, b, c := newFSM(100, 0, 100), newFSM(100, 0, 100), newFSM(100, 0, 100)
	for i, f := range []*fsm{a, b, c} {
		apply(t, f, put("/k/1", "one", "w1"))
		v := "two"
		if i == 2 {
			v = "TWO" // the diverged replica: same revision, other value
		}
		apply(t, f, put("/k/2", v, "w2"))
	}
	ha, ra := a.contentHash()
	hb, rb := b.contentHash()
	hc, rc := c.contentHash()
	if ra != 2 || rb != 2 || rc != 2 {
		t.Fatalf("revisions %d %d %d, want 2", ra, rb, rc)
	}
	if ha != hb {
		t.Fatalf("identical replicas hash %x and %x", ha, hb)
	}
	if ha == hc {
		t.Fatalf("a replica with another value at revision 2 hashes equal (%x)", ha)
	}
	// Same values under other revisions: the revisions are hashed too.
	d := newFSM(100, 0, 100)
	apply(t, d, put("/k/2", "two", "w2"))
	apply(t, d, put("/k/1", "one", "w1"))
	if hd, _ := d.contentHash(); hd == ha {
		t.Fatalf("keys written in another order (other revisions) hash equal (%x)", ha)
	}
	apply(t, a, put("/k/3", "three", "w3"))
	if h, r := a.contentHash(); h == ha || r != 3 {
		t.Fatalf("after a write: hash %x rev %d, before %x rev 2", h, r, ha)
	}
}
