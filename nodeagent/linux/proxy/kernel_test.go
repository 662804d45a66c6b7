package proxy

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"google.golang.org/protobuf/proto"

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
		ipcmd(t, "-n", n.ns, "link", "set", host, "type", "bridge_slave", "hairpin", "on") // as network.Manager's veths
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
// the error when nobody did). The bounds are generous: the connections
// these tests expect to fail are refused at once, not left unanswered,
// so the bounds are reached only on a machine so loaded that a connect
// over a veth pair is slow (300ms was, once).
func (n *node) ask(client, addr string) (string, error) {
	var c net.Conn
	err := networktest.Do("/run/netns/"+n.pods[client], func() (err error) {
		c, err = net.DialTimeout("tcp", addr, 3*time.Second)
		return err
	})
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
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
const s1, s2, client, client2, vip = "10.250.0.11", "10.250.0.12", "10.250.0.20", "10.250.0.21", "10.96.0.10"

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
	return startProxyWith(t, func(*Config) {})
}

// startProxyWith is startProxy with the config changed by mut.
func startProxyWith(t *testing.T, mut func(*Config)) (*node, *Proxy, Config, *netlink.Handle) {
	t.Helper()
	n := newNode(t, s1, s2, client, client2)
	n.serve(t, s1)
	n.serve(t, s2)
	h := n.handle(t)
	cfg := DefaultConfig("test-"+n.ns, n.bridge, n.gateway)
	cfg.NetNS = "/run/netns/" + n.ns
	cfg.PodCIDR, cfg.RouteTable = "10.250.0.0/24", 7777
	mut(&cfg)
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
	// other's start. Each path has a client pod of its own: a connection
	// straight to s1:8080 from a source port that a ClusterIP connection
	// (DNATed to s1:8080) still holds in conntrack would clash with its
	// reply tuple, and the kernel drops the clashing SYN.
	counts := map[string]int{}
	const round = 250 * time.Millisecond
	from := map[string]string{vip + ":80": client, s1 + ":8080": client2}
	for i := range 9 {
		for _, addr := range []string{vip + ":80", s1 + ":8080"} {
			for start := time.Now(); time.Since(start) < round; {
				if _, err := n.ask(from[addr], addr); err != nil {
					t.Fatalf("ask %s: %v", addr, err)
				}
				if i > 0 { // the first pass warms up
					counts[addr]++
				}
			}
		}
	}
	secs := 8 * round.Seconds()
	viaVIP, direct := float64(counts[vip+":80"])/secs, float64(counts[s1+":8080"])/secs
	t.Logf("connections/s (one request each, from a pod): ClusterIP %.0f, pod IP %.0f (%.0f%%)", viaVIP, direct, 100*viaVIP/direct)
}

// askN asks addr n times from pod from and counts who answered.
func (n *node) askN(t *testing.T, from, addr string, times int) map[string]int {
	t.Helper()
	seen := map[string]int{}
	for range times {
		who, err := n.ask(from, addr)
		if err != nil {
			t.Fatalf("connect %s from %s: %v", addr, from, err)
		}
		seen[who]++
	}
	return seen
}

// only returns the one key of seen, "" when there are several.
func only(seen map[string]int) string {
	if len(seen) != 1 {
		return ""
	}
	for k := range seen {
		return k
	}
	return ""
}

// affinitySet reads the affinity set of endpoint ep of the plan's first
// port from the kernel.
func affinitySet(t *testing.T, p *Proxy, cfg Config, ep string) *nftables.Set {
	t.Helper()
	plan := p.Plan()
	if len(plan.Ports) == 0 {
		t.Fatal("no port programmed")
	}
	c, err := p.conn()
	if err != nil {
		t.Fatal(err)
	}
	name := plan.Ports[0].affinitySet(netip.MustParseAddrPort(ep))
	set, err := c.GetSetByName(&nftables.Table{Family: nftables.TableFamilyIPv4, Name: cfg.Table}, name)
	if err != nil {
		t.Fatalf("set %s: %v", name, err)
	}
	return set
}

