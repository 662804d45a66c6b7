package bus_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/bus/bustest"
	"github.com/podflow/podflow/proto/eventsv1"
)

// clusterServerConfig is the configuration of server i of a cluster on
// loopback whose servers take routes on ports and share the credentials
// file creds.
func clusterServerConfig(dir, creds string, ports []int, i int) bus.EmbeddedConfig {
	var routes []string
	for j, p := range ports {
		if j != i {
			routes = append(routes, "nats-route://127.0.0.1:"+strconv.Itoa(p))
		}
	}
	cfg := bus.DefaultEmbeddedConfig(filepath.Join(dir, fmt.Sprintf("n%d", i)))
	cfg.ServerName, cfg.ClusterName, cfg.ClusterPort, cfg.Routes, cfg.CredsPath = fmt.Sprintf("n%d", i), "podflow", ports[i], routes, creds
	return cfg
}

// startCluster runs three embedded servers clustered over routes on
// loopback, connects to all three as admin and provisions the R3
// streams; the servers stop at the test's end.
func startCluster(t *testing.T) ([]*bus.Embedded, *bus.Conn) {
	t.Helper()
	return startClusterRouted(t, nil)
}

// startClusterRouted is startCluster with every route dialled where
// routes says (server i's route to server j, given j's route port), and
// advertised where nobody listens: no route learnt by gossip goes around
// routes' addresses. nil routes dial the ports themselves.
func startClusterRouted(t *testing.T, routes func(i, j, port int) string) ([]*bus.Embedded, *bus.Conn) {
	t.Helper()
	sc := bus.DefaultStreamsConfig()
	sc.Replicas = 3
	return startClusterWith(t, routes, nil, sc)
}

// startClusterWith is startClusterRouted with server i tagged tags(i)
// (nil: no tags) and the streams provisioned as sc says.
func startClusterWith(t *testing.T, routes func(i, j, port int) string, tags func(i int) []string, sc bus.StreamsConfig) ([]*bus.Embedded, *bus.Conn) {
	t.Helper()
	dir := t.TempDir()
	creds := filepath.Join(dir, "creds.json")
	ports, release := reservePorts(t, 3)
	var servers []*bus.Embedded
	started := make(chan *bus.Embedded, 3)
	errs := make(chan error, 3)
	for i := range 3 {
		cfg := clusterServerConfig(dir, creds, ports, i)
		cfg.StartTimeout = 30 * time.Second
		if tags != nil {
			cfg.Tags = tags(i)
		}
		if routes != nil {
			cfg.Routes = nil
			for j, p := range ports {
				if j != i {
					cfg.Routes = append(cfg.Routes, "nats-route://"+routes(i, j, p))
				}
			}
			cfg.ClusterAdvertise = "127.0.0.1:1"
		}
		release[i]()
		go func() {
			e, err := bus.StartEmbedded(context.Background(), cfg)
			if err != nil {
				errs <- err
				return
			}
			started <- e
		}()
		if i == 0 {
			// The first server creates the shared credentials file.
			select {
			case e := <-started:
				servers = append(servers, e)
			case err := <-errs:
				t.Fatal(err)
			}
		}
	}
	for len(servers) < 3 {
		select {
		case e := <-started:
			servers = append(servers, e)
		case err := <-errs:
			t.Fatal(err)
		}
	}
	// Servers 1 and 2 start at once and arrive in either order: server i
	// (n<i>, whose routes routes(i, …) placed) is servers[i].
	slices.SortFunc(servers, func(a, b *bus.Embedded) int { return strings.Compare(a.Server().Name(), b.Server().Name()) })
	t.Cleanup(func() {
		for _, s := range servers {
			s.Shutdown()
		}
	})
	conn := connectTo(t, servers[0], servers...)
	// JetStream needs a meta leader before it accepts streams.
	bustest.Eventually(t, "the R3 streams provisioned", func() bool {
		pctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		err := bus.Provision(pctx, conn.JetStream(), bus.Topology{Streams: bus.DefaultStreams(sc)})
		if err != nil {
			t.Log(err)
		}
		return err == nil
	})
	return servers, conn
}

