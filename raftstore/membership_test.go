package raftstore_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/podflow/podflow/proto/storev1"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/raftstore/raftstoretest"
	"google.golang.org/protobuf/proto"
)

func members(t *testing.T, c *raftstoretest.Cluster) []string {
	t.Helper()
	var out []string
	for _, s := range c.Node(c.Leader(t)).Stats().Servers {
		out = append(out, s.ID+"/"+s.Suffrage)
	}
	slices.Sort(out)
	return out
}

func sameState(t *testing.T, c *raftstoretest.Cluster, prefix string, want int) {
	t.Helper()
	c.WaitForReplication(t)
	ref, refRev := c.Node(c.Leader(t)).LocalList(prefix)
	if len(ref) != want {
		t.Fatalf("leader holds %d keys under %q, want %d", len(ref), prefix, want)
	}
	for _, i := range c.Live() {
		got, rev := c.Node(i).LocalList(prefix)
		if rev != refRev || len(got) != len(ref) {
			t.Fatalf("replica %s: %d keys at revision %d, leader %d at %d", c.Node(i).ID(), len(got), rev, len(ref), refRev)
		}
		for j := range got {
			if got[j].Key != ref[j].Key || got[j].ModRevision != ref[j].ModRevision || got[j].CreateRevision != ref[j].CreateRevision || string(got[j].Value) != string(ref[j].Value) {
				t.Fatalf("replica %s: key %d = %+v, leader %+v", c.Node(i).ID(), j, got[j], ref[j])
			}
		}
	}
}

func writeN(t *testing.T, cl *raftstore.Client, prefix string, from, n int) {
	t.Helper()
	ctx := testCtx(t)
	for i := from; i < from+n; i++ {
		if _, err := cl.Create(ctx, fmt.Sprintf("%s%06d", prefix, i), []byte(fmt.Sprint(i))); err != nil {
			t.Fatalf("create %d: %v", i, err)
		}
	}
}

