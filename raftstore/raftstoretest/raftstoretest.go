// Package raftstoretest runs real raftstore clusters inside a test: an
// embedded nats-server and in-process replicas on raft transports over
// mutual TLS on loopback (PeerTLS, unless an Option sets another
// Config.TLS), each with its own NATS connection and data directory, so a
// replica can be killed and restarted on its disk.
//
// Callers:
//
//  1. create a cluster with MakeCluster (it is shut down by t.Cleanup);
//
//  2. talk to it through Client, as any podflow service would;
//
//  3. use Leader, Kill, Crash, Restart, Wipe, Add and WaitForReplication to drive
//     failures and check their outcome on every replica.
//
//     c := raftstoretest.MakeCluster(t, 3)
//     cl := c.Client(t)
//     rev, err := cl.Create(ctx, "/registry/pods/default/web", data)
//     c.Kill(c.Leader(t))
//     c.WaitForReplication(t)
package raftstoretest

import (
	"context"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/podflow/podflow/raftstore"
)

// Cluster is a running test cluster.
type Cluster struct {
	NATS *server.Server
	dir  string

	mu    sync.Mutex
	cfgs  []raftstore.Config
	nodes []*raftstore.Node // nil while killed
	conns []*nats.Conn
}

// Option adjusts every replica's Config.
type Option func(*raftstore.Config)

// FastConfig tunes raft for loopback tests under -race on a busy machine.
func FastConfig(c *raftstore.Config) {
	c.HeartbeatTimeout = 300 * time.Millisecond
	c.ElectionTimeout = 300 * time.Millisecond
	c.LeaderLeaseTimeout = 150 * time.Millisecond
	c.CommitTimeout = 10 * time.Millisecond
	c.SnapshotInterval = 500 * time.Millisecond
	c.WatchHeartbeat = 250 * time.Millisecond
	c.NoSync = true
	c.LogOutput = io.Discard
}

// SoloConfig shortens what a store of one voter waits before it elects
// itself: raft's follower waits HeartbeatTimeout to twice that for a
// leader before standing, and a lone voter has no peer to hear from nor
// to lose contact with, so a short wait there cannot cause a spurious
// election. Apply it after FastConfig, to a store that stays one replica:
// with peers, a leader that misses their answers for 50ms would step down.
// MakeCluster applies it to a cluster of one; a test that adds replicas to
// one passes FastConfig as its first option.
func SoloConfig(c *raftstore.Config) {
	c.HeartbeatTimeout = soloHeartbeat
	c.LeaderLeaseTimeout = soloHeartbeat
}

const soloHeartbeat = 50 * time.Millisecond

// MakeCluster starts an embedded nats-server and n bootstrapped replicas
// and waits for a leader. Everything stops at t's cleanup.
// A cluster of one gets SoloConfig (it elects itself at once).
func MakeCluster(t testing.TB, n int, opts ...Option) *Cluster {
	t.Helper()
	return makeCluster(t, n, 0, opts)
}

// BusMaxPayload is the max payload of podflow's bus (bus.EmbeddedConfig).
const BusMaxPayload = 8 << 20

// MakeBusCluster is MakeCluster on a NATS server whose max payload is
// podflow's bus's (BusMaxPayload, not NATS's default 1 MiB): for values
// and answers of a size only that bus carries.
func MakeBusCluster(t testing.TB, n int, opts ...Option) *Cluster {
	t.Helper()
	return makeCluster(t, n, BusMaxPayload, opts)
}

func makeCluster(t testing.TB, n int, maxPayload int32, opts []Option) *Cluster {
	t.Helper()
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true, MaxPayload: maxPayload})
	if err != nil {
		t.Fatalf("nats server: %v", err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats server not ready")
	}
	c := &Cluster{NATS: ns, dir: t.TempDir()}
	t.Cleanup(c.Shutdown)
	ls := Listeners(t, n)
	var peers []raftstore.Peer
	for i, l := range ls {
		peers = append(peers, raftstore.Peer{ID: fmt.Sprintf("r%d", i), Address: l.Addr().String()})
	}
	for i := range n {
		cfg := raftstore.DefaultConfig()
		FastConfig(&cfg)
		if n == 1 {
			SoloConfig(&cfg)
		}
		cfg.ID = peers[i].ID
		cfg.RaftAddr = peers[i].Address
		cfg.DataDir = filepath.Join(c.dir, cfg.ID)
		cfg.Bootstrap = peers
		cfg.TLS = PeerTLS(t)
		for _, o := range opts {
			o(&cfg)
		}
		c.cfgs = append(c.cfgs, cfg)
		c.nodes = append(c.nodes, nil)
		c.conns = append(c.conns, nil)
	}
	for i := range n {
		c.start(t, i, ls[i])
	}
	c.Leader(t)
	return c
}