// connectTo connects as admin (srv's credentials) to the servers at.
func connectTo(t *testing.T, srv *bus.Embedded, at ...*bus.Embedded) *bus.Conn {
	t.Helper()
	cc := srv.ClientConfig("cluster-test")
	cc.URLs = nil
	for _, s := range at {
		cc.URLs = append(cc.URLs, s.ClientURL())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	conn, err := bus.Connect(ctx, cc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	return conn
}

// publishRequested publishes PodRequested number i with a deadline of d.
func publishRequested(conn *bus.Conn, i int, d time.Duration) error {
	env, _ := bus.NewEnvelope(&eventsv1.PodRequested{})
	env.RequestId, env.Namespace, env.PodName = fmt.Sprintf("r%d", i), "default", fmt.Sprintf("p%d", i)
	pctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	_, err := conn.Publish(pctx, env)
	return err
}

// streamInfo returns the events stream's info.
func streamInfo(t *testing.T, conn *bus.Conn) *jetstream.StreamInfo {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := conn.JetStream().Stream(ctx, bus.EventsStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info
}

// TestClusterSurvivesAServer runs three embedded servers clustered over
// routes on loopback with R3 streams: with one server gone, publishing and
// consuming go on through the other two.
func TestClusterSurvivesAServer(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test in -short mode")
	}
	servers, conn := startCluster(t)
	for i := range 50 {
		if err := publishRequested(conn, i, 5*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	// Lose a server: its streams' replicas are on the other two.
	servers[2].Shutdown()
	for i := 50; i < 100; i++ {
		var err error
		bustest.Eventually(t, "publish with a server down", func() bool { err = publishRequested(conn, i, 5*time.Second); return err == nil })
	}
	if info := streamInfo(t, conn); info.State.Msgs != 100 || info.Config.Replicas != 3 {
		t.Fatalf("stream holds %d messages with %d replicas, want 100 and 3", info.State.Msgs, info.Config.Replicas)
	}
}

// TestPublishRidesOutALeaderChange (issue 39, item 3): the events
// stream's leader server is cut off from the others (every route of it
// closed, none reopening; it does not step down, as a machine that dies
// does not) while a client of another server publishes. The stream has
// no leader until the two others elect one, seconds later; every publish
// of the client still succeeds at its first call — Publish sends again
// what no stream answered — and each event is stored once.
func TestPublishRidesOutALeaderChange(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test in -short mode")
	}
	relays := map[[2]int]*relay{}
	servers, admin := startClusterRouted(t, func(i, j, port int) string {
		r := newRelay(t, fmt.Sprintf("127.0.0.1:%d", port))
		relays[[2]int{i, j}] = r
		return r.Addr()
	})
	if err := publishRequested(admin, 0, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	leaderName := streamInfo(t, admin).Cluster.Leader
	leader := -1
	for i, s := range servers {
		if s.Server().Name() == leaderName {
			leader = i
		}
	}
	if leader < 0 {
		t.Fatalf("the stream's leader %q is none of the servers", leaderName)
	}
	other := (leader + 1) % 3
	// The publisher talks to one surviving server only: what it sees is
	// the stream without a leader, not its own connection failing over.
	pub := connectTo(t, servers[other], servers[other])
	for link, r := range relays {
		if link[0] == leader || link[1] == leader {
			r.Cut()
		}
	}
	start := time.Now()
	for i := 1; i <= 20; i++ {
		if err := publishRequested(pub, i, 30*time.Second); err != nil {
			t.Fatalf("publish %d, %s after the leader was cut off: %v", i, time.Since(start).Round(time.Millisecond), err)
		}
	}
	t.Logf("20 publishes in %s after the stream's leader was cut off", time.Since(start).Round(time.Millisecond))
	info := streamInfo(t, pub)
	if info.State.Msgs != 21 || info.Cluster.Leader == leaderName {
		t.Fatalf("stream holds %d messages, leader %q; want 21 and a new leader", info.State.Msgs, info.Cluster.Leader)
	}
}

// relay forwards TCP connections to a target until Cut, which closes
// every connection and refuses new ones: a link that fails.
type relay struct {
	l      net.Listener
	target string
	mu     sync.Mutex
	cut    bool
	conns  []net.Conn
	wg     sync.WaitGroup
}

func newRelay(t *testing.T, target string) *relay {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &relay{l: l, target: target}
	r.wg.Add(1)
	go r.accept()
	t.Cleanup(func() { r.Cut(); l.Close(); r.wg.Wait() })
	return r
}

func (r *relay) Addr() string { return r.l.Addr().String() }

func (r *relay) accept() {
	defer r.wg.Done()
	for {
		c, err := r.l.Accept()
		if err != nil {
			return
		}
		up, err := net.DialTimeout("tcp", r.target, 2*time.Second)
		r.mu.Lock()
		if err != nil || r.cut {
			r.mu.Unlock()
			c.Close()
			if up != nil {
				up.Close()
			}
			continue
		}
		r.conns = append(r.conns, c, up)
		r.mu.Unlock()
		r.wg.Add(2)
		go func() { defer r.wg.Done(); _, _ = io.Copy(up, c); up.Close() }()
		go func() { defer r.wg.Done(); _, _ = io.Copy(c, up); c.Close() }()
	}
}

// Cut closes the link's connections and refuses every new one.
func (r *relay) Cut() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cut = true
	for _, c := range r.conns {
		c.Close()
	}
	r.conns = nil
}

// TestClusterMeshAcrossAddresses (issue 39): servers on loopback
// addresses of their own, joined as `podflow up --join` joins hosts (the
// first server has no routes, each later one a route to the first only),
// find each other by gossip: every server routes to every other, and R3
// streams are placed on the three. A server dials out from 127.0.0.1,
// where nobody listens on the route port (held here without listening):
// a server that gossiped the dialler's source address instead of its
// advertised one would leave the two later servers unrouted for good.
func TestClusterMeshAcrossAddresses(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test in -short mode")
	}
	dir := t.TempDir()
	creds := filepath.Join(dir, "creds.json")
	// One route port for the three addresses; on 127.0.0.1 it is bound
	// and refuses.
	port, _ := reservePort(t)
	hosts := []string{"127.0.0.31", "127.0.0.32", "127.0.0.33"}
	var servers []*bus.Embedded
	for i, host := range hosts {
		cfg := bus.DefaultEmbeddedConfig(filepath.Join(dir, fmt.Sprintf("n%d", i)))
		cfg.Host, cfg.ServerName, cfg.ClusterName, cfg.ClusterPort, cfg.CredsPath = host, fmt.Sprintf("n%d", i), "podflow", port, creds
		cfg.StartTimeout = 30 * time.Second
		if i > 0 {
			cfg.Routes = []string{"nats-route://" + net.JoinHostPort(hosts[0], strconv.Itoa(port))}
		}
		e, err := bus.StartEmbedded(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(e.Shutdown)
		servers = append(servers, e)
	}
	routedTo := func(e *bus.Embedded) []string {
		rz, err := e.Server().Routez(nil)
		if err != nil {
			return nil
		}
		var names []string
		for _, r := range rz.Routes {
			if !slices.Contains(names, r.RemoteName) {
				names = append(names, r.RemoteName)
			}
		}
		slices.Sort(names)
		return names
	}
	for i, e := range servers {
		var want []string
		for j := range servers {
			if j != i {
				want = append(want, fmt.Sprintf("n%d", j))
			}
		}
		bustest.Eventually(t, fmt.Sprintf("n%d routed to %v", i, want), func() bool { return slices.Equal(routedTo(e), want) })
	}
	conn := connectTo(t, servers[1], servers[1])
	sc := bus.DefaultStreamsConfig()
	sc.Replicas = 3
	bustest.Eventually(t, "the R3 streams provisioned", func() bool {
		pctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		return bus.Provision(pctx, conn.JetStream(), bus.Topology{Streams: bus.DefaultStreams(sc)}) == nil
	})
	if err := publishRequested(conn, 0, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if info := streamInfo(t, conn); info.Cluster == nil || len(info.Cluster.Replicas) != 2 {
		t.Fatalf("events stream cluster %+v, want a leader and two replicas", info.Cluster)
	}
}
