package network

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/podflow/podflow/nodeagent/linux/network/networktest"
)

// These tests need root: each creates its own bridges (unique "pf…" names),
// namespaces "podflow-pf…-…" and veths, in free /24s of 10.244.0.0/16, and
// removes them in t.Cleanup even when it fails. Traffic stays between the
// host and namespaces the test created.

func testContext(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// newNode starts a Manager for a fresh node with its bridge up; cleanup
// tears down its pods, removes the bridge and checks the kernel is clean.
func newNode(t testing.TB, dataDir string) *Manager {
	t.Helper()
	networktest.RequireRoot(t)
	cidr, err := networktest.FreePodCIDR()
	if err != nil {
		t.Fatal(err)
	}
	node := fmt.Sprintf("podflow-test-%s-%d", t.Name(), rand.Int64())
	if dataDir == "" {
		dataDir = t.TempDir()
	}
	m, err := New(DefaultConfig(node, cidr, dataDir))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cleanupNode(t, m) })
	if err := m.EnsureBridge(testContext(t)); err != nil {
		t.Fatal(err)
	}
	return m
}

func cleanupNode(t testing.TB, m *Manager) {
	ctx := context.Background()
	atts, err := m.List(ctx)
	if err != nil {
		t.Errorf("cleanup list: %v", err)
	}
	for _, a := range atts {
		if err := m.Teardown(ctx, a.PodUID); err != nil {
			t.Errorf("cleanup teardown %s: %v", a.PodUID, err)
		}
		requireGone(t, m, a.PodUID)
	}
	if err := m.RemoveBridge(ctx); err != nil {
		t.Errorf("cleanup remove bridge: %v", err)
	}
	requireBridgeGone(t, m)
	m.Close()
}

// requireGone asks the kernel and the disk that nothing of the pod remains.
func requireGone(t testing.TB, m *Manager, uid string) {
	t.Helper()
	if _, err := netlink.LinkByName(m.HostVethName(uid)); err == nil {
		t.Errorf("host veth %q of %s still exists", m.HostVethName(uid), uid)
	}
	if _, err := os.Lstat(filepath.Join(NetnsDir, m.NetnsName(uid))); err == nil {
		t.Errorf("netns %q still exists", m.NetnsName(uid))
	}
	if mountedAt(t, filepath.Join(NetnsDir, m.NetnsName(uid))) {
		t.Errorf("netns %q still mounted", m.NetnsName(uid))
	}
	held, err := m.ipam.list()
	if err != nil {
		t.Fatal(err)
	}
	if ip, ok := held[uid]; ok {
		t.Errorf("address %s of %s not released", ip, uid)
	}
}

func requireBridgeGone(t testing.TB, m *Manager) {
	t.Helper()
	if _, err := netlink.LinkByName(m.cfg.BridgeName); err == nil {
		t.Errorf("bridge %q still exists", m.cfg.BridgeName)
	}
	rules, err := netlink.RuleList(netlink.FAMILY_V4)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rules {
		if r.Table == m.cfg.RouteTable || r.IifName == m.cfg.BridgeName {
			t.Errorf("rule %v of %q remains", r, m.cfg.BridgeName)
		}
	}
	routes, err := netlink.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Table: m.cfg.RouteTable}, netlink.RT_FILTER_TABLE)
	if err != nil {
		t.Fatal(err)
	}
	if len(routes) > 0 {
		t.Errorf("table %d still has %v", m.cfg.RouteTable, routes)
	}
	if out, err := exec.Command("nft", "list", "table", "ip", m.cfg.HostPortTable()).CombinedOutput(); err == nil {
		t.Errorf("hostport table %s remains:\n%s", m.cfg.HostPortTable(), out)
	}
}

func mountedAt(t testing.TB, path string) bool { return countMounts(t, path) > 0 }