func TestMembership(t *testing.T) {
	c := raftstoretest.MakeCluster(t, 3)
	cl := c.Client(t)
	ctx := testCtx(t)
	writeN(t, cl, "/m/", 0, 50)

	// Add a fourth replica at run time: it joins and catches up.
	r3 := c.Add(t, "r3")
	if got := members(t, c); !slices.Equal(got, []string{"r0/Voter", "r1/Voter", "r2/Voter", "r3/Voter"}) {
		t.Fatalf("members after add = %v", got)
	}
	writeN(t, cl, "/m/", 50, 10)
	sameState(t, c, "/m/", 60)

	// Remove it again.
	if err := cl.RemoveServer(ctx, "r3"); err != nil {
		t.Fatal(err)
	}
	c.Kill(t, r3)
	if got := members(t, c); !slices.Equal(got, []string{"r0/Voter", "r1/Voter", "r2/Voter"}) {
		t.Fatalf("members after remove = %v", got)
	}

	// A replica restarted on its data dir rejoins and catches up.
	follower := (c.Leader(t) + 1) % 3
	c.Kill(t, follower)
	writeN(t, cl, "/m/", 60, 20)
	c.Restart(t, follower)
	sameState(t, c, "/m/", 80)

	// A replica whose disk was wiped is removed and re-added.
	follower = (c.Leader(t) + 1) % 3
	id := c.Node(follower).ID()
	c.Kill(t, follower)
	if err := cl.RemoveServer(ctx, id); err != nil {
		t.Fatal(err)
	}
	c.Wipe(t, follower)
	writeN(t, cl, "/m/", 80, 20)
	c.Restart(t, follower)
	if got := members(t, c); !slices.Equal(got, []string{"r0/Voter", "r1/Voter", "r2/Voter"}) {
		t.Fatalf("members after re-adding %s = %v", id, got)
	}
	sameState(t, c, "/m/", 100)

	// Status over NATS reports every replica and one leader.
	sts, err := cl.Status(ctx, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	leaders := 0
	for _, s := range sts {
		if s.State == "Leader" {
			leaders++
		}
	}
	if len(sts) != 3 || leaders != 1 {
		t.Fatalf("status: %d replicas, %d leaders", len(sts), leaders)
	}
}

// TestNonvoter: a replica added as a non-voter gets every write, and
// does not count for a quorum — a one-voter store with a non-voter goes on
// writing with the non-voter gone, as with one server — until it is
// promoted to a voter.
func TestNonvoter(t *testing.T) {
	c := raftstoretest.MakeCluster(t, 1, raftstoretest.FastConfig) // it grows: not SoloConfig
	cl := c.Client(t)
	ctx := testCtx(t)
	writeN(t, cl, "/n/", 0, 10)
	r1 := c.AddWaiting(t, "r1")
	if err := cl.AddNonvoter(ctx, "r1", c.Node(r1).RaftAddr()); err != nil {
		t.Fatal(err)
	}
	if got := members(t, c); !slices.Equal(got, []string{"r0/Voter", "r1/Nonvoter"}) {
		t.Fatalf("members = %v", got)
	}
	writeN(t, cl, "/n/", 10, 10)
	sameState(t, c, "/n/", 20)
	c.Kill(t, r1)
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := cl.Create(wctx, "/n/without-r1", nil); err != nil {
		t.Fatalf("a write with the non-voter gone: %v", err)
	}
	c.Restart(t, r1)
	// Adding it again as a non-voter keeps it one; AddVoter promotes it.
	if err := cl.AddNonvoter(ctx, "r1", c.Node(r1).RaftAddr()); err != nil {
		t.Fatal(err)
	}
	if err := cl.AddVoter(ctx, "r1", c.Node(r1).RaftAddr()); err != nil {
		t.Fatal(err)
	}
	if got := members(t, c); !slices.Equal(got, []string{"r0/Voter", "r1/Voter"}) {
		t.Fatalf("members after promotion = %v", got)
	}
	sameState(t, c, "/n/", 21)
}

// TestLargeSnapshot: 50k keys survive a snapshot, log truncation, a
// follower brought back by InstallSnapshot and a restart from the local
// snapshot.
func TestLargeSnapshot(t *testing.T) {
	if testing.Short() {
		t.Skip("large snapshot test skipped in -short mode")
	}
	c := raftstoretest.MakeCluster(t, 3, func(cfg *raftstore.Config) {
		cfg.TrailingLogs = 64
		cfg.SnapshotThreshold = 1 << 30 // only explicit snapshots
		cfg.SnapshotInterval = time.Hour
	})
	ctx := testCtx(t)
	lagging := (c.Leader(t) + 1) % 3
	c.Kill(t, lagging)

	const keys, perTxn, writers = 50_000, 250, 4
	var wg sync.WaitGroup
	for w := range writers {
		cl := c.Client(t)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for b := w; b < keys/perTxn; b += writers {
				var txn raftstore.Txn
				for k := b * perTxn; k < (b+1)*perTxn; k++ {
					txn.Ops = append(txn.Ops, raftstore.Op{Type: raftstore.OpPut, Key: fmt.Sprintf("/big/%06d", k), Value: []byte(fmt.Sprintf("value-%d", k))})
				}
				if _, err := cl.Txn(ctx, txn); err != nil {
					t.Errorf("txn %d: %v", b, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	// Every live replica has applied every write before it snapshots, so a
	// restart restores all keys from its snapshot alone.
	c.WaitForReplication(t)
	for _, i := range c.Live() {
		if err := c.Node(i).Snapshot(); err != nil {
			t.Fatal(err)
		}
	}
	// The lagging replica's next entry was truncated: it needs the snapshot.
	c.Restart(t, lagging)
	sameState(t, c, "/big/", keys)
	if s := c.Node(lagging).Stats(); s.LastSnapshotIndex == 0 {
		t.Logf("lagging replica caught up without a snapshot install (%+v)", s)
	}
	// A restart restores from the replica's own snapshot.
	other := (lagging + 1) % 3
	c.Kill(t, other)
	c.Restart(t, other)
	if kvs, _ := c.Node(other).LocalList("/big/"); len(kvs) != keys {
		t.Fatalf("restarted replica restored %d keys, want %d", len(kvs), keys)
	}
	sameState(t, c, "/big/", keys)
}

// TestRetriedWriteAppliedOnce sends one write twice with the same
// idempotency key, as a client retry would: the second gets the first's
// result and changes nothing.
func TestRetriedWriteAppliedOnce(t *testing.T) {
	c := raftstoretest.MakeCluster(t, 3)
	nc := c.Conn(t)
	cmd, _ := proto.Marshal(&storev1.Command{
		IdempotencyKey: "test-retry-1",
		Kind:           storev1.WriteKind_WRITE_KIND_CREATE,
		Compares:       []*storev1.Compare{{Key: "/once"}},
		Ops:            []*storev1.Op{{Type: storev1.OpType_OP_TYPE_PUT, Key: "/once", Value: []byte("1")}},
	})
	send := func() *storev1.WriteResponse {
		t.Helper()
		var resp storev1.WriteResponse
		raftstoretest.WaitFor(t, 20*time.Second, "a write answer", func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			m, err := nc.RequestWithContext(ctx, raftstore.DefaultSubject+".write", cmd)
			return err == nil && proto.Unmarshal(m.Data, &resp) == nil
		})
		return &resp
	}
	first, second := send(), send()
	if first.Error != nil || !proto.Equal(first, second) {
		t.Fatalf("first %v, retry %v: want the same success", first, second)
	}
	cl := c.Client(t)
	kv, err := cl.Get(testCtx(t), "/once")
	if err != nil || kv.ModRevision != first.Revision {
		t.Fatalf("Get = %+v, %v", kv, err)
	}
	_, rev, _ := cl.List(testCtx(t), "/")
	if rev != first.Revision {
		t.Fatalf("store at revision %d after a retried write at %d: applied twice", rev, first.Revision)
	}
}

// TestWriteRefusesInvalidUTF8: a write whose key is not UTF-8, sent as raw
// bytes by a client that skipped the checks, is refused as invalid and
// stored nowhere: the leader decodes what it proposes as proto.Unmarshal
// would (vtproto's generated decoder alone takes it, and every reader of
// that key's events would then fail to decode them).
func TestWriteRefusesInvalidUTF8(t *testing.T) {
	c := raftstoretest.MakeCluster(t, 3)
	nc := c.Conn(t)
	cmd, err := (&storev1.Command{
		IdempotencyKey: "test-utf8-1",
		Kind:           storev1.WriteKind_WRITE_KIND_CREATE,
		Ops:            []*storev1.Op{{Type: storev1.OpType_OP_TYPE_PUT, Key: "/bad\xff", Value: []byte("1")}},
	}).MarshalVT() // unchecked
	if err != nil {
		t.Fatal(err)
	}
	var resp storev1.WriteResponse
	raftstoretest.WaitFor(t, 20*time.Second, "a write answer", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		m, err := nc.RequestWithContext(ctx, raftstore.DefaultSubject+".write", cmd)
		return err == nil && proto.Unmarshal(m.Data, &resp) == nil
	})
	if resp.GetError().GetCode() != storev1.Code_CODE_INVALID {
		t.Fatalf("answer %v, want CODE_INVALID", &resp)
	}
	if _, err := c.Client(t).Create(testCtx(t), "/good", []byte("1")); err != nil {
		t.Fatal(err)
	}
	c.WaitForReplication(t)
	for _, i := range c.Live() {
		if kvs, _ := c.Node(i).LocalList("/"); len(kvs) != 1 || kvs[0].Key != "/good" {
			t.Errorf("replica %d holds %v after the refused write, want only /good", i, kvs)
		}
	}
}
