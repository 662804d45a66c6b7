package network

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/podflow/podflow/nodeagent/linux/network/networktest"
)

// testHost is a "machine" for the host-gw tests: a network namespace
// "pfhgw…" the test made, whose uplink is one end of a veth pair whose
// other end is another test host's uplink, and a Manager running in it.
type testHost struct {
	ns   string // name under /run/netns
	link string // the uplink
	ip   netip.Addr
	m    *Manager
}

func (h *testHost) path() string { return filepath.Join(NetnsDir, h.ns) }

func run(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%v: %v\n%s", args, err, out)
	}
}

// twoHosts makes two test hosts on a /24 of 198.18.0.0/15 (the
// benchmarking range: no real network uses it), forwarding enabled on
// their uplinks only, and a node with its bridge on each. Cleanup removes
// the nodes, then the namespaces (with the veth pair).
func twoHosts(t *testing.T) (a, b *testHost) {
	t.Helper()
	networktest.RequireRoot(t)
	id := rand.Uint32() & 0xffffff
	net3 := rand.IntN(256)
	a = &testHost{ns: fmt.Sprintf("pfhgw%06xa", id), link: fmt.Sprintf("pfup%06xa", id), ip: netip.AddrFrom4([4]byte{198, 18, byte(net3), 1})}
	b = &testHost{ns: fmt.Sprintf("pfhgw%06xb", id), link: fmt.Sprintf("pfup%06xb", id), ip: netip.AddrFrom4([4]byte{198, 18, byte(net3), 2})}
	for _, h := range []*testHost{a, b} {
		run(t, "ip", "netns", "add", h.ns)
		t.Cleanup(func() {
			if out, err := exec.Command("ip", "netns", "delete", h.ns).CombinedOutput(); err != nil {
				t.Errorf("ip netns delete %s: %v\n%s", h.ns, err, out)
			}
		})
	}
	run(t, "ip", "link", "add", a.link, "netns", a.ns, "type", "veth", "peer", "name", b.link, "netns", b.ns)
	cidrA, err := networktest.FreePodCIDR()
	if err != nil {
		t.Fatal(err)
	}
	cidrB := cidrA
	for cidrB == cidrA {
		if cidrB, err = networktest.FreePodCIDR(); err != nil {
			t.Fatal(err)
		}
	}
	for i, h := range []*testHost{a, b} {
		run(t, "ip", "-n", h.ns, "addr", "add", h.ip.String()+"/24", "dev", h.link)
		run(t, "ip", "-n", h.ns, "link", "set", h.link, "up")
		run(t, "ip", "-n", h.ns, "link", "set", "lo", "up")
		node := fmt.Sprintf("podflow-test-hostgw-%d-%d", rand.Int64(), i)
		err := networktest.Do(h.path(), func() (err error) {
			// Forwarding for what arrives from the other host, in this
			// namespace only.
			if err := os.WriteFile(filepath.Join("/proc/sys/net/ipv4/conf", h.link, "forwarding"), []byte("1"), 0o644); err != nil {
				return err
			}
			h.m, err = New(DefaultConfig(node, []string{cidrA, cidrB}[i], t.TempDir()))
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cleanupHostNode(t, h.m) })
		if err := h.m.EnsureBridge(testContext(t)); err != nil {
			t.Fatal(err)
		}
	}
	return a, b
}

// cleanupHostNode tears down a test host's node and checks, in that
// host's namespace, that its bridge and table are gone.
func cleanupHostNode(t *testing.T, m *Manager) {
	ctx := context.Background()
	atts, err := m.List(ctx)
	if err != nil {
		t.Errorf("cleanup list: %v", err)
	}
	for _, a := range atts {
		if err := m.Teardown(ctx, a.PodUID); err != nil {
			t.Errorf("cleanup teardown %s: %v", a.PodUID, err)
		}
	}
	if err := m.RemoveBridge(ctx); err != nil {
		t.Errorf("cleanup remove bridge: %v", err)
	}
	if _, err := m.host.LinkByName(m.cfg.BridgeName); err == nil {
		t.Errorf("bridge %q still exists", m.cfg.BridgeName)
	}
	if routes, err := m.host.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Table: m.cfg.RouteTable}, netlink.RT_FILTER_TABLE); err != nil || len(routes) > 0 {
		t.Errorf("table %d: %v, %v", m.cfg.RouteTable, routes, err)
	}
	m.Close()
}

