package raftstore_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/raftstore/raftstoretest"
)

// TestStatusCounters: the request, watch and log counters every replica
// reports in its status count what the cluster served: 5 writes, 3
// linearizable and 2 stale reads, one watch that received 5 events, and at
// least 5 log entries on every replica in fewer or as many appends.
func TestStatusCounters(t *testing.T) {
	c := raftstoretest.MakeCluster(t, 3)
	cl := c.Client(t)
	ctx := testCtx(t)
	w, err := cl.Watch(ctx, "/counted/", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	for i := range 5 {
		if _, err := cl.Create(ctx, fmt.Sprintf("/counted/%d", i), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	collect(t, w, 5)
	for i := range 3 {
		if _, err := cl.Get(ctx, fmt.Sprintf("/counted/%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 2 {
		if _, err := cl.Get(ctx, fmt.Sprintf("/counted/%d", i), raftstore.Stale()); err != nil {
			t.Fatal(err)
		}
	}
	c.WaitForReplication(t)
	sts, err := cl.Status(ctx, time.Second)
	if err != nil || len(sts) != 3 {
		t.Fatalf("status: %v (%d replicas)", err, len(sts))
	}
	var sum raftstore.Counters
	for _, s := range sts {
		sum.WriteRequests += s.WriteRequests
		sum.ReadRequests += s.ReadRequests
		sum.StaleReadRequests += s.StaleReadRequests
		sum.WatchRequests += s.WatchRequests
		sum.WatchEventsSent += s.WatchEventsSent
		if s.LogEntriesWritten < 5 || s.LogAppends < 1 || s.LogAppends > s.LogEntriesWritten {
			t.Errorf("replica %s: %d log entries in %d appends, want ≥ 5 entries in 1..entries appends", s.ID, s.LogEntriesWritten, s.LogAppends)
		}
	}
	// A stable cluster: no retries, so the counts are exact.
	want := raftstore.Counters{WriteRequests: 5, ReadRequests: 3, StaleReadRequests: 2, WatchRequests: 1, WatchEventsSent: 5}
	sum.LogAppends, sum.LogEntriesWritten = 0, 0
	if sum != want {
		t.Fatalf("summed counters %+v, want %+v", sum, want)
	}
}

// TestStatusWithHash: after replication every replica reports one
// revision and one content hash; the plain Status carries none.
func TestStatusWithHash(t *testing.T) {
	c := raftstoretest.MakeCluster(t, 3)
	cl := c.Client(t)
	ctx := testCtx(t)
	for i := range 5 {
		if _, err := cl.Create(ctx, fmt.Sprintf("/hashed/%d", i), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	c.WaitForReplication(t)
	sts, err := cl.StatusWithHash(ctx, time.Second)
	if err != nil || len(sts) != 3 {
		t.Fatalf("status: %v (%d replicas)", err, len(sts))
	}
	for _, s := range sts {
		if s.ContentHash == 0 || s.ContentHash != sts[0].ContentHash || s.ContentHashRevision != sts[0].ContentHashRevision || s.ContentHashRevision < 5 {
			t.Fatalf("replica %s: hash %x at %d, replica %s: %x at %d", s.ID, s.ContentHash, s.ContentHashRevision, sts[0].ID, sts[0].ContentHash, sts[0].ContentHashRevision)
		}
	}
	plain, err := cl.Status(ctx, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range plain {
		if s.ContentHash != 0 {
			t.Fatalf("plain status of %s carries a hash %x", s.ID, s.ContentHash)
		}
	}
}
