package raftstore

import (
	"bytes"
	"testing"

	"github.com/hashicorp/raft"
)

// TestLogCacheBoundedInBytes: the cache of recent log entries holds at
// most its bytes (raft's own cache counts entries only: 4,096 entries of
// 1 MiB each were 4 GiB on every replica); evicted entries are read from
// the store, the recent ones from memory, and a delete empties it.
func TestLogCacheBoundedInBytes(t *testing.T) {
	store := raft.NewInmemStore()
	const entry = 1000
	maxBytes := 10 * (entry + logEntryOverhead)
	c, err := newLogCache(64, maxBytes, store)
	if err != nil {
		t.Fatal(err)
	}
	for i := uint64(1); i <= 100; i++ {
		if err := c.StoreLog(&raft.Log{Index: i, Term: 1, Data: bytes.Repeat([]byte{byte(i)}, entry)}); err != nil {
			t.Fatal(err)
		}
		if c.bytes > maxBytes {
			t.Fatalf("after entry %d the cache holds %d bytes, more than its %d", i, c.bytes, maxBytes)
		}
	}
	cached := 0
	for _, l := range c.ring {
		if l != nil {
			cached++
			if l.Index <= 90 {
				t.Errorf("entry %d is still cached: the oldest should have gone first", l.Index)
			}
		}
	}
	if cached != 10 {
		t.Errorf("%d entries cached, want the 10 newest", cached)
	}
	for _, idx := range []uint64{1, 50, 91, 100} {
		var l raft.Log
		if err := c.GetLog(idx, &l); err != nil || l.Index != idx || l.Data[0] != byte(idx) {
			t.Errorf("GetLog(%d): %v, index %d", idx, err, l.Index)
		}
	}

	// One entry larger than the bound is cached alone, then evicted.
	big := &raft.Log{Index: 101, Term: 1, Data: make([]byte, 2*maxBytes)}
	if err := c.StoreLog(big); err != nil {
		t.Fatal(err)
	}
	if c.bytes != logSize(big) {
		t.Errorf("with an entry over the bound: %d bytes cached, want only its %d", c.bytes, logSize(big))
	}
	if err := c.StoreLog(&raft.Log{Index: 102, Term: 1, Data: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	if c.ring[101%64] != nil {
		t.Error("the oversized entry stayed cached after a newer one")
	}

	if err := c.DeleteRange(95, 102); err != nil {
		t.Fatal(err)
	}
	if c.bytes != 0 || c.oldest != 0 {
		t.Errorf("after DeleteRange: %d bytes, oldest %d", c.bytes, c.oldest)
	}
	var l raft.Log
	if err := c.GetLog(96, &l); err != raft.ErrLogNotFound {
		t.Errorf("GetLog of a deleted entry: %v, want ErrLogNotFound", err)
	}
}
