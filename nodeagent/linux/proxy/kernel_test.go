package proxy

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/podflow/podflow/nodeagent/linux/network/networktest"
	corev1 "github.com/podflow/podflow/proto/corev1"
)

// node is a simulated host: a network namespace of its own holding a
// bridge, with pod namespaces on veths. Nothing in it has a way off the
// machine: the node namespace has no uplink at all.
type node struct {
	ns      string // the node's netns name
	bridge  string
	gateway string
	pods    map[string]string // pod ip -> netns name
}

func ipcmd(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

func newNode(t *testing.T, podIPs ...string) *node {
	t.Helper()
	networktest.RequireRoot(t)
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs iproute2's ip")
	}
	id := fmt.Sprintf("%06x", rand.Uint32N(1<<24))
	n := &node{ns: "pfpx-n-" + id, bridge: "pfpxbr" + id, gateway: "10.250.0.1", pods: map[string]string{}}
	t.Cleanup(func() { // everything lives in these namespaces: deleting them removes it all
		for _, ns := range n.pods {
			_ = exec.Command("ip", "netns", "del", ns).Run()
		}
		_ = exec.Command("ip", "netns", "del", n.ns).Run()
	})
	ipcmd(t, "netns", "add", n.ns)
	ipcmd(t, "-n", n.ns, "link", "set", "lo", "up")
	ipcmd(t, "-n", n.ns, "link", "add", n.bridge, "type", "bridge")
	ipcmd(t, "-n", n.ns, "addr", "add", n.gateway+"/24", "dev", n.bridge)
	ipcmd(t, "-n", n.ns, "link", "set", n.bridge, "up")
	if out, err := exec.Command("ip", "netns", "exec", n.ns, "sysctl", "-qw", "net.ipv4.conf."+n.bridge+".forwarding=1").CombinedOutput(); err != nil {
		t.Fatalf("forwarding: %v: %s", err, out)
	}
	// As network.Manager confines a bridge: what arrives on it looks up a
	// table of its own, unreachable but for what the proxy adds.
	ipcmd(t, "-n", n.ns, "rule", "add", "iif", n.bridge, "lookup", "7777", "pref", "32000")
	ipcmd(t, "-n", n.ns, "route", "add", "unreachable", "default", "table", "7777")
	for i, ip := range podIPs {
		ns := fmt.Sprintf("pfpx-p%d-%s", i, id)
		host := fmt.Sprintf("pfpxv%d%s", i, id)
		n.pods[ip] = ns
		ipcmd(t, "netns", "add", ns)
		ipcmd(t, "-n", n.ns, "link", "add", host, "type", "veth", "peer", "name", "eth0", "netns", ns)
		ipcmd(t, "-n", n.ns, "link", "set", host, "master", n.bridge, "up")
		ipcmd(t, "-n", ns, "addr", "add", ip+"/24", "dev", "eth0")
		ipcmd(t, "-n", ns, "link", "set", "eth0", "up")
		ipcmd(t, "-n", ns, "link", "set", "lo", "up")
		ipcmd(t, "-n", ns, "route", "add", "default", "via", n.gateway)
	}
	return n
}

// serve answers every connection to pod ip:8080 with its ip.
func (n *node) serve(t *testing.T, ip string) {
	t.Helper()
	var l net.Listener
	if err := networktest.Do("/run/netns/"+n.pods[ip], func() (err error) {
		l, err = net.Listen("tcp", ip+":8080")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			fmt.Fprintf(c, "%s\n", ip)
			c.Close()
		}
	}()
}

// ask connects from pod client to addr and returns who answered ("" and
// the error when nobody did).
func (n *node) ask(client, addr string) (string, error) {
	var c net.Conn
	err := networktest.Do("/run/netns/"+n.pods[client], func() (err error) {
		c, err = net.DialTimeout("tcp", addr, 300*time.Millisecond)
		return err
	})
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSpace(line), err
}

func (n *node) handle(t *testing.T) *netlink.Handle {
	t.Helper()
	ns, err := netns.GetFromName(n.ns)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Close() })
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	return h
}

func (n *node) tables(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("ip", "netns", "exec", n.ns, "nft", "list", "tables").CombinedOutput()
	if err != nil {
		t.Logf("nft list tables: %v: %s", err, out)
	}
	return string(out)
}

// The pods of the ClusterIP tests: two servers and a client, and the
// Service's address.
const s1, s2, client, vip = "10.250.0.11", "10.250.0.12", "10.250.0.20", "10.96.0.10"

// svc is the Service web at vip:80.
var svc = &corev1.Service{Metadata: &corev1.ObjectMeta{Namespace: "default", Name: "web"},
	Spec: &corev1.ServiceSpec{ClusterIp: vip, Ports: []*corev1.ServicePort{{Port: 80, Protocol: "TCP"}}}}

// eps is web's slice: s1 Ready, s2 as s2Ready says.
func eps(s2Ready bool) []*corev1.EndpointSlice {
	return []*corev1.EndpointSlice{slice("web", []*corev1.EndpointPort{sport("", "TCP", 8080)},
		ep{s1, true, true, false}, ep{s2, s2Ready, s2Ready, false})}
}