// affinityElements lists the clients in the affinity set of endpoint ep
// of the plan's first port.
func affinityElements(t *testing.T, p *Proxy, cfg Config, ep string) []nftables.SetElement {
	t.Helper()
	set := affinitySet(t, p, cfg, ep)
	c, err := p.conn()
	if err != nil {
		t.Fatal(err)
	}
	elems, err := c.GetSetElements(set)
	if err != nil {
		t.Fatalf("elements of %s: %v", set.Name, err)
	}
	return elems
}

// affinitySets names the table's affinity sets.
func affinitySets(t *testing.T, p *Proxy, cfg Config) []string {
	t.Helper()
	c, err := p.conn()
	if err != nil {
		t.Fatal(err)
	}
	_, sets, err := contents(c, &nftables.Table{Family: nftables.TableFamilyIPv4, Name: cfg.Table})
	if err != nil {
		t.Fatal(err)
	}
	return sets
}

// TestKernelSessionAffinity: with sessionAffinity ClientIP every
// connection of one client reaches one endpoint, and the client is in that
// endpoint's set with the Service's timeout; a sync for another change
// keeps what the set learnt; with affinity None the same client's
// connections spread again and no set is left.
func TestKernelSessionAffinity(t *testing.T) {
	n, p, cfg, _ := startProxy(t)
	ctx := context.Background()
	sticky := proto.Clone(svc).(*corev1.Service)
	sticky.Spec.SessionAffinity = AffinityClientIP
	sticky.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIp: &corev1.ClientIPConfig{TimeoutSeconds: proto.Int32(60)}}
	if _, err := p.Sync(ctx, []*corev1.Service{sticky}, eps(true)); err != nil {
		t.Fatal(err)
	}
	first := n.askN(t, client, vip+":80", 30)
	a := only(first)
	if a == "" {
		t.Fatalf("client %s reached %v, want one endpoint", client, first)
	}
	elems := affinityElements(t, p, cfg, a+":8080")
	if len(elems) != 1 || netip.AddrFrom4([4]byte(elems[0].Key)).String() != client {
		t.Fatalf("affinity set of %s holds %v, want just %s", a, elems, client)
	}
	// The element's timeout is the set's (the kernel reports only one
	// that differs); it expires within it.
	if set := affinitySet(t, p, cfg, a+":8080"); !set.HasTimeout || set.Timeout != 60*time.Second {
		t.Fatalf("affinity set %s has timeout %v (%v), want 60s", set.Name, set.Timeout, set.HasTimeout)
	}
	if to, exp := elems[0].Timeout, elems[0].Expires; (to != 0 && to != 60*time.Second) || exp <= 0 || exp > 60*time.Second {
		t.Fatalf("client's element has timeout %v, expires in %v; want the set's 60s", to, exp)
	}
	second := n.askN(t, client2, vip+":80", 30)
	if only(second) == "" {
		t.Fatalf("client %s reached %v, want one endpoint", client2, second)
	}
	t.Logf("client %s sticks to %s, client %s to %s", client, a, client2, only(second))

	// Another Service arrives: the rules are rewritten, the sets kept.
	other := service("other", "10.96.0.11", port("", "TCP", 80))
	otherEps := slice("other", []*corev1.EndpointPort{sport("", "TCP", 8080)}, ep{s2, true, true, false})
	if changed, err := p.Sync(ctx, []*corev1.Service{sticky, other}, append(eps(true), otherEps)); err != nil || !changed {
		t.Fatalf("Sync = %v, %v", changed, err)
	}
	if elems := affinityElements(t, p, cfg, a+":8080"); !slices.ContainsFunc(elems, func(e nftables.SetElement) bool {
		return netip.AddrFrom4([4]byte(e.Key)).String() == client
	}) {
		t.Fatalf("after a sync the affinity set of %s holds %v, want %s still", a, elems, client)
	}
	if again := n.askN(t, client, vip+":80", 20); only(again) != a {
		t.Fatalf("after a sync client %s reached %v, want only %s", client, again, a)
	}

	// Affinity None: the same client spreads over both, and no set is left.
	if changed, err := p.Sync(ctx, []*corev1.Service{svc}, eps(true)); err != nil || !changed {
		t.Fatalf("Sync = %v, %v", changed, err)
	}
	if sets := affinitySets(t, p, cfg); len(sets) != 0 {
		t.Fatalf("sets %v left with affinity None", sets)
	}
	if spread := n.askN(t, client, vip+":80", 40); len(spread) != 2 {
		t.Fatalf("with affinity None client %s reached %v, want both endpoints", client, spread)
	}
}

