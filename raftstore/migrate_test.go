package raftstore_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"github.com/podflow/podflow/proto/storev1"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/raftstore/raftstoretest"
	"google.golang.org/protobuf/proto"
)

// nopFSM accepts every entry: the old-format log is written by raft itself,
// and the store's own state machine replays it after the migration.
type nopFSM struct{}

func (nopFSM) Apply(*raft.Log) any                 { return nil }
func (nopFSM) Snapshot() (raft.FSMSnapshot, error) { return nil, errors.New("no snapshots") }
func (nopFSM) Restore(r io.ReadCloser) error       { return r.Close() }

// writeBoltDataDir writes what a replica of the releases before raft-wal
// left in dir: raft.db (raft-boltdb/v2, written by hashicorp/raft as a
// one-voter cluster at addr) holding n puts of /old/<i>.
func writeBoltDataDir(t *testing.T, dir, id, addr string, n int) {
	t.Helper()
	store, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(dir, "raft.db")})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	snaps, err := raft.NewFileSnapshotStore(dir, 2, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	_, trans := raft.NewInmemTransport(raft.ServerAddress(addr))
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(id)
	rc.HeartbeatTimeout, rc.ElectionTimeout, rc.LeaderLeaseTimeout = 50*time.Millisecond, 50*time.Millisecond, 50*time.Millisecond
	rc.SnapshotThreshold = 1 << 30
	rc.LogOutput = io.Discard
	conf := raft.Configuration{Servers: []raft.Server{{ID: rc.LocalID, Address: raft.ServerAddress(addr)}}}
	if err := raft.BootstrapCluster(rc, store, store, snaps, trans, conf); err != nil {
		t.Fatal(err)
	}
	r, err := raft.NewRaft(rc, nopFSM{}, store, store, snaps, trans)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Shutdown()
	raftstoretest.WaitFor(t, 10*time.Second, "the old-format replica leads", func() bool { return r.State() == raft.Leader })
	for i := range n {
		data, _ := proto.Marshal(&storev1.Command{
			IdempotencyKey: fmt.Sprintf("old-%d", i),
			Ops:            []*storev1.Op{{Type: storev1.OpType_OP_TYPE_PUT, Key: fmt.Sprintf("/old/%d", i), Value: []byte("v")}},
		})
		if err := r.Apply(data, 10*time.Second).Error(); err != nil {
			t.Fatalf("old log apply %d: %v", i, err)
		}
	}
}

// TestBoltDataDirMigrates starts a replica on a data dir of the bolt era:
// its log is copied into raft-wal, raft.db is kept as raft.db.migrated, the
// store holds every old write, and later starts open the WAL. A copy
// interrupted by a crash (a leftover wal.migrating) is redone.
func TestBoltDataDirMigrates(t *testing.T) {
	_, nc := startNATS(t)

	dir, addr := t.TempDir(), freeLoopback(t)
	const n = 50
	writeBoltDataDir(t, dir, "solo", addr, n)
	// A crash in an earlier migration left a partial copy behind.
	if err := os.MkdirAll(filepath.Join(dir, "wal.migrating"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "wal.migrating", "00000000000000000001-0000000000000001.wal"), []byte("torn"), 0o644); err != nil {
		t.Fatal(err)
	}

	start := func() *raftstore.Node { return startSolo(t, soloConfig(dir, addr, nc, false)) }
	check := func(what string) {
		t.Helper()
		cl, err := raftstore.NewClient(nc, raftstore.ClientConfig{WatchHeartbeatTimeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		// A write through the new log first: it commits only after the
		// replica applied everything before it.
		if _, err := cl.Create(ctx, "/new/"+what, []byte("v")); err != nil {
			t.Fatalf("%s: write: %v", what, err)
		}
		kvs, _, err := cl.List(ctx, "/old/")
		if err != nil || len(kvs) != n {
			t.Fatalf("%s: /old/ holds %d keys (err %v), want %d", what, len(kvs), err, n)
		}
	}
	node := start()
	check("migrated")
	if err := node.Shutdown(); err != nil {
		t.Fatal(err)
	}
	for f, want := range map[string]bool{"raft.db": false, "raft.db.migrated": true, "wal": true, "wal.migrating": false} {
		if _, err := os.Stat(filepath.Join(dir, f)); (err == nil) != want {
			t.Errorf("after migration: %s exists=%v, want %v", f, err == nil, want)
		}
	}
	node = start() // the WAL now, not a second migration
	check("reopened")
	if err := node.Shutdown(); err != nil {
		t.Fatal(err)
	}
}

// TestDataDirLocked: a second replica on a data dir in use fails at once
// with ErrDataDirLocked instead of waiting on the log store's file lock.
func TestDataDirLocked(t *testing.T) {
	_, nc := startNATS(t)
	dir := t.TempDir()
	cfg := soloConfig(dir, freeLoopback(t), nc, true)
	cfg.NoSync = true
	defer startSolo(t, cfg).Shutdown()
	cfg.RaftAddr = freeLoopback(t)
	second, err := raftstore.NewNode(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := second.Start(ctx); !errors.Is(err, raftstore.ErrDataDirLocked) {
		t.Fatalf("second replica on the same data dir: %v, want ErrDataDirLocked", err)
	}
}
