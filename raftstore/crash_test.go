package raftstore_test

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/raftstore/raftstoretest"
)

// Environment of the child replica of TestSIGKILLMidWriteRecoversLog.
const (
	crashChildEnv = "PODFLOW_RAFTSTORE_CRASH_CHILD" // data dir; set only in the child
	crashNATSEnv  = "PODFLOW_RAFTSTORE_CRASH_NATS"
	crashAddrEnv  = "PODFLOW_RAFTSTORE_CRASH_ADDR"
)

// TestCrashChild is the replica process of TestSIGKILLMidWriteRecoversLog:
// a single-voter cluster with fsync on and small log segments (so writes
// cross segment rotations), serving until it is killed.
func TestCrashChild(t *testing.T) {
	dir := os.Getenv(crashChildEnv)
	if dir == "" {
		t.Skip("the child process of TestSIGKILLMidWriteRecoversLog")
	}
	nc, err := nats.Connect(os.Getenv(crashNATSEnv), nats.MaxReconnects(-1))
	if err != nil {
		t.Fatal(err)
	}
	cfg := soloConfig(dir, os.Getenv(crashAddrEnv), nc, true)
	cfg.LogSegmentBytes = 64 << 10
	cfg.SnapshotThreshold = 1 << 30 // recovery must come from the log
	startSolo(t, cfg)
	fmt.Println("child replica started") // for the parent's log; readiness is the store answering
	select {}                            // until SIGKILL
}

// TestSIGKILLMidWriteRecoversLog runs a one-replica store in a child process
// (the log is all it has: no peer to catch up from, no snapshot), SIGKILLs it
// while 8 clients write, restarts it on the same data directory, and checks
// that every acknowledged write is there at its revision; three rounds, so
// the restarted log is itself killed again mid-write.
func TestSIGKILLMidWriteRecoversLog(t *testing.T) {
	if os.Getenv(crashChildEnv) != "" {
		t.Skip("in the child")
	}
	url, nc := startNATS(t)
	cl, err := raftstore.NewClient(nc, raftstore.ClientConfig{WatchHeartbeatTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	addr, dir := freeLoopback(t), t.TempDir()

	start := func() (kill func()) {
		cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), crashChildEnv+"="+dir, crashNATSEnv+"="+url, crashAddrEnv+"="+addr)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		var once sync.Once
		kill = func() {
			once.Do(func() {
				_ = cmd.Process.Signal(syscall.SIGKILL)
				_ = cmd.Wait()
			})
		}
		t.Cleanup(kill)
		return kill
	}

	acked := map[string]int64{} // key -> revision the store acknowledged
	var mu sync.Mutex
	for round := range 3 {
		kill := start()
		// The first write of a round waits out the restart (the client
		// retries "no responders" until its deadline).
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		if _, err := cl.Create(ctx, fmt.Sprintf("/crash/%d/first", round), []byte("x")); err != nil {
			cancel()
			t.Fatalf("round %d: store did not come up: %v", round, err)
		}
		cancel()

		var n atomic.Int64
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for w := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					key := fmt.Sprintf("/crash/%d/%d/%d", round, w, i)
					ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
					rev, err := cl.Create(ctx, key, make([]byte, 512))
					cancel()
					if err != nil {
						continue // the kill: outcome unknown, not counted
					}
					mu.Lock()
					acked[key] = rev
					mu.Unlock()
					n.Add(1)
				}
			}()
		}
		waitAcks(t, &n, 300) // about two 64 KiB segments of entries
		kill()               // the writers are mid-write
		close(stop)
		wg.Wait()
	}

	start()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	kvs, rev, err := cl.List(ctx, "/crash/")
	if err != nil {
		t.Fatalf("list after the last restart: %v", err)
	}
	got := map[string]int64{}
	for _, kv := range kvs {
		got[kv.Key] = kv.ModRevision
	}
	var maxRev int64
	for key, want := range acked {
		if got[key] != want {
			t.Errorf("acknowledged %s at revision %d; after restart: %d", key, want, got[key])
		}
		maxRev = max(maxRev, want)
	}
	if rev < maxRev {
		t.Errorf("revision after restart %d < last acknowledged %d", rev, maxRev)
	}
	sts, err := cl.Status(ctx, time.Second)
	if err != nil || len(sts) != 1 {
		t.Fatalf("status: %v, %d replicas", err, len(sts))
	}
	if sts[0].LastSnapshotIndex != 0 {
		t.Fatalf("a snapshot (index %d) was taken: the test no longer checks log recovery", sts[0].LastSnapshotIndex)
	}
	t.Logf("%d acknowledged writes over 3 SIGKILLs, all recovered from the log (last index %d)", len(acked), sts[0].LastLogIndex)
}

// freeLoopback returns a loopback address whose port was free a moment ago.
//
// The port is taken below the kernel's ephemeral range, and below the
// range `podflow up` picks from (ops/processes/plan, from 20000): a replica that is
// restarted on it would otherwise find it, once in a while, the local port
// of another package's outgoing connection that the kernel handed out
// meanwhile ("bind: address already in use", as TestSIGKILLMidWriteRecoversLog
// once did in a full make test).
func freeLoopback(t *testing.T) string {
	t.Helper()
	const low, high = 10000, 20000
	top := high
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil && n < top {
				top = n
			}
		}
	}
	for range 64 {
		if top-low < 1000 {
			break // no room below the range: the kernel picks
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(low+rand.IntN(top-low))))
		if err != nil {
			continue
		}
		addr := l.Addr().String()
		_ = l.Close()
		return addr
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// startNATS runs an embedded nats-server (no JetStream) and connects to it;
// both stop at t's cleanup.
func startNATS(t *testing.T) (url string, nc *nats.Conn) {
	t.Helper()
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	t.Cleanup(ns.Shutdown)
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats server not ready")
	}
	if nc, err = nats.Connect(ns.ClientURL(), nats.MaxReconnects(-1)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return ns.ClientURL(), nc
}

// soloConfig is a one-replica store in dir on addr, bootstrapped as the
// only voter when bootstrap is set.
func soloConfig(dir, addr string, nc *nats.Conn, bootstrap bool) raftstore.Config {
	cfg := raftstore.DefaultConfig()
	cfg.ID, cfg.DataDir, cfg.RaftAddr, cfg.Conn = "solo", dir, addr, nc
	tlsCfg, err := raftstoretest.EphemeralPeerTLS()
	if err != nil {
		panic(err)
	}
	cfg.TLS = tlsCfg
	if bootstrap {
		cfg.Bootstrap = []raftstore.Peer{{ID: "solo", Address: addr}}
	}
	cfg.HeartbeatTimeout, cfg.ElectionTimeout, cfg.LeaderLeaseTimeout = 300*time.Millisecond, 300*time.Millisecond, 150*time.Millisecond
	cfg.LogOutput = io.Discard
	return cfg
}

// startSolo starts a replica of cfg and fails t if it does not start.
func startSolo(t *testing.T, cfg raftstore.Config) *raftstore.Node {
	t.Helper()
	node, err := raftstore.NewNode(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := node.Start(ctx); err != nil {
		t.Fatalf("start %s on %s: %v", cfg.ID, cfg.DataDir, err)
	}
	return node
}