// serveUDP answers every datagram to pod ip:5353 with its ip.
func (n *node) serveUDP(t *testing.T, ip string) {
	t.Helper()
	var c net.PacketConn
	if err := networktest.Do("/run/netns/"+n.pods[ip], func() (err error) {
		c, err = net.ListenPacket("udp", ip+":5353")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	go func() {
		buf := make([]byte, 64)
		for {
			_, from, err := c.ReadFrom(buf)
			if err != nil {
				return
			}
			_, _ = c.WriteTo([]byte(ip), from)
		}
	}()
}

// udpClient is a UDP socket of pod from connected to addr: every datagram
// leaves from the same source port, one conntrack entry.
func (n *node) udpClient(t *testing.T, from, addr string) *net.UDPConn {
	t.Helper()
	var c *net.UDPConn
	if err := networktest.Do("/run/netns/"+n.pods[from], func() (err error) {
		c, err = net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(netip.MustParseAddrPort(addr)))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// askUDP sends one datagram on c and returns who answered.
func askUDP(c *net.UDPConn) (string, error) {
	if _, err := c.Write([]byte("who")); err != nil {
		return "", err
	}
	_ = c.SetReadDeadline(time.Now().Add(time.Second))
	buf := make([]byte, 64)
	n, err := c.Read(buf)
	return string(buf[:n]), err
}

// flowsTo lists the node's UDP conntrack entries to vip that were DNATed
// to ip.
func flowsTo(t *testing.T, h *netlink.Handle, ip string) int {
	t.Helper()
	flows, err := h.ConntrackTableList(netlink.ConntrackTable, netlink.FAMILY_V4)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range flows {
		if f.Forward.Protocol == 17 && f.Forward.DstIP.String() == vip && f.Reverse.SrcIP.String() == ip {
			n++
		}
	}
	return n
}

// TestKernelUDPStaleFlows: a UDP client that keeps sending from one source
// port reaches the new endpoint once the old one is replaced in the slice
// (the old flow's conntrack entry is flushed; without it every datagram
// would still be DNATed to the old endpoint, which here still listens),
// and once the Service is gone it reaches nobody.
func TestKernelUDPStaleFlows(t *testing.T) {
	n, p, _, h := startProxy(t)
	ctx := context.Background()
	n.serveUDP(t, s1)
	n.serveUDP(t, s2)
	dns := service("dns", vip, port("dns", "UDP", 53))
	only := func(ip string) []*corev1.EndpointSlice {
		return []*corev1.EndpointSlice{slice("dns", []*corev1.EndpointPort{sport("dns", "UDP", 5353)}, ep{ip, true, true, false})}
	}
	if _, err := p.Sync(ctx, []*corev1.Service{dns}, only(s1)); err != nil {
		t.Fatal(err)
	}
	c := n.udpClient(t, client, vip+":53")
	for range 3 {
		if who, err := askUDP(c); err != nil || who != s1 {
			t.Fatalf("answer %q, %v; want %s", who, err, s1)
		}
	}
	if flowsTo(t, h, s1) != 1 {
		t.Fatalf("want one UDP flow %s → %s", vip, s1)
	}

	// s1 is replaced by s2: the same socket reaches s2.
	if changed, err := p.Sync(ctx, []*corev1.Service{dns}, only(s2)); err != nil || !changed {
		t.Fatalf("Sync = %v, %v", changed, err)
	}
	if left := flowsTo(t, h, s1); left != 0 {
		t.Fatalf("%d UDP flows to the replaced endpoint %s left", left, s1)
	}
	for range 3 {
		if who, err := askUDP(c); err != nil || who != s2 {
			t.Fatalf("after the replacement answer %q, %v; want %s", who, err, s2)
		}
	}

	// The Service goes: its flow with it, so nobody answers.
	if _, err := p.Sync(ctx, nil, nil); err != nil {
		t.Fatal(err)
	}
	if who, err := askUDP(c); err == nil {
		t.Fatalf("deleted Service answered by %s", who)
	}
}

// TestKernelServiceCIDR: a proxy configured with a non-default service
// CIDR routes that CIDR unreachable (and not the default one), programs a
// ClusterIP inside it and none outside it, and removes its route on Close.
func TestKernelServiceCIDR(t *testing.T) {
	const cidr, inside = "10.100.0.0/24", "10.100.0.10"
	n, p, cfg, h := startProxyWith(t, func(c *Config) { c.ServiceCIDR = cidr })
	if ok, err := UnreachableRoute(h, DefaultConfig("x", "x", "10.0.0.1").ServiceCIDR); err != nil || ok {
		t.Fatalf("default service CIDR routed (%v, %v) by a proxy of %s", ok, err, cidr)
	}
	in := service("in", inside, port("", "TCP", 80))
	out := service("out", vip, port("", "TCP", 80)) // 10.96.0.10: outside
	sl := func(svc string) *corev1.EndpointSlice {
		return slice(svc, []*corev1.EndpointPort{sport("", "TCP", 8080)}, ep{s1, true, true, false})
	}
	if _, err := p.Sync(context.Background(), []*corev1.Service{in, out}, []*corev1.EndpointSlice{sl("in"), sl("out")}); err != nil {
		t.Fatal(err)
	}
	if ports := p.Plan().Ports; len(ports) != 1 || ports[0].IP.String() != inside {
		t.Fatalf("programmed %+v, want only %s", ports, inside)
	}
	if who, err := n.ask(client, inside+":80"); err != nil || who != s1 {
		t.Fatalf("ClusterIP %s: answer %q, %v; want %s", inside, who, err, s1)
	}
	if who, err := n.ask(client, vip+":80"); err == nil {
		t.Fatalf("ClusterIP %s outside %s answered by %s", vip, cidr, who)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if ok, _ := UnreachableRoute(h, cfg.ServiceCIDR); ok {
		t.Fatalf("unreachable route for %s left after Close", cidr)
	}
}

// TestKernelNodePort: a NodePort Service answers on the node's address
// and its node port, from a pod and from the host (the node's namespace),
// from every Ready endpoint; the same address and port reached from an
// interface that is not a podflow bridge is not proxied (nothing listens
// there: refused); the node port goes with the Service.
func TestKernelNodePort(t *testing.T) {
	n, p, _, _ := startProxy(t)
	ctx := context.Background()
	np := proto.Clone(svc).(*corev1.Service)
	np.Spec.Type = "NodePort"
	np.Spec.Ports[0].NodePort = 30080
	nodePort := n.gateway + ":30080"
	if who, err := n.ask(client, nodePort); err == nil {
		t.Fatalf("node port answered (%s) before any rule", who)
	}
	if _, err := p.Sync(ctx, []*corev1.Service{np}, eps(true)); err != nil {
		t.Fatal(err)
	}
	if seen := n.askN(t, client, nodePort, 40); len(seen) != 2 || seen[s1] == 0 || seen[s2] == 0 {
		t.Fatalf("answers from a pod %v, want both %s and %s", seen, s1, s2)
	}
	// The host: a process in the node's namespace.
	seen := map[string]int{}
	for range 40 {
		who, err := n.askFrom(n.ns, nodePort)
		if err != nil {
			t.Fatalf("connect %s from the host: %v", nodePort, err)
		}
		seen[who]++
	}
	if len(seen) != 2 || seen[s1] == 0 || seen[s2] == 0 {
		t.Fatalf("answers from the host %v, want both %s and %s", seen, s1, s2)
	}
	// From another interface: a namespace on a veth that is no podflow
	// bridge, routed to the node's address.
	outside := "pfpx-o-" + n.ns[len("pfpx-n-"):]
	hostEnd := "xo" + n.ns[len("pfpx-n-"):]
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", outside).Run() })
	ipcmd(t, "netns", "add", outside)
	ipcmd(t, "-n", n.ns, "link", "add", hostEnd, "type", "veth", "peer", "name", "eth0", "netns", outside)
	ipcmd(t, "-n", n.ns, "addr", "add", "10.251.0.1/24", "dev", hostEnd)
	ipcmd(t, "-n", n.ns, "link", "set", hostEnd, "up")
	ipcmd(t, "-n", outside, "addr", "add", "10.251.0.2/24", "dev", "eth0")
	ipcmd(t, "-n", outside, "link", "set", "eth0", "up")
	ipcmd(t, "-n", outside, "route", "add", "default", "via", "10.251.0.1")
	// Forwarded, and replies from the pods could reach it: only the
	// rules keep it out.
	ipcmd(t, "-n", n.ns, "route", "add", "10.251.0.0/24", "dev", hostEnd, "table", "7777")
	if out, err := exec.Command("ip", "netns", "exec", n.ns, "sysctl", "-qw", "net.ipv4.conf."+hostEnd+".forwarding=1").CombinedOutput(); err != nil {
		t.Fatalf("forwarding: %v: %s", err, out)
	}
	if who, err := n.askFrom(outside, s1+":8080"); err != nil || who != s1 {
		t.Fatalf("the outside namespace does not reach the pods (%s, %v): the check below proves nothing", who, err)
	}
	if who, err := n.askFrom(outside, nodePort); err == nil {
		t.Fatalf("node port proxied for a packet from a non-podflow interface: answered by %s", who)
	}
	if who, err := n.askFrom(outside, n.gateway+":1"); err == nil || !strings.Contains(err.Error(), "refused") {
		t.Fatalf("the outside namespace does not reach the node (%s, %v): the check above proves nothing", who, err)
	}

	if _, err := p.Sync(ctx, nil, nil); err != nil {
		t.Fatal(err)
	}
	if who, err := n.ask(client, nodePort); err == nil {
		t.Fatalf("deleted NodePort Service answered by %s", who)
	}
}

// askFrom connects from the namespace ns to addr and returns who answered.
func (n *node) askFrom(ns, addr string) (string, error) {
	var c net.Conn
	err := networktest.Do("/run/netns/"+ns, func() (err error) {
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

// TestKernelHairpin: an endpoint reaching itself through its Service's
// ClusterIP is answered (by itself): the hairpin SNAT to the gateway,
// which would not match on the input interface with br_netfilter loaded.
func TestKernelHairpin(t *testing.T) {
	n, p, _, _ := startProxy(t)
	if _, err := p.Sync(context.Background(), []*corev1.Service{svc}, eps(false)); err != nil { // s1 alone
		t.Fatal(err)
	}
	for range 5 {
		if who, err := n.ask(s1, vip+":80"); err != nil || who != s1 {
			t.Fatalf("%s → its own Service: %q, %v; want itself", s1, who, err)
		}
	}
}