// Listeners returns n listeners on distinct free ports of 127.0.0.1 for
// raft replicas (raftstore.Config.RaftListener, RaftAddr its address),
// closed at t's cleanup if no replica took them over. Every port is held
// from now until its replica serves it: one found by listening on :0 and
// closing could be given to an outgoing connection meanwhile, or to the
// next such search ("found duplicate address in configuration"), and a
// replica dialling a peer not yet listening could connect to itself.
func Listeners(t testing.TB, n int) []net.Listener {
	t.Helper()
	ls := make([]net.Listener, n)
	for i := range ls {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("raft listener: %v", err)
		}
		t.Cleanup(func() { _ = l.Close() })
		ls[i] = l
	}
	return ls
}

// Conn returns a new NATS connection to the cluster's server, closed at t's
// cleanup.
func (c *Cluster) Conn(t testing.TB) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(c.NATS.ClientURL(), nats.MaxReconnects(-1))
	if err != nil {
		t.Fatalf("nats connect: %v", err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// Client returns a store client on its own connection.
func (c *Cluster) Client(t testing.TB) *raftstore.Client {
	t.Helper()
	cl, err := raftstore.NewClient(c.Conn(t), raftstore.ClientConfig{WatchHeartbeatTimeout: time.Second})
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	return cl
}

// start starts replica i on l (its first start) or, when l is nil, on
// its RaftAddr bound again.
func (c *Cluster) start(t testing.TB, i int, l net.Listener) {
	t.Helper()
	nc, err := nats.Connect(c.NATS.ClientURL())
	if err != nil {
		t.Fatalf("nats connect: %v", err)
	}
	cfg := c.cfgs[i]
	cfg.Conn, cfg.RaftListener = nc, l
	n, err := raftstore.NewNode(cfg)
	if err != nil {
		nc.Close()
		t.Fatalf("new node %s: %v", cfg.ID, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := n.Start(ctx); err != nil {
		nc.Close()
		t.Fatalf("start node %s: %v", cfg.ID, err)
	}
	c.mu.Lock()
	c.nodes[i], c.conns[i] = n, nc
	c.mu.Unlock()
}

// Len returns the number of replica slots (live or killed).
func (c *Cluster) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.nodes)
}

// Node returns replica i, or nil while it is killed.
func (c *Cluster) Node(i int) *raftstore.Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodes[i]
}

// Live returns the indexes of the running replicas.
func (c *Cluster) Live() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []int
	for i, n := range c.nodes {
		if n != nil {
			out = append(out, i)
		}
	}
	return out
}

// Leader waits up to 20 s for exactly one running replica to serve as leader
// and returns its index.
func (c *Cluster) Leader(t testing.TB) int {
	t.Helper()
	var leader int
	waitFor(t, 20*time.Second, "a single leader", func() bool {
		leader = -1
		for _, i := range c.Live() {
			if c.Node(i).IsLeader() {
				if leader >= 0 {
					return false
				}
				leader = i
			}
		}
		return leader >= 0
	})
	return leader
}

// Kill stops replica i (raft, its subscriptions and its NATS connection),
// leaving its data directory.
func (c *Cluster) Kill(t testing.TB, i int) {
	t.Helper()
	c.mu.Lock()
	n, nc := c.nodes[i], c.conns[i]
	c.nodes[i], c.conns[i] = nil, nil
	c.mu.Unlock()
	if n == nil {
		t.Fatalf("kill replica %d: not running", i)
	}
	if err := n.Shutdown(); err != nil {
		t.Errorf("shutdown replica %d: %v", i, err)
	}
	nc.Close()
}

// Crash stops replica i like a SIGKILL looks from outside: its NATS
// connection drops first, so it can say goodbye to no one (watches of it
// must notice by heartbeat), then raft stops. Its data directory stays.
func (c *Cluster) Crash(t testing.TB, i int) {
	t.Helper()
	c.mu.Lock()
	n, nc := c.nodes[i], c.conns[i]
	c.nodes[i], c.conns[i] = nil, nil
	c.mu.Unlock()
	if n == nil {
		t.Fatalf("crash replica %d: not running", i)
	}
	nc.Close()
	if err := n.Shutdown(); err != nil {
		t.Errorf("shutdown replica %d: %v", i, err)
	}
}