func readSysctl(t testing.TB, key string) string {
	b, err := os.ReadFile(filepath.Join("/proc/sys/net/ipv4/conf", key, "forwarding"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func TestSetupTeardown(t *testing.T) {
	networktest.RequireRoot(t)
	globals := map[string]string{}
	for _, k := range []string{"all", "default", "eth0"} {
		if _, err := os.Stat(filepath.Join("/proc/sys/net/ipv4/conf", k)); err == nil {
			globals[k] = readSysctl(t, k)
		}
	}
	m := newNode(t, "")
	ctx := testContext(t)
	if err := m.EnsureBridge(ctx); err != nil {
		t.Fatalf("second EnsureBridge: %v", err)
	}
	for k, v := range globals {
		if got := readSysctl(t, k); got != v {
			t.Errorf("net.ipv4.conf.%s.forwarding changed from %s to %s", k, v, got)
		}
	}
	if got := readSysctl(t, m.cfg.BridgeName); got != "1" {
		t.Errorf("forwarding on the bridge = %s, want 1", got)
	}
	br, err := netlink.LinkByName(m.cfg.BridgeName)
	if err != nil {
		t.Fatal(err)
	}
	if br.Attrs().Flags&net.FlagUp == 0 {
		t.Error("bridge is down")
	}

	uid := "3f2a9c1e-0000-4000-8000-00000000000a"
	att, err := m.Setup(ctx, uid)
	if err != nil {
		t.Fatal(err)
	}
	if att.Gateway != m.gateway.String() || !m.subnet.Contains(netip.MustParseAddr(att.IP)) || att.IP == att.Gateway {
		t.Fatalf("attachment %+v outside %s", att, m.subnet)
	}
	if len(att.HostVeth) > 15 || !strings.HasPrefix(att.HostVeth, "pf") || !strings.HasPrefix(att.NetnsName, "podflow-") {
		t.Fatalf("names %q, %q", att.HostVeth, att.NetnsName)
	}
	before, err := netlink.LinkByName(att.HostVeth)
	if err != nil {
		t.Fatal(err)
	}
	again, err := m.Setup(ctx, uid)
	if err != nil || again != att {
		t.Fatalf("second Setup = %+v, %v; want %+v", again, err, att)
	}
	if after, err := netlink.LinkByName(att.HostVeth); err != nil || after.Attrs().Index != before.Attrs().Index {
		t.Fatalf("second Setup replaced the veth pair (index %d → %v, %v)", before.Attrs().Index, after, err)
	}

	// The kernel's view: the host end is a port of the bridge and up; in
	// the namespace eth0 has the address and is up, lo is up, and the
	// default route goes via the gateway.
	host, err := netlink.LinkByName(att.HostVeth)
	if err != nil {
		t.Fatal(err)
	}
	if host.Attrs().MasterIndex != br.Attrs().Index || host.Attrs().Flags&net.FlagUp == 0 {
		t.Errorf("host veth master %d (bridge %d), flags %v", host.Attrs().MasterIndex, br.Attrs().Index, host.Attrs().Flags)
	}
	err = networktest.Do(att.NetnsPath, func() error {
		eth, err := netlink.LinkByName(PodInterface)
		if err != nil {
			return err
		}
		if eth.Attrs().Flags&net.FlagUp == 0 || eth.Attrs().MTU != m.cfg.MTU {
			return fmt.Errorf("eth0 flags %v mtu %d", eth.Attrs().Flags, eth.Attrs().MTU)
		}
		addrs, err := netlink.AddrList(eth, netlink.FAMILY_V4)
		if err != nil {
			return err
		}
		if len(addrs) != 1 || addrs[0].IPNet.String() != fmt.Sprintf("%s/%d", att.IP, m.subnet.Bits()) {
			return fmt.Errorf("eth0 addresses %v, want %s/%d", addrs, att.IP, m.subnet.Bits())
		}
		lo, err := netlink.LinkByName("lo")
		if err != nil {
			return err
		}
		if lo.Attrs().Flags&net.FlagUp == 0 {
			return errors.New("lo is down")
		}
		routes, err := netlink.RouteGet(net.ParseIP("10.244.255.254"))
		if err != nil {
			return err
		}
		if len(routes) != 1 || routes[0].Gw.String() != att.Gateway {
			return fmt.Errorf("route to 10.244.255.254: %v, want via %s", routes, att.Gateway)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	atts, err := m.List(ctx)
	if err != nil || len(atts) != 1 || atts[0] != att {
		t.Fatalf("List = %+v, %v; want [%+v]", atts, err, att)
	}
	if err := m.Teardown(ctx, uid); err != nil {
		t.Fatal(err)
	}
	requireGone(t, m, uid)
	if err := m.Teardown(ctx, uid); err != nil {
		t.Fatalf("second Teardown: %v", err)
	}
	if atts, err := m.List(ctx); err != nil || len(atts) != 0 {
		t.Fatalf("List after teardown = %+v, %v", atts, err)
	}
}

// TestSetupRollsBack makes Setup fail half-way (the host veth's name is
// taken by a dummy link) and checks that it leaves nothing behind.
func TestSetupRollsBack(t *testing.T) {
	m := newNode(t, "")
	ctx := testContext(t)
	uid := "rollback-pod"
	dummy := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: m.HostVethName(uid)}}
	if err := netlink.LinkAdd(dummy); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = netlink.LinkDel(dummy) })
	_, err := m.Setup(ctx, uid)
	if !errors.Is(err, ErrLinkConflict) || !errors.Is(err, ErrSandbox) {
		t.Fatalf("Setup = %v, want ErrLinkConflict with CodeSandbox", err)
	}
	if _, err := os.Lstat(filepath.Join(NetnsDir, m.NetnsName(uid))); err == nil {
		t.Error("netns left behind")
	}
	if held, _ := m.ipam.list(); len(held) != 0 {
		t.Errorf("address left allocated: %v", held)
	}
	if err := netlink.LinkDel(dummy); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Setup(ctx, uid); err != nil {
		t.Fatalf("Setup once the name is free: %v", err)
	}
}

// TestEnsureBridgeRefusesForeignPorts: a non-veth port on the bridge (here
// an ifb device; a real interface would be the danger) is refused.
func TestEnsureBridgeRefusesForeignPorts(t *testing.T) {
	m := newNode(t, "")
	br, err := netlink.LinkByName(m.cfg.BridgeName)
	if err != nil {
		t.Fatal(err)
	}
	name := fmt.Sprintf("pfport%d", rand.IntN(1e6))
	t.Cleanup(func() {
		l, err := netlink.LinkByName(name)
		if err == nil {
			err = netlink.LinkDel(l)
		}
		t.Logf("cleanup %s: %v", name, err)
	})
	port := &netlink.Ifb{LinkAttrs: netlink.LinkAttrs{Name: name, MasterIndex: br.Attrs().Index}}
	if err := netlink.LinkAdd(port); err != nil {
		t.Skipf("cannot make a non-veth bridge port here: %v", err)
	}
	if err := m.EnsureBridge(testContext(t)); !errors.Is(err, ErrLinkConflict) {
		t.Fatalf("EnsureBridge with a bridge port = %v, want ErrLinkConflict", err)
	}
}

// TestRecoveryAfterRestart: a new Manager over the same data dir (a
// restarted agent) lists the pod from the kernel and disk and Setup gives
// it the same address; a pod whose namespace vanished is healed.
func TestRecoveryAfterRestart(t *testing.T) {
	dataDir := t.TempDir()
	m := newNode(t, dataDir)
	ctx := testContext(t)
	att, err := m.Setup(ctx, "survivor")
	if err != nil {
		t.Fatal(err)
	}
	broken, err := m.Setup(ctx, "broken")
	if err != nil {
		t.Fatal(err)
	}
	if err := deleteNetns(broken.NetnsName); err != nil { // veth and IP stay
		t.Fatal(err)
	}

	m2, err := New(m.cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer m2.Close()
	atts, err := m2.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(atts) != 2 || atts[1] != att || atts[0].PodUID != "broken" || atts[0].IP != broken.IP || atts[0].NetnsName != "" {
		t.Fatalf("List after restart = %+v", atts)
	}
	got, err := m2.Setup(ctx, "survivor")
	if err != nil || got != att {
		t.Fatalf("Setup after restart = %+v, %v; want %+v", got, err, att)
	}
	healed, err := m2.Setup(ctx, "broken")
	if err != nil || healed != broken {
		t.Fatalf("healing Setup = %+v, %v; want %+v", healed, err, broken)
	}

	// The address record of "survivor" is lost (a wiped data dir): Setup
	// allocates again, and eth0 is left with the new address only.
	if err := m2.ipam.release("survivor"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := m2.ipam.allocate("placeholder"); err != nil { // take survivor's old address
		t.Fatal(err)
	}
	moved, err := m2.Setup(ctx, "survivor")
	if err != nil || moved.IP == att.IP {
		t.Fatalf("Setup after losing the record = %+v, %v", moved, err)
	}
	if err := networktest.Do(moved.NetnsPath, func() error {
		eth, err := netlink.LinkByName(PodInterface)
		if err != nil {
			return err
		}
		addrs, err := netlink.AddrList(eth, netlink.FAMILY_V4)
		if err != nil {
			return err
		}
		if len(addrs) != 1 || addrs[0].IP.String() != moved.IP {
			return fmt.Errorf("eth0 has %v, want only %s", addrs, moved.IP)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := m2.ipam.release("placeholder"); err != nil {
		t.Fatal(err)
	}
	if err := networktest.Do(healed.NetnsPath, func() error {
		_, err := netlink.LinkByName(PodInterface)
		return err
	}); err != nil {
		t.Fatalf("healed pod has no eth0: %v", err)
	}
}

// TestSetupConcurrent sets up and tears down many pods at once.
func TestSetupConcurrent(t *testing.T) {
	m := newNode(t, "")
	ctx := testContext(t)
	const n = 20
	atts := make([]Attachment, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { atts[i], errs[i] = m.Setup(ctx, fmt.Sprintf("pod-%02d", i)) })
	}
	wg.Wait()
	ips := map[string]bool{}
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("pod-%02d: %v", i, errs[i])
		}
		if ips[atts[i].IP] {
			t.Fatalf("address %s given twice", atts[i].IP)
		}
		ips[atts[i].IP] = true
	}
	for i := range n {
		wg.Go(func() { errs[i] = m.Teardown(ctx, fmt.Sprintf("pod-%02d", i)) })
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("teardown pod-%02d: %v", i, errs[i])
		}
		requireGone(t, m, fmt.Sprintf("pod-%02d", i))
	}
}

// whoServer accepts on ln and answers each connection with the address
// the connection came from, then closes it.
func whoServer(t *testing.T, ln net.Listener) {
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			host, _, _ := net.SplitHostPort(c.RemoteAddr().String())
			_, _ = c.Write([]byte(host + "\n"))
			c.Close()
		}
	})
}