// TestHostGWRoutes: two hosts (network namespaces joined by a veth pair,
// each its own address), a node on each. A pod of one reaches a pod of
// the other by its pod IP, without NAT, once both nodes have the other's
// pod CIDR routed via the other host (host-gw); not before, and not after
// the routes were withdrawn. Traffic from a pod to anything else stays
// unreachable.
func TestHostGWRoutes(t *testing.T) {
	a, b := twoHosts(t)
	ctx := testContext(t)
	a1, err := a.m.Setup(ctx, "a1")
	if err != nil {
		t.Fatal(err)
	}
	b1, err := b.m.Setup(ctx, "b1")
	if err != nil {
		t.Fatal(err)
	}
	lnA := listenIn(t, a1)
	lnB := listenIn(t, b1)
	if _, err := ask(b1.NetnsPath, lnA.Addr().String()); !errors.Is(err, syscall.EHOSTUNREACH) {
		t.Fatalf("across hosts without routes: %v, want EHOSTUNREACH", err)
	}
	hosts := []netip.Addr{a.ip, b.ip}
	cidrA, cidrB := netip.MustParsePrefix(a.m.cfg.PodCIDR), netip.MustParsePrefix(b.m.cfg.PodCIDR)
	if err := a.m.SetHostRoutes(ctx, []HostRoute{{CIDR: cidrB, Via: b.ip}}, hosts); err != nil {
		t.Fatal(err)
	}
	if err := b.m.SetHostRoutes(ctx, []HostRoute{{CIDR: cidrA, Via: a.ip}}, hosts); err != nil {
		t.Fatal(err)
	}
	if err := b.m.SetHostRoutes(ctx, []HostRoute{{CIDR: cidrA, Via: a.ip}}, hosts); err != nil {
		t.Fatalf("again: %v", err)
	}
	if got, err := ask(b1.NetnsPath, lnA.Addr().String()); err != nil || got != b1.IP {
		t.Fatalf("B's pod to A's: %q, %v; want seen from %s (no NAT)", got, err, b1.IP)
	}
	if got, err := ask(a1.NetnsPath, lnB.Addr().String()); err != nil || got != a1.IP {
		t.Fatalf("A's pod to B's: %q, %v; want seen from %s (no NAT)", got, err, a1.IP)
	}
	// From a pod of A: B's pods via B's address, everything else
	// unreachable — B's own address and the rest of B's subnet too.
	for _, dst := range []string{"192.0.2.1", "8.8.8.8", "10.244.250.1", b.ip.String(), "198.18.0.77"} {
		routes, err := a.m.host.RouteGetWithOptions(net.ParseIP(dst), &netlink.RouteGetOptions{Iif: a.m.cfg.BridgeName, SrcAddr: net.ParseIP(a1.IP)})
		if err == nil {
			t.Errorf("from a pod to %s: routed %v, want unreachable", dst, routes)
		} else if !errors.Is(err, unix.EHOSTUNREACH) {
			t.Errorf("from a pod to %s: %v, want EHOSTUNREACH", dst, err)
		}
	}
	routes, err := a.m.host.RouteGetWithOptions(net.ParseIP(b1.IP), &netlink.RouteGetOptions{Iif: a.m.cfg.BridgeName, SrcAddr: net.ParseIP(a1.IP)})
	if err != nil || len(routes) != 1 || !routes[0].Gw.Equal(b.ip.AsSlice()) {
		t.Errorf("from a pod of A to %s: %v, %v; want via %s", b1.IP, routes, err, b.ip)
	}

	// Withdrawn: the route goes, and so does the traffic.
	if err := a.m.SetHostRoutes(ctx, nil, hosts); err != nil {
		t.Fatal(err)
	}
	if got, err := a.m.HostRoutes(); err != nil || len(got) != 0 {
		t.Fatalf("host routes after withdrawing: %v, %v", got, err)
	}
	if _, err := ask(a1.NetnsPath, lnB.Addr().String()); !errors.Is(err, syscall.EHOSTUNREACH) {
		t.Fatalf("A's pod to B's after withdrawing: %v, want EHOSTUNREACH", err)
	}
}

// TestSetHostRoutesRefuses: host-gw routes only to pod CIDRs of the
// cluster CIDR, only via neighbouring hosts of the cluster. Each hostile
// route is refused while the valid one beside it is made; a refused
// route that was there before is removed.
func TestSetHostRoutesRefuses(t *testing.T) {
	a, b := twoHosts(t)
	ctx := testContext(t)
	cidrB := netip.MustParsePrefix(b.m.cfg.PodCIDR)
	far := netip.MustParseAddr("203.0.113.5") // a cluster host, but not on A's link
	stranger := b.ip.Next()                   // on A's link, but no host of the cluster
	hosts := []netip.Addr{a.ip, b.ip, far}
	valid := HostRoute{CIDR: cidrB, Via: b.ip}
	other := netip.MustParsePrefix("10.244.252.0/24")
	for _, tt := range []struct {
		name string
		r    HostRoute
	}{
		{"a CIDR outside the cluster CIDR", HostRoute{CIDR: netip.MustParsePrefix("192.0.2.0/24"), Via: b.ip}},
		{"everything", HostRoute{CIDR: netip.MustParsePrefix("0.0.0.0/0"), Via: b.ip}},
		{"the whole cluster CIDR", HostRoute{CIDR: netip.MustParsePrefix("10.0.0.0/8"), Via: b.ip}},
		{"this node's own CIDR", HostRoute{CIDR: netip.MustParsePrefix(a.m.cfg.PodCIDR), Via: b.ip}},
		{"a via that is no host of the cluster", HostRoute{CIDR: other, Via: stranger}},
		{"a via off the link", HostRoute{CIDR: other, Via: far}},
		{"this host's own address", HostRoute{CIDR: other, Via: a.ip}},
		{"not a prefix", HostRoute{CIDR: netip.PrefixFrom(netip.MustParseAddr("10.244.252.7"), 24), Via: b.ip}},
	} {
		err := a.m.SetHostRoutes(ctx, []HostRoute{valid, tt.r}, hosts)
		if !errors.Is(err, ErrHostRouteRefused) {
			t.Errorf("%s (%s): %v, want ErrHostRouteRefused", tt.name, tt.r, err)
		}
		got, lerr := a.m.HostRoutes()
		if lerr != nil || !slices.Equal(got, []HostRoute{valid}) {
			t.Errorf("%s: table holds %v, %v; want only %s", tt.name, got, lerr, valid)
		}
	}
	// A host that left the cluster: its route goes at the next sync.
	if err := a.m.SetHostRoutes(ctx, []HostRoute{valid}, []netip.Addr{a.ip}); !errors.Is(err, ErrHostRouteRefused) {
		t.Errorf("via a host that left: %v, want ErrHostRouteRefused", err)
	}
	if got, err := a.m.HostRoutes(); err != nil || len(got) != 0 {
		t.Errorf("after B left: %v, %v; want no host route", got, err)
	}
}
