package raftstore_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/raftstore/raftstoretest"
)

// TestRaftListener: a replica given a listener serves raft on it (its
// RaftAddr is the listener's, and it elects itself and takes writes), and
// Shutdown closes it; a Start that fails (the data directory is locked by
// a running replica) closes the listener it was given too; a RaftAddr
// other than the listener's is refused before anything starts.
func TestRaftListener(t *testing.T) {
	_, nc := startNATS(t)
	l := raftstoretest.Listeners(t, 1)[0]
	dir := t.TempDir()
	cfg := soloConfig(dir, l.Addr().String(), nc, true)
	cfg.RaftListener = l
	node := startSolo(t, cfg)
	if got := node.RaftAddr(); got != l.Addr().String() {
		t.Fatalf("RaftAddr() = %s, want the listener's %s", got, l.Addr())
	}
	cl, err := raftstore.NewClient(nc, raftstore.DefaultClientConfig())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := cl.Create(ctx, "/listener/a", []byte("x")); err != nil {
		t.Fatalf("write through a replica on its given listener: %v", err)
	}

	// A second replica on the same (locked) data directory fails to start
	// and closes its listener.
	l2 := raftstoretest.Listeners(t, 1)[0]
	cfg2 := soloConfig(dir, l2.Addr().String(), nc, true)
	cfg2.RaftListener = l2
	n2, err := raftstore.NewNode(cfg2)
	if err != nil {
		t.Fatal(err)
	}
	if err := n2.Start(ctx); err == nil {
		t.Fatal("a second replica started on a locked data directory")
	}
	if _, err := accept(l2); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("listener of the replica that failed to start: Accept = %v, want net.ErrClosed", err)
	}

	if err := node.Shutdown(); err != nil {
		t.Fatal(err)
	}
	if _, err := accept(l); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("listener after Shutdown: Accept = %v, want net.ErrClosed", err)
	}

	l3 := raftstoretest.Listeners(t, 1)[0]
	cfg3 := soloConfig(t.TempDir(), "127.0.0.1:1", nc, true)
	cfg3.RaftListener = l3
	if _, err := raftstore.NewNode(cfg3); err == nil || !strings.Contains(err.Error(), "RaftListener") {
		t.Fatalf("NewNode with RaftAddr other than its listener's: %v, want an error naming RaftListener", err)
	}
}

// accept is l.Accept within 2 s (a listener left open times out).
func accept(l net.Listener) (net.Conn, error) {
	_ = l.(*net.TCPListener).SetDeadline(time.Now().Add(2 * time.Second))
	return l.Accept()
}
