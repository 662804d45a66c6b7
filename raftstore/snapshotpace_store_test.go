package raftstore_test

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/raftstore/raftstoretest"
)

// TestSnapshotsPacedByState: a replica holding large values that then
// takes many small writes raises its snapshot threshold above the
// configured one, so that it does not rewrite the whole state every
// Config.SnapshotThreshold entries. Without the pacing the threshold
// stays at 64.
func TestSnapshotsPacedByState(t *testing.T) {
	const base = 64
	c := raftstoretest.MakeCluster(t, 1, func(cfg *raftstore.Config) {
		cfg.SnapshotThreshold = base
		cfg.SnapshotInterval = 20 * time.Millisecond
	})
	cl := c.Client(t)
	ctx := testCtx(t)
	big := bytes.Repeat([]byte("p"), 8<<10)
	for i := range 40 {
		if _, err := cl.Create(ctx, fmt.Sprintf("/registry/configmaps/default/big-%02d", i), big); err != nil {
			t.Fatal(err)
		}
	}
	rev, err := cl.Create(ctx, "/registry/leases/kube-node-lease/n1", []byte("0"))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 400 {
		if rev, err = cl.Update(ctx, "/registry/leases/kube-node-lease/n1", []byte(fmt.Sprint(i)), rev); err != nil {
			t.Fatal(err)
		}
	}
	// ~650 KB of state (values and their history) over ~440 entries of
	// ~850 bytes on average: about 750 entries between snapshots.
	deadline := time.Now().Add(20 * time.Second)
	for {
		got := c.Node(0).Stats().SnapshotThreshold
		if got >= 4*base {
			if got > 1<<20 {
				t.Fatalf("snapshot threshold %d, above the cap", got)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("snapshot threshold still %d after 20s, want ≥ %d: paced by the state's size", got, 4*base)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