func listenIn(t *testing.T, att Attachment) net.Listener {
	var ln net.Listener
	err := networktest.Do(att.NetnsPath, func() (err error) {
		ln, err = net.Listen("tcp", net.JoinHostPort(att.IP, "0"))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	whoServer(t, ln)
	return ln
}

// ask dials addr (from the namespace at nsPath, or the host when "") and
// returns what the server answered: the caller's address as it saw it.
func ask(nsPath, addr string) (string, error) {
	var c net.Conn
	dial := func() (err error) {
		d := net.Dialer{Timeout: 10 * time.Second}
		c, err = d.Dial("tcp", addr)
		return err
	}
	var err error
	if nsPath == "" {
		err = dial()
	} else {
		err = networktest.Do(nsPath, dial)
	}
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSpace(line), err
}

// TestPodToPod: two nodes on one machine, each with its own bridge and
// CIDR. A TCP server in a pod of node A is reached from another pod of A
// (bridged), from a pod of node B (routed through the host once both
// agents added peer routes, without NAT), and from the host. Before the
// peer routes, and for any destination off the machine, the kernel says
// unreachable.
func TestPodToPod(t *testing.T) {
	a := newNode(t, "")
	b := newNode(t, "")
	ctx := testContext(t)
	a1, err := a.Setup(ctx, "a1")
	if err != nil {
		t.Fatal(err)
	}
	a2, err := a.Setup(ctx, "a2")
	if err != nil {
		t.Fatal(err)
	}
	b1, err := b.Setup(ctx, "b1")
	if err != nil {
		t.Fatal(err)
	}
	ln := listenIn(t, a1)
	addr := ln.Addr().String()

	if got, err := ask(a2.NetnsPath, addr); err != nil || got != a2.IP {
		t.Fatalf("same node: %q, %v; want seen from %s", got, err, a2.IP)
	}
	if got, err := ask("", addr); err != nil || got != a1.Gateway {
		t.Fatalf("from the host: %q, %v; want seen from %s", got, err, a1.Gateway)
	}
	if _, err := ask(b1.NetnsPath, addr); !errors.Is(err, syscall.EHOSTUNREACH) {
		t.Fatalf("across nodes without peer routes: %v, want EHOSTUNREACH", err)
	}

	if err := a.AddPeerRoute(ctx, b.cfg.PodCIDR, b1.Gateway); err != nil {
		t.Fatal(err)
	}
	if err := b.AddPeerRoute(ctx, a.cfg.PodCIDR, ""); err != nil {
		t.Fatal(err)
	}
	if err := b.AddPeerRoute(ctx, a.cfg.PodCIDR, ""); err != nil {
		t.Fatalf("second AddPeerRoute: %v", err)
	}
	if got, err := ask(b1.NetnsPath, addr); err != nil || got != b1.IP {
		t.Fatalf("across nodes: %q, %v; want seen from %s (no NAT)", got, err, b1.IP)
	}

	// The kernel's routing decision for packets arriving from a pod: to the
	// peer bridge, and nowhere off the machine. RouteGet sends nothing.
	for _, dst := range []string{"192.0.2.1", "8.8.8.8", "10.244.250.1"} {
		routes, err := netlink.RouteGetWithOptions(net.ParseIP(dst), &netlink.RouteGetOptions{Iif: a.cfg.BridgeName, SrcAddr: net.ParseIP(a1.IP)})
		if err == nil {
			t.Errorf("from a pod to %s: routed %v, want unreachable", dst, routes)
		} else if !errors.Is(err, unix.EHOSTUNREACH) {
			t.Errorf("from a pod to %s: %v, want EHOSTUNREACH", dst, err)
		}
	}
	routes, err := netlink.RouteGetWithOptions(net.ParseIP(b1.IP), &netlink.RouteGetOptions{Iif: a.cfg.BridgeName, SrcAddr: net.ParseIP(a1.IP)})
	bbr, _ := netlink.LinkByName(b.cfg.BridgeName)
	if err != nil || len(routes) != 1 || bbr == nil || routes[0].LinkIndex != bbr.Attrs().Index {
		t.Errorf("from a pod of A to %s: %v, %v; want out of %s", b1.IP, routes, err, b.cfg.BridgeName)
	}
}

func TestAddPeerRouteRefusesNonPodflowPeers(t *testing.T) {
	m := newNode(t, "")
	ctx := testContext(t)
	for _, tt := range []struct{ cidr, via string }{
		{"192.0.2.0/24", ""},    // the real network
		{"10.244.251.0/24", ""}, // nobody serves it
		{"0.0.0.0/0", ""},       // everything
		{"10.244.251.0/24", "192.0.2.1"},
	} {
		if err := m.AddPeerRoute(ctx, tt.cidr, tt.via); !errors.Is(err, ErrPeerNotLocal) && !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("AddPeerRoute(%s, %q) = %v, want refused", tt.cidr, tt.via, err)
		}
	}
	if err := m.AddPeerRoute(ctx, m.cfg.PodCIDR, ""); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("AddPeerRoute(own CIDR) = %v, want ErrInvalidArgument", err)
	}
}

