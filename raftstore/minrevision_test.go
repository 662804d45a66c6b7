package raftstore_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/raftstore/raftstoretest"
)

// TestStaleReadAtMinRevision: a stale read with MinRevision is served only
// by a replica that has applied that revision, so read right after a write
// it always sees the write (followers apply after the leader answers, and
// any replica may serve a stale read); one far ahead of the store ends in
// ErrUnavailable, not a stale answer.
func TestStaleReadAtMinRevision(t *testing.T) {
	c := raftstoretest.MakeCluster(t, 3)
	cl := c.Client(t)
	ctx := testCtx(t)
	const key = "/registry/configmaps/default/min"
	rev, err := cl.Create(ctx, key, []byte("0"))
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 200; i++ {
		want := fmt.Sprint(i)
		if rev, err = cl.Update(ctx, key, []byte(want), rev); err != nil {
			t.Fatal(err)
		}
		kv, err := cl.Get(ctx, key, raftstore.Stale(), raftstore.MinRevision(rev))
		if err != nil {
			t.Fatalf("stale read %d at revision %d: %v", i, rev, err)
		}
		if string(kv.Value) != want || kv.ModRevision != rev {
			t.Fatalf("stale read %d at revision %d saw %q at %d: a replica behind answered", i, rev, kv.Value, kv.ModRevision)
		}
	}
	kvs, listRev, err := cl.List(ctx, "/registry/configmaps/", raftstore.Stale(), raftstore.MinRevision(rev))
	if err != nil || len(kvs) != 1 || listRev < rev {
		t.Fatalf("stale list at revision %d: %d keys at %d, %v", rev, len(kvs), listRev, err)
	}

	fctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if _, err := cl.Get(fctx, key, raftstore.Stale(), raftstore.MinRevision(rev+1000)); !errors.Is(err, raftstore.ErrUnavailable) {
		t.Fatalf("stale read at a revision the store has not reached: %v, want ErrUnavailable", err)
	}
}