// Dir is the directory holding every replica's data directory (<Dir>/<ID>).
func (c *Cluster) Dir() string { return c.dir }

// Reconfigure changes killed replica i's Config for its next Restart (a
// new encryption configuration, say).
func (c *Cluster) Reconfigure(t testing.TB, i int, o Option) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.nodes[i] != nil {
		t.Fatalf("reconfigure replica %d: still running", i)
	}
	o(&c.cfgs[i])
}

// Restart starts killed replica i again on its data directory.
func (c *Cluster) Restart(t testing.TB, i int) {
	t.Helper()
	c.start(t, i, nil)
}

// Add starts a new empty replica that joins the cluster (Config.Join) and
// returns its index.
func (c *Cluster) Add(t testing.TB, id string) int {
	t.Helper()
	return c.add(t, id, true)
}

// AddWaiting starts a new empty replica that does not ask to join: it
// waits until a client adds it (AddVoter, AddNonvoter). It returns its
// index.
func (c *Cluster) AddWaiting(t testing.TB, id string) int {
	t.Helper()
	return c.add(t, id, false)
}

func (c *Cluster) add(t testing.TB, id string, join bool) int {
	t.Helper()
	c.mu.Lock()
	cfg := c.cfgs[0]
	if cfg.HeartbeatTimeout <= soloHeartbeat {
		c.mu.Unlock()
		t.Fatal("raftstoretest: replicas added to a cluster of one with SoloConfig's timeouts: start it with MakeCluster(t, 1, FastConfig)")
	}
	cfg.ID = id
	l := Listeners(t, 1)[0]
	cfg.RaftAddr = l.Addr().String()
	cfg.DataDir = filepath.Join(c.dir, id)
	cfg.Bootstrap = nil
	cfg.Join = join
	c.cfgs = append(c.cfgs, cfg)
	c.nodes = append(c.nodes, nil)
	c.conns = append(c.conns, nil)
	i := len(c.nodes) - 1
	c.mu.Unlock()
	c.start(t, i, l)
	return i
}

// Wipe makes killed replica i start from an empty data directory (a new
// disk) that joins the cluster when restarted; remove it from the cluster
// first.
func (c *Cluster) Wipe(t testing.TB, i int) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.nodes[i] != nil {
		t.Fatalf("wipe replica %d: still running", i)
	}
	c.cfgs[i].DataDir = filepath.Join(c.dir, fmt.Sprintf("%s-wiped-%d", c.cfgs[i].ID, time.Now().UnixNano()))
	c.cfgs[i].Bootstrap = nil
	c.cfgs[i].Join = true
}

// WaitForReplication waits up to 20 s until every running replica has
// applied the leader's commit index and reports the same revision.
func (c *Cluster) WaitForReplication(t testing.TB) {
	t.Helper()
	waitFor(t, 20*time.Second, "replication to every running replica", func() bool {
		var commit uint64
		for _, i := range c.Live() {
			if s := c.Node(i).Stats(); s.State == "Leader" {
				commit = s.CommitIndex
			}
		}
		if commit == 0 {
			return false
		}
		var rev int64 = -1
		for _, i := range c.Live() {
			s := c.Node(i).Stats()
			if s.AppliedIndex < commit || (rev >= 0 && s.Revision != rev) {
				return false
			}
			rev = s.Revision
		}
		return true
	})
}

// Shutdown stops every replica and the NATS server. Idempotent.
func (c *Cluster) Shutdown() {
	c.mu.Lock()
	nodes, conns := c.nodes, c.conns
	c.nodes, c.conns = make([]*raftstore.Node, len(nodes)), make([]*nats.Conn, len(conns))
	c.mu.Unlock()
	var wg sync.WaitGroup
	for i, n := range nodes {
		if n == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = n.Shutdown()
			conns[i].Close()
		}()
	}
	wg.Wait()
	c.NATS.Shutdown()
	c.NATS.WaitForShutdown()
}

// waitFor polls cond every 20 ms until it holds or timeout passes.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// WaitFor polls cond every 20 ms until it holds, failing t after timeout.
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	waitFor(t, timeout, what, cond)
}