// TestNoThreadLeftInPodNetns: after creating namespaces and running code in
// them, every thread of the process is back in the host namespace (a
// thread left behind would make later host operations land in a pod).
func TestNoThreadLeftInPodNetns(t *testing.T) {
	m := newNode(t, "")
	ctx := testContext(t)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			att, err := m.Setup(ctx, fmt.Sprintf("thread-%d", i))
			if err != nil {
				t.Error(err)
				return
			}
			if err := networktest.Do(att.NetnsPath, func() error { return nil }); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	host, err := os.Readlink("/proc/thread-self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	tasks, err := filepath.Glob("/proc/self/task/*/ns/net")
	if err != nil || len(tasks) == 0 {
		t.Fatalf("threads: %v, %v", tasks, err)
	}
	for _, p := range tasks {
		if l, err := os.Readlink(p); err == nil && l != host {
			t.Errorf("thread %s is in %s, not the host's %s", p, l, host)
		}
	}
}

// TestEnsureBridgeNewCIDR: a node that comes back with another pod CIDR
// gets a bridge holding only the new gateway.
func TestEnsureBridgeNewCIDR(t *testing.T) {
	m := newNode(t, "")
	cidr, err := networktest.FreePodCIDR()
	if err != nil {
		t.Fatal(err)
	}
	cfg := m.cfg
	cfg.PodCIDR = cidr
	m2, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer m2.Close()
	if err := m2.EnsureBridge(testContext(t)); err != nil {
		t.Fatal(err)
	}
	br, err := netlink.LinkByName(cfg.BridgeName)
	if err != nil {
		t.Fatal(err)
	}
	addrs, err := netlink.AddrList(br, netlink.FAMILY_V4)
	if err != nil {
		t.Fatal(err)
	}
	if len(addrs) != 1 || addrs[0].IP.String() != m2.gateway.String() {
		t.Fatalf("bridge addresses %v, want only %s", addrs, m2.gateway)
	}
}

// TestBridgeKeepsItsMAC: the bridge, the pods' gateway and DNS server,
// keeps one MAC address while pods' veths come and go. Left to the
// kernel, a bridge takes the lowest MAC of its ports, again at each
// change; a pod that had learned a deleted veth's address lost its
// gateway until its ARP entry expired (ops/e2e TestLinuxServiceTraffic:
// 6 answers in 30 s after a short-lived pod on the node was gone). A
// bridge made before podflow chose the address keeps the one it had.
func TestBridgeKeepsItsMAC(t *testing.T) {
	assignType := func(name string) string {
		b, err := os.ReadFile(filepath.Join("/sys/class/net", name, "addr_assign_type"))
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}
	macOf := func(name string) string {
		l, err := netlink.LinkByName(name)
		if err != nil {
			t.Fatal(err)
		}
		return l.Attrs().HardwareAddr.String()
	}
	m := newNode(t, "")
	br := m.cfg.BridgeName
	want := bridgeMAC(br).String()
	if got := macOf(br); got != want || assignType(br) != addrAssignSet {
		t.Fatalf("new bridge: MAC %s (addr_assign_type %s), want %s, set", got, assignType(br), want)
	}
	ctx := testContext(t)
	var uids []string
	for i := range 6 {
		uid := fmt.Sprintf("mac-%d", i)
		if _, err := m.Setup(ctx, uid); err != nil {
			t.Fatal(err)
		}
		uids = append(uids, uid)
		if got := macOf(br); got != want {
			t.Fatalf("after adding pod %d the bridge's MAC is %s, want %s", i, got, want)
		}
	}
	for _, uid := range uids {
		if err := m.Teardown(ctx, uid); err != nil {
			t.Fatal(err)
		}
		if got := macOf(br); got != want {
			t.Fatalf("after removing %s the bridge's MAC is %s, want %s", uid, got, want)
		}
	}

	// A bridge of an earlier podflow: made with no address (the kernel
	// picked one, and would change it). Adopted, it keeps that address.
	cidr, err := networktest.FreePodCIDR()
	if err != nil {
		t.Fatal(err)
	}
	old, err := New(DefaultConfig(fmt.Sprintf("podflow-test-%s-%d", t.Name(), rand.Int64()), cidr, t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cleanupNode(t, old) })
	if err := netlink.LinkAdd(&netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: old.cfg.BridgeName}}); err != nil {
		t.Fatal(err)
	}
	before := macOf(old.cfg.BridgeName)
	if assignType(old.cfg.BridgeName) == addrAssignSet {
		t.Fatalf("a bridge made with no address has addr_assign_type %s already", addrAssignSet)
	}
	if err := old.EnsureBridge(ctx); err != nil {
		t.Fatal(err)
	}
	if got := macOf(old.cfg.BridgeName); got != before || assignType(old.cfg.BridgeName) != addrAssignSet {
		t.Errorf("adopted bridge: MAC %s (addr_assign_type %s), want %s kept and set", got, assignType(old.cfg.BridgeName), before)
	}
	if _, err := old.Setup(ctx, "mac-adopted"); err != nil {
		t.Fatal(err)
	}
	if got := macOf(old.cfg.BridgeName); got != before {
		t.Errorf("adopted bridge: MAC %s after a pod came, want %s", got, before)
	}
}