// startProxy builds a node with the servers serving and starts a proxy in
// it; safety first: it fails the test, sending nothing, unless the
// unreachable route is there.
func startProxy(t *testing.T) (*node, *Proxy, Config, *netlink.Handle) {
	t.Helper()
	n := newNode(t, s1, s2, client)
	n.serve(t, s1)
	n.serve(t, s2)
	h := n.handle(t)
	cfg := DefaultConfig("test-"+n.ns, n.bridge, n.gateway)
	cfg.NetNS = "/run/netns/" + n.ns
	cfg.PodCIDR, cfg.RouteTable = "10.250.0.0/24", 7777
	p, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	if ok, err := UnreachableRoute(h, cfg.ServiceCIDR); err != nil || !ok {
		t.Fatalf("unreachable route for %s present = %v, %v; sending nothing", cfg.ServiceCIDR, ok, err)
	}
	return n, p, cfg, h
}

// TestKernelClusterIP: a client pod connects to a ClusterIP and every
// answer comes from a Ready endpoint, both of them; an endpoint that turns
// unready gets no new connection once Sync returns; a deleted Service
// leaves no rule; Close leaves no table and no route.
func TestKernelClusterIP(t *testing.T) {
	n, p, cfg, h := startProxy(t)
	ctx := context.Background()
	if who, err := n.ask(client, vip+":80"); err == nil {
		t.Fatalf("ClusterIP answered (%s) before any rule", who)
	}

	if _, err := p.Sync(ctx, []*corev1.Service{svc}, eps(true)); err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for range 40 {
		who, err := n.ask(client, vip+":80")
		if err != nil {
			t.Fatalf("connect %s: %v", vip, err)
		}
		seen[who]++
	}
	if len(seen) != 2 || seen[s1] == 0 || seen[s2] == 0 {
		t.Fatalf("answers %v, want both %s and %s and nobody else", seen, s1, s2)
	}

	// s2 turns unready: once Sync returns, no new connection reaches it.
	start := time.Now()
	if changed, err := p.Sync(ctx, []*corev1.Service{svc}, eps(false)); err != nil || !changed {
		t.Fatalf("Sync = %v, %v", changed, err)
	}
	t.Logf("slice change programmed in %v", time.Since(start))
	for range 30 {
		if who, err := n.ask(client, vip+":80"); err != nil || who != s1 {
			t.Fatalf("answer %q, %v; want only %s", who, err, s1)
		}
	}
	if changed, _ := p.Sync(ctx, []*corev1.Service{svc}, eps(false)); changed {
		t.Error("an unchanged plan was reprogrammed")
	}

	// The Service goes: no rule, and the ClusterIP is answered locally.
	if _, err := p.Sync(ctx, nil, nil); err != nil {
		t.Fatal(err)
	}
	if who, err := n.ask(client, vip+":80"); err == nil {
		t.Fatalf("deleted Service answered by %s", who)
	}
	if !strings.Contains(n.tables(t), cfg.Table) {
		t.Fatalf("table %s missing while the proxy runs", cfg.Table)
	}

	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if tables := n.tables(t); strings.Contains(tables, cfg.Table) {
		t.Fatalf("table left after Close:\n%s", tables)
	}
	if ok, _ := UnreachableRoute(h, cfg.ServiceCIDR); ok {
		t.Fatal("unreachable route left after Close")
	}
}

// TestKernelFigures measures the figures in the isolated node:
// slice change → rules programmed (p50/p99 over 100 changes), and
// connections per second through the ClusterIP and straight to the pod
// IP, in the same run (one request per connection, from a pod).
func TestKernelFigures(t *testing.T) {
	n, p, _, _ := startProxy(t)
	ctx := context.Background()
	var lat []time.Duration
	for i := range 100 {
		start := time.Now()
		if changed, err := p.Sync(ctx, []*corev1.Service{svc}, eps(i%2 == 0)); err != nil || !changed {
			t.Fatalf("Sync %d = %v, %v", i, changed, err)
		}
		lat = append(lat, time.Since(start))
	}
	slices.Sort(lat)
	t.Logf("slice change → rules programmed, 100 changes: p50 %v, p99 %v", lat[49], lat[98])

	// Alternating rounds after a warm-up, so neither side pays for the
	// other's start.
	counts := map[string]int{}
	const round = 250 * time.Millisecond
	for i := range 9 {
		for _, addr := range []string{vip + ":80", s1 + ":8080"} {
			for start := time.Now(); time.Since(start) < round; {
				if _, err := n.ask(client, addr); err != nil {
					t.Fatalf("ask %s: %v", addr, err)
				}
				if i > 0 { // round 0 warms up
					counts[addr]++
				}
			}
		}
	}
	secs := 8 * round.Seconds()
	viaVIP, direct := float64(counts[vip+":80"])/secs, float64(counts[s1+":8080"])/secs
	t.Logf("connections/s (one request each, from a pod): ClusterIP %.0f, pod IP %.0f (%.0f%%)", viaVIP, direct, 100*viaVIP/direct)
}
