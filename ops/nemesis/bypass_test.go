package nemesis

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/ops/processes/plan"
)

func TestProcAddr(t *testing.T) {
	for in, want := range map[string]string{
		"0100007F:1F90":                         "127.0.0.1:8080",
		"0000000000000000FFFF00000100007F:0050": "127.0.0.1:80",
		"00000000000000000000000001000000:0016": "[::1]:22",
	} {
		if got, err := procAddr(in); err != nil || got != want {
			t.Errorf("procAddr(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}

// TestBypasses: a connection to a node's real address through its relay
// (opened by this process) is no bypass; one another process opens
// directly is named.
func TestBypasses(t *testing.T) {
	ls, targets := twoNodes(t)
	n, err := New(targets)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	c, up := relayedConn(t, n, ls["b"])
	defer c.Close()
	defer up.Close()
	if bp, err := n.Bypasses(); err != nil || len(bp) != 0 {
		t.Fatalf("through the relay: bypasses %q, %v", bp, err)
	}

	// Another process dials b directly and holds the connection until
	// its stdin closes.
	_, port, _ := net.SplitHostPort(targets["b"])
	cmd := exec.Command("bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/"+port+" && read -r _")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { stdin.Close(); _ = cmd.Wait() }()
	direct, err := ls["b"].Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close()
	bp, err := n.Bypasses()
	if err != nil {
		t.Fatal(err)
	}
	if len(bp) != 1 || !strings.Contains(bp[0], "→ "+targets["b"]+" (b) not through a relay") {
		t.Fatalf("a direct connection: bypasses %q", bp)
	}
}

// natsTrio starts 3 clustered NATS servers whose routes run through a
// Net; routes[i] are the peers server i dials (through its relays) and
// advertise, when set, the route address each tells the others.
func natsTrio(t *testing.T, routes map[string][]string, advertise string) (*Net, map[string]*server.Server) {
	t.Helper()
	ids := []string{"nats-1", "nats-2", "nats-3"}
	addrs, err := plan.FreeAddrs(3)
	if err != nil {
		t.Fatal(err)
	}
	targets := map[string]string{}
	for i, id := range ids {
		targets[id] = addrs[i]
	}
	n, err := New(targets)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	creds := t.TempDir() + "/creds.json"
	out := map[string]*server.Server{}
	for i, id := range ids {
		cfg := bus.DefaultEmbeddedConfig(t.TempDir())
		_, p, _ := net.SplitHostPort(addrs[i])
		fmt.Sscan(p, &cfg.ClusterPort)
		cfg.Port, cfg.ServerName, cfg.ClusterName, cfg.CredsPath, cfg.ClusterAdvertise = -1, id, "pf-nemesis", creds, advertise
		for _, peer := range routes[id] {
			cfg.Routes = append(cfg.Routes, "nats-route://"+n.DialAddrs(id)[peer])
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		e, err := bus.StartEmbedded(ctx, cfg)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(e.Shutdown)
		out[id] = e.Server()
	}
	return n, out
}

// directRoutes names every route a server dialled (Routez: DidSolicit)
// at an address that is not one of n's relays.
func directRoutes(t *testing.T, n *Net, srvs map[string]*server.Server) []string {
	t.Helper()
	relays := map[string]bool{}
	for _, id := range n.Nodes() {
		for _, a := range n.DialAddrs(id) {
			relays[a] = true
		}
	}
	var out []string
	for id, s := range srvs {
		rz, err := s.Routez(&server.RoutezOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rz.Routes {
			if a := net.JoinHostPort(r.IP, fmt.Sprint(r.Port)); r.DidSolicit && !relays[a] {
				out = append(out, fmt.Sprintf("%s dialled %s at %s", id, r.RemoteName, a))
			}
		}
	}
	return out
}

// awaitRoute waits until server a has a route to b (Routez), or fails.
func awaitRoute(t *testing.T, a *server.Server, b string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		rz, err := a.Routez(&server.RoutezOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rz.Routes {
			if r.RemoteName == b {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s has no route to %s after 30s", a.Name(), b)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestRefusingAdvertiseNeeded proves that chaos needs the refusing route
// advertise: nats-1 and nats-3 are given only nats-2's relay, so each
// learns of the other by gossip. Without an advertise they dial each
// other's real route port — a route around the relays, which no cut
// would reach (and Bypasses would name, were the servers other
// processes). With every server advertising a Refusing address, the same
// servers form their full mesh through the relays once each also names
// its other peer, and no route is direct.
func TestRefusingAdvertiseNeeded(t *testing.T) {
	t.Run("without", func(t *testing.T) {
		n, srvs := natsTrio(t, map[string][]string{"nats-1": {"nats-2"}, "nats-2": {"nats-1", "nats-3"}, "nats-3": {"nats-2"}}, "")
		awaitRoute(t, srvs["nats-1"], "nats-3")
		if d := directRoutes(t, n, srvs); len(d) == 0 {
			t.Fatal("nats-1 reached nats-3 without a direct route: gossip no longer goes around the relays")
		} else {
			t.Logf("direct routes: %q", d)
		}
	})
	t.Run("refusing", func(t *testing.T) {
		r, err := NewRefusing()
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		all := map[string][]string{"nats-1": {"nats-2", "nats-3"}, "nats-2": {"nats-1", "nats-3"}, "nats-3": {"nats-1", "nats-2"}}
		n, srvs := natsTrio(t, all, r.Addr())
		for a, peers := range all {
			for _, b := range peers {
				awaitRoute(t, srvs[a], b)
			}
		}
		if d := directRoutes(t, n, srvs); len(d) != 0 {
			t.Fatalf("direct routes with the refusing advertise: %q", d)
		}
	})
}

// twoNodes listens for nodes a and b on loopback until the test ends.
func twoNodes(t *testing.T) (map[string]net.Listener, map[string]string) {
	t.Helper()
	ls, targets := map[string]net.Listener{}, map[string]string{}
	for _, id := range []string{"a", "b"} {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		ls[id], targets[id] = l, l.Addr().String()
	}
	return ls, targets
}

// relayedConn dials b through a's relay and returns both ends once the
// relay's connection to b is established.
func relayedConn(t *testing.T, n *Net, b net.Listener) (client, server net.Conn) {
	t.Helper()
	c, err := net.DialTimeout("tcp", n.DialAddrs("a")["b"], 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := b.Accept()
	if err != nil {
		c.Close()
		t.Fatal(err)
	}
	return c, srv
}
