package network

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// PodInterface is the name of the pod end of the veth pair.
const PodInterface = "eth0"

// aliasPrefix marks podflow's bridges (IFLA_IFALIAS "podflow:<node>"), so
// AddPeerRoute can tell them from other bridges.
const aliasPrefix = "podflow:"

// Attachment is a pod's network: its namespace, the host end of its veth
// pair and its address.
type Attachment struct {
	PodUID    string
	NetnsPath string // /run/netns/<NetnsName>
	NetnsName string // "podflow-<bridge>-<uid>"
	HostVeth  string // host end, a port of the bridge
	IP        string // pod address, e.g. "10.244.3.2"
	Gateway   string // bridge address, e.g. "10.244.3.1"
}

// Manager is the node's pod network: one bridge holding the gateway address
// of the pod CIDR, a network namespace and a veth pair per pod, addresses
// from a persisted IPAM, and routes to other podflow nodes' CIDRs on the
// same machine.
//
// What it changes in the host network namespace, all removed by
// RemoveBridge or Teardown: the bridge; net.ipv4.conf.<bridge>.forwarding=1
// (a per-interface setting that dies with the bridge; no global sysctl is
// touched), kept at 1 from EnsureBridge until RemoveBridge or Close even
// when a change of the global net.ipv4.ip_forward overwrites it (see
// forwarding.go); a policy rule "iif <bridge> lookup <RouteTable>" whose table
// holds only routes to peer podflow bridges and an "unreachable default",
// so a packet from a pod can be forwarded to another podflow bridge and
// nowhere else; per pod a host veth.
//
// Concurrency: safe for concurrent use; calls for the same pod must not run
// concurrently (the agent drives a pod from one worker).
type Manager struct {
	cfg     Config
	subnet  netip.Prefix
	gateway netip.Addr
	ipam    *ipam
	hostNS  netns.NsHandle
	host    *netlink.Handle
	closed  atomic.Bool
	mu      sync.Mutex     // serialises EnsureBridge, AddPeerRoute, RemoveBridge
	keeper  *forwardKeeper // under mu; runs from EnsureBridge to RemoveBridge or Close
	hpMu    sync.Mutex     // serialises changes of the hostport table (hostports.go)
}

// New returns a Manager for cfg. It opens a netlink handle on the network
// namespace of the calling thread (the host's: call New from there) and the
// IPAM directory; it changes nothing in the kernel.
func New(cfg Config) (*Manager, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	subnet := netip.MustParsePrefix(cfg.PodCIDR)
	a, err := newIPAM(cfg.DataDir, subnet)
	if err != nil {
		return nil, err
	}
	hostNS, err := callerNetns()
	if err != nil {
		return nil, fmt.Errorf("network: open host netns: %w", err)
	}
	host, err := netlink.NewHandleAt(hostNS)
	if err != nil {
		hostNS.Close()
		return nil, fmt.Errorf("network: netlink handle: %w", err)
	}
	return &Manager{cfg: cfg, subnet: subnet, gateway: subnet.Addr().Next(), ipam: a, hostNS: hostNS, host: host}, nil
}

// callerNetns returns the network namespace of the calling goroutine's
// thread. (Not /proc/self/ns/net: that follows the main thread, which a
// careless LockOSThread elsewhere may have left in another namespace.)
func callerNetns() (netns.NsHandle, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	return netns.Get()
}

// Close releases the Manager's handles. It changes nothing in the kernel:
// pods keep their network across an agent restart. Idempotent.
func (m *Manager) Close() error {
	if !m.closed.CompareAndSwap(false, true) {
		return nil
	}
	m.mu.Lock()
	m.stopForwardKeeper()
	m.mu.Unlock()
	m.host.Close()
	return m.hostNS.Close()
}

// Config returns the Manager's configuration.
func (m *Manager) Config() Config { return m.cfg }

// NetnsName returns the name of podUID's network namespace.
func (m *Manager) NetnsName(podUID string) string {
	return "podflow-" + m.cfg.BridgeName + "-" + podUID
}

// HostVethName returns the name of the host end of podUID's veth pair:
// "pf" + 12 hex digits of a hash of bridge and UID (14 bytes).
func (m *Manager) HostVethName(podUID string) string {
	sum := sha256.Sum256([]byte(m.cfg.BridgeName + "/" + podUID))
	return "pf" + hex.EncodeToString(sum[:6])
}

func validUID(uid string) error {
	if uid == "" || len(uid) > 128 {
		return fmt.Errorf("%w: pod UID %q", ErrInvalidArgument, uid)
	}
	for _, r := range uid {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return fmt.Errorf("%w: pod UID %q", ErrInvalidArgument, uid)
		}
	}
	return nil
}

// sandboxErr puts err, described by format and args, in ErrSandbox without
// changing its text.
func sandboxErr(err error, format string, args ...any) error {
	return &sandboxError{err: fmt.Errorf(format+": %w", append(args, err)...)}
}

// sandboxError is an error in ErrSandbox: errors.Is matches both ErrSandbox
// and the error's own chain.
type sandboxError struct{ err error }

func (e *sandboxError) Error() string   { return e.err.Error() }
func (e *sandboxError) Unwrap() []error { return []error{ErrSandbox, e.err} }

// EnsureBridge makes the node's bridge exist, carry the gateway address and
// be up, with forwarding enabled on it and the policy rule and table that
// confine forwarding to podflow bridges. Idempotent.
func (m *Manager) EnsureBridge(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.checkCIDRFree(); err != nil {
		return sandboxErr(err, "bridge %q", m.cfg.BridgeName)
	}
	br, err := m.ensureBridgeLink()
	if err != nil {
		return sandboxErr(err, "bridge %q", m.cfg.BridgeName)
	}
	addr := &netlink.Addr{IPNet: &net.IPNet{IP: m.gateway.AsSlice(), Mask: net.CIDRMask(m.subnet.Bits(), 32)}}
	// Drop addresses of an earlier pod CIDR first (the bridge serves one;
	// deleting a primary address takes its subnet's secondaries with it).
	addrs, err := listRetry(func() ([]netlink.Addr, error) { return m.host.AddrList(br, netlink.FAMILY_V4) })
	if err != nil {
		return sandboxErr(err, "addresses of bridge %q", m.cfg.BridgeName)
	}
	for _, a := range addrs {
		if a.IPNet.String() != addr.IPNet.String() {
			if err := m.host.AddrDel(br, &a); err != nil && !errors.Is(err, unix.EADDRNOTAVAIL) {
				return sandboxErr(err, "remove stale address %s from bridge %q", a.IPNet, m.cfg.BridgeName)
			}
		}
	}
	if err := m.host.AddrReplace(br, addr); err != nil {
		return sandboxErr(err, "address %s on bridge %q", addr.IPNet, m.cfg.BridgeName)
	}
	if err := m.host.LinkSetUp(br); err != nil {
		return sandboxErr(err, "set bridge %q up", m.cfg.BridgeName)
	}
	if err := m.ensureConfinement(br); err != nil {
		return sandboxErr(err, "routing of bridge %q", m.cfg.BridgeName)
	}
	return m.checkPorts(br)
}

// checkCIDRFree refuses a pod CIDR that overlaps one another podflow
// bridge on this machine serves (another node agent, perhaps of another
// podflow system): two bridges routing one subnet break both.
func (m *Manager) checkCIDRFree() error {
	return m.eachPeerAddr(func(l netlink.Link, _ netip.Addr, subnet netip.Prefix) error {
		if subnet.Overlaps(m.subnet) {
			return fmt.Errorf("%w: pod CIDR %s overlaps %s of bridge %q (node %q) on this machine",
				ErrCIDRInUse, m.subnet, subnet, l.Attrs().Name, strings.TrimPrefix(l.Attrs().Alias, aliasPrefix))
		}
		return nil
	})
}

// errFound stops eachPeerAddr early without an error.
var errFound = errors.New("found")

// eachPeerAddr calls eachBridgeAddr for the bridges other than ours.
func (m *Manager) eachPeerAddr(fn func(l netlink.Link, ip netip.Addr, subnet netip.Prefix) error) error {
	return eachBridgeAddr(m.host, m.cfg.BridgeName, fn)
}

// eachBridgeAddr calls fn with each IPv4 address (and its subnet) of every
// podflow bridge (alias "podflow:...") that h sees, except the one named
// except, until fn returns an error, which it returns (errFound as nil).
func eachBridgeAddr(h *netlink.Handle, except string, fn func(l netlink.Link, ip netip.Addr, subnet netip.Prefix) error) error {
	links, err := listRetry(h.LinkList)
	if err != nil {
		return fmt.Errorf("list links: %w", err)
	}
	for _, l := range links {
		if _, ok := l.(*netlink.Bridge); !ok || l.Attrs().Name == except || !strings.HasPrefix(l.Attrs().Alias, aliasPrefix) {
			continue
		}
		addrs, err := listRetry(func() ([]netlink.Addr, error) { return h.AddrList(l, netlink.FAMILY_V4) })
		if err != nil {
			return fmt.Errorf("addresses of %q: %w", l.Attrs().Name, err)
		}
		for _, a := range addrs {
			ip, ok := netip.AddrFromSlice(a.IP.To4())
			if !ok {
				continue
			}
			ones, _ := a.Mask.Size()
			if err := fn(l, ip, netip.PrefixFrom(ip, ones).Masked()); err != nil {
				if errors.Is(err, errFound) {
					return nil
				}
				return err
			}
		}
	}
	return nil
}

// LocalPodCIDRs returns the subnets that the podflow bridges of the
// calling thread's network namespace (the host's) serve, except node's
// own bridge (BridgeNameFor(node)): the pod CIDRs other node agents on
// this machine use, whichever podflow system they belong to. A pod CIDR
// allocator skips them, as EnsureBridge would refuse them (ErrCIDRInUse).
func LocalPodCIDRs(node string) ([]netip.Prefix, error) {
	h, err := netlink.NewHandle()
	if err != nil {
		return nil, fmt.Errorf("network: netlink handle: %w", err)
	}
	defer h.Close()
	var out []netip.Prefix
	err = eachBridgeAddr(h, BridgeNameFor(node), func(_ netlink.Link, _ netip.Addr, subnet netip.Prefix) error {
		out = append(out, subnet)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("network: %w", err)
	}
	return out, nil
}

// checkPorts refuses a bridge that has anything but veths as ports: a real
// interface on a podflow bridge would put pod traffic on the wire.
func (m *Manager) checkPorts(br netlink.Link) error {
	links, err := listRetry(m.host.LinkList)
	if err != nil {
		return sandboxErr(err, "list links")
	}
	for _, l := range links {
		if l.Attrs().MasterIndex != br.Attrs().Index {
			continue
		}
		if _, ok := l.(*netlink.Veth); !ok {
			return sandboxErr(ErrLinkConflict, "bridge %q has a %s port %q; podflow bridges only hold pod veths", m.cfg.BridgeName, l.Type(), l.Attrs().Name)
		}
	}
	return nil
}

// ensureBridgeLink returns the bridge, creating it when missing.
func (m *Manager) ensureBridgeLink() (netlink.Link, error) {
	name := m.cfg.BridgeName
	link, err := m.host.LinkByName(name)
	if err != nil {
		var nf netlink.LinkNotFoundError
		if !errors.As(err, &nf) {
			return nil, err
		}
		// A MAC address given at creation is one the kernel keeps (below).
		br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: name, MTU: m.cfg.MTU, HardwareAddr: bridgeMAC(name)}}
		if err := m.host.LinkAdd(br); err != nil && !errors.Is(err, unix.EEXIST) {
			return nil, fmt.Errorf("create bridge: %w", err)
		}
		if link, err = m.host.LinkByName(name); err != nil {
			return nil, err
		}
	}
	if _, ok := link.(*netlink.Bridge); !ok {
		return nil, fmt.Errorf("%w: %q is a %s", ErrLinkConflict, name, link.Type())
	}
	if err := m.pinBridgeMAC(link); err != nil {
		return nil, err
	}
	if link.Attrs().MTU != m.cfg.MTU {
		if err := m.host.LinkSetMTU(link, m.cfg.MTU); err != nil {
			return nil, fmt.Errorf("set MTU: %w", err)
		}
	}
	// The kernel ignores an alias given at creation: set it on its own.
	if alias := aliasPrefix + m.cfg.NodeName; link.Attrs().Alias != alias {
		if err := m.host.LinkSetAlias(link, alias); err != nil {
			return nil, fmt.Errorf("set alias: %w", err)
		}
	}
	return link, nil
}

// bridgeMAC is the MAC address a bridge is created with: locally
// administered and unicast, derived from its name, so stable across
// restarts of the agent.
func bridgeMAC(name string) net.HardwareAddr {
	sum := sha256.Sum256([]byte("podflow bridge " + name))
	mac := net.HardwareAddr(sum[:6])
	mac[0] = mac[0]&^0x01 | 0x02 // unicast, locally administered
	return mac
}

// pinBridgeMAC makes the kernel keep the bridge's MAC address. A bridge
// whose address was not chosen takes the lowest MAC of its ports, again
// each time a port comes or goes (br_stp_recalculate_bridge_id), and the
// bridge is the pods' gateway and DNS server: a pod that had learned the
// address of a veth since deleted (another pod's, gone when that pod was)
// sent to a MAC no port has until its ARP entry expired — seconds to a
// minute without DNS and without Services. A bridge made before podflow
// chose its address (addr_assign_type 3, "set") keeps the one it has now,
// which the pods know: setting it is what pins it.
func (m *Manager) pinBridgeMAC(br netlink.Link) error {
	b, err := os.ReadFile(filepath.Join("/sys/class/net", br.Attrs().Name, "addr_assign_type"))
	if err == nil && strings.TrimSpace(string(b)) == addrAssignSet {
		return nil
	}
	if err := m.host.LinkSetHardwareAddr(br, br.Attrs().HardwareAddr); err != nil {
		return fmt.Errorf("pin the bridge's MAC address: %w", err)
	}
	return nil
}

// addrAssignSet is NET_ADDR_SET, the addr_assign_type of an address set
// by the user (include/uapi/linux/netdevice.h).
const addrAssignSet = "3"

// ensureConfinement enables forwarding on the bridge only and makes
// everything arriving on it that is not for this host look up the bridge's
// own table, which routes to peer podflow bridges and is unreachable
// otherwise: pod traffic never leaves the machine.
func (m *Manager) ensureConfinement(br netlink.Link) error {
	rule := m.rule()
	rules, err := listRetry(func() ([]netlink.Rule, error) { return m.host.RuleList(netlink.FAMILY_V4) })
	if err != nil {
		return fmt.Errorf("list rules: %w", err)
	}
	if !slices.ContainsFunc(rules, func(r netlink.Rule) bool {
		return r.IifName == rule.IifName && r.Table == rule.Table && r.Priority == rule.Priority
	}) {
		if err := m.host.RuleAdd(rule); err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("add rule iif %s lookup %d: %w", rule.IifName, rule.Table, err)
		}
	}
	unreachable := &netlink.Route{
		Dst:   &net.IPNet{IP: net.IPv4zero.To4(), Mask: net.CIDRMask(0, 32)},
		Type:  unix.RTN_UNREACHABLE,
		Table: m.cfg.RouteTable,
	}
	if err := m.host.RouteReplace(unreachable); err != nil {
		return fmt.Errorf("add unreachable default in table %d: %w", m.cfg.RouteTable, err)
	}
	// The node's own pods, for a packet DNATed back onto the bridge it
	// came from (a pod reaching a hostPort of its node): routed, where a
	// pod's packet to a neighbour is otherwise bridged. It adds no
	// destination a pod could not reach on the bridge already.
	own := &netlink.Route{
		LinkIndex: br.Attrs().Index,
		Dst:       &net.IPNet{IP: m.subnet.Addr().AsSlice(), Mask: net.CIDRMask(m.subnet.Bits(), 32)},
		Scope:     netlink.SCOPE_LINK,
		Table:     m.cfg.RouteTable,
	}
	if err := m.host.RouteReplace(own); err != nil {
		return fmt.Errorf("add route %s dev %s in table %d: %w", m.subnet, m.cfg.BridgeName, m.cfg.RouteTable, err)
	}
	return m.startForwardKeeper()
}

func (m *Manager) rule() *netlink.Rule {
	r := netlink.NewRule()
	r.Family = netlink.FAMILY_V4
	r.IifName = m.cfg.BridgeName
	r.Table = m.cfg.RouteTable
	r.Priority = m.cfg.RulePriority
	return r
}

// RemoveBridge removes the bridge, its policy rule and its table. Pods
// should be torn down first (their veths are left as they are). Idempotent.
func (m *Manager) RemoveBridge(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.stopForwardKeeper()
	var errs []error
	if err := m.removeHostPorts(); err != nil {
		errs = append(errs, fmt.Errorf("hostports: %w", err))
	}
	for {
		if err := m.host.RuleDel(m.rule()); err != nil {
			if !errors.Is(err, unix.ENOENT) {
				errs = append(errs, fmt.Errorf("delete rule: %w", err))
			}
			break
		}
	}
	routes, err := listRetry(func() ([]netlink.Route, error) {
		return m.host.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Table: m.cfg.RouteTable}, netlink.RT_FILTER_TABLE)
	})
	if err != nil {
		errs = append(errs, fmt.Errorf("list table %d: %w", m.cfg.RouteTable, err))
	}
	for _, r := range routes {
		if err := m.host.RouteDel(&r); err != nil && !errors.Is(err, unix.ESRCH) {
			errs = append(errs, fmt.Errorf("delete route %s: %w", r, err))
		}
	}
	if link, err := m.host.LinkByName(m.cfg.BridgeName); err == nil {
		if _, ok := link.(*netlink.Bridge); !ok {
			errs = append(errs, fmt.Errorf("%w: %q is a %s", ErrLinkConflict, m.cfg.BridgeName, link.Type()))
		} else if err := m.host.LinkDel(link); err != nil {
			errs = append(errs, fmt.Errorf("delete bridge: %w", err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("network: remove bridge %q: %w", m.cfg.BridgeName, err)
	}
	return nil
}

// AddPeerRoute routes peerCIDR, another podflow node's pod CIDR on this
// machine, for traffic arriving from this node's pods: the route goes in
// this bridge's table, to the local podflow bridge that holds via (the
// peer's gateway) or, when via is "", whose subnet contains peerCIDR. Both
// agents add a route to the other for traffic to flow both ways. A peer
// that is not a local podflow bridge is refused with ErrPeerNotLocal:
// podflow never forwards pod traffic off the machine. The route disappears
// with the peer's bridge; call again when the peer comes back. Idempotent.
func (m *Manager) AddPeerRoute(ctx context.Context, peerCIDR, via string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	peer, err := netip.ParsePrefix(peerCIDR)
	if err != nil || !peer.Addr().Is4() || peer.Masked() != peer {
		return fmt.Errorf("%w: peer CIDR %q", ErrInvalidArgument, peerCIDR)
	}
	if peer.Overlaps(m.subnet) {
		return fmt.Errorf("%w: peer CIDR %s overlaps this node's %s", ErrInvalidArgument, peer, m.subnet)
	}
	var viaAddr netip.Addr
	if via != "" {
		if viaAddr, err = netip.ParseAddr(via); err != nil {
			return fmt.Errorf("%w: via %q", ErrInvalidArgument, via)
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	link, err := m.peerBridge(peer, viaAddr)
	if err != nil {
		return err
	}
	route := &netlink.Route{
		LinkIndex: link.Attrs().Index,
		Dst:       &net.IPNet{IP: peer.Addr().AsSlice(), Mask: net.CIDRMask(peer.Bits(), 32)},
		Scope:     netlink.SCOPE_LINK,
		Table:     m.cfg.RouteTable,
	}
	if err := m.host.RouteReplace(route); err != nil {
		return fmt.Errorf("network: route %s dev %s table %d: %w", peer, link.Attrs().Name, m.cfg.RouteTable, err)
	}
	return nil
}

// peerBridge finds the local podflow bridge (alias "podflow:...") other
// than ours that carries via, or whose subnet contains peer, and checks
// that peer lies in that subnet.
func (m *Manager) peerBridge(peer netip.Prefix, via netip.Addr) (netlink.Link, error) {
	var found netlink.Link
	err := m.eachPeerAddr(func(l netlink.Link, ip netip.Addr, subnet netip.Prefix) error {
		if (!via.IsValid() || via == ip) && subnet.Contains(peer.Addr()) && peer.Bits() >= subnet.Bits() {
			found = l
			return errFound
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("network: %w", err)
	}
	if found == nil {
		return nil, fmt.Errorf("%w: %s via %q", ErrPeerNotLocal, peer, via)
	}
	return found, nil
}

// listRetry retries a netlink dump the kernel interrupted.
func listRetry[T any](list func() ([]T, error)) ([]T, error) {
	var err error
	for range 5 {
		var out []T
		if out, err = list(); !errors.Is(err, netlink.ErrDumpInterrupted) {
			return out, err
		}
	}
	return nil, err
}

// Setup gives pod podUID its network: a namespace "podflow-<bridge>-<uid>",
// a veth pair whose pod end is created directly in it as eth0 and whose
// host end joins the bridge, an address from the pod CIDR (persisted,
// never handed out twice), a default route via the gateway, and lo up.
// Idempotent: the same UID gets the same attachment. On failure, what this
// call created is removed again. Failures are ErrSandbox. EnsureBridge
// must have succeeded first.
func (m *Manager) Setup(ctx context.Context, podUID string) (Attachment, error) {
	if err := validUID(podUID); err != nil {
		return Attachment{}, sandboxErr(err, "pod %q", podUID)
	}
	if err := ctx.Err(); err != nil {
		return Attachment{}, err
	}
	clock := newPhaseClock(ctx)
	att := m.attachment(podUID, netip.Addr{})
	br, err := m.host.LinkByName(m.cfg.BridgeName)
	if err != nil {
		return Attachment{}, sandboxErr(err, "bridge %q (EnsureBridge first)", m.cfg.BridgeName)
	}

	ip, fresh, err := m.ipam.allocate(podUID)
	if err != nil {
		return Attachment{}, sandboxErr(err, "allocate address for pod %q", podUID)
	}
	att.IP = ip.String()
	clock.done(PhaseIP)
	ok := false
	defer func() {
		if !ok && fresh {
			_ = m.ipam.release(podUID)
		}
	}()

	ns, nsCreated, err := ensureNetns(att.NetnsName)
	if err != nil {
		return Attachment{}, sandboxErr(err, "netns %q", att.NetnsName)
	}
	defer ns.Close()
	clock.done(PhaseNetns)
	defer func() {
		if !ok && nsCreated {
			_ = deleteNetns(att.NetnsName)
		}
	}()
	pod, err := netlink.NewHandleAt(ns)
	if err != nil {
		return Attachment{}, sandboxErr(err, "netlink in netns %q", att.NetnsName)
	}
	defer pod.Close()

	veth, vethCreated, err := m.ensureVeth(pod, ns, att.HostVeth, br.Attrs().Index)
	if err != nil {
		return Attachment{}, sandboxErr(err, "veth %q", att.HostVeth)
	}
	defer func() {
		if !ok && vethCreated {
			_ = m.host.LinkDel(veth)
		}
	}()
	// Hairpin mode (kubelet's hairpin-veth): a frame may leave the port
	// it came in by, so a pod reaching itself through its node — a
	// hostPort, a Service — gets its packet back.
	if err := m.host.LinkSetHairpin(veth, true); err != nil {
		return Attachment{}, sandboxErr(err, "hairpin mode on %q", att.HostVeth)
	}
	clock.done(PhaseVeth)
	if err := m.configurePod(pod, ip, !vethCreated); err != nil {
		return Attachment{}, sandboxErr(err, "configure netns %q", att.NetnsName)
	}
	if veth.Attrs().Flags&net.FlagUp == 0 { // a reused pair
		if err := m.host.LinkSetUp(veth); err != nil {
			return Attachment{}, sandboxErr(err, "set %q up", att.HostVeth)
		}
	}
	clock.done(PhaseConfigure)
	ok = true
	return att, nil
}

func (m *Manager) attachment(podUID string, ip netip.Addr) Attachment {
	a := Attachment{
		PodUID:    podUID,
		NetnsName: m.NetnsName(podUID),
		HostVeth:  m.HostVethName(podUID),
		Gateway:   m.gateway.String(),
	}
	a.NetnsPath = filepath.Join(NetnsDir, a.NetnsName)
	if ip.IsValid() {
		a.IP = ip.String()
	}
	return a
}

// ensureVeth returns the host end of the pod's veth pair, creating the pair
// with its pod end directly in ns when it is missing or half there.
func (m *Manager) ensureVeth(pod *netlink.Handle, ns netns.NsHandle, name string, bridgeIndex int) (link netlink.Link, created bool, err error) {
	if link, err := m.host.LinkByName(name); err == nil {
		peer, perr := pod.LinkByName(PodInterface)
		_, isVeth := link.(*netlink.Veth)
		if isVeth && perr == nil && peer.Attrs().ParentIndex == link.Attrs().Index {
			if link.Attrs().MasterIndex != bridgeIndex {
				if err := m.host.LinkSetMasterByIndex(link, bridgeIndex); err != nil {
					return nil, false, fmt.Errorf("attach to bridge: %w", err)
				}
			}
			return link, false, nil
		}
		if !isVeth {
			return nil, false, fmt.Errorf("%w: %q is a %s", ErrLinkConflict, name, link.Type())
		}
		// Half a pair (or a pair into another namespace): start again.
		if err := m.host.LinkDel(link); err != nil {
			return nil, false, fmt.Errorf("delete stale veth: %w", err)
		}
	}
	if peer, err := pod.LinkByName(PodInterface); err == nil {
		if err := pod.LinkDel(peer); err != nil {
			return nil, false, fmt.Errorf("delete stale %s: %w", PodInterface, err)
		}
	}
	veth := &netlink.Veth{
		LinkAttrs:     netlink.LinkAttrs{Name: name, MTU: m.cfg.MTU, Flags: net.FlagUp},
		PeerName:      PodInterface,
		PeerMTU:       uint32(m.cfg.MTU),
		PeerNamespace: netlink.NsFd(int(ns)),
	}
	if err := m.host.LinkAdd(veth); err != nil { // fills veth.Index
		return nil, false, fmt.Errorf("create veth pair: %w", err)
	}
	if err := m.host.LinkSetMasterByIndex(veth, bridgeIndex); err != nil {
		_ = m.host.LinkDel(veth)
		return nil, false, fmt.Errorf("attach to bridge: %w", err)
	}
	link = veth
	return link, true, nil
}

// configurePod sets lo and eth0 up, eth0's address and the default route.
// On a reused eth0 it also removes addresses other than ip (left by an
// earlier allocation whose record was lost).
func (m *Manager) configurePod(pod *netlink.Handle, ip netip.Addr, reused bool) error {
	lo, err := pod.LinkByName("lo")
	if err != nil {
		return err
	}
	if err := pod.LinkSetUp(lo); err != nil {
		return fmt.Errorf("lo up: %w", err)
	}
	eth, err := pod.LinkByName(PodInterface)
	if err != nil {
		return err
	}
	addr := &netlink.Addr{IPNet: &net.IPNet{IP: ip.AsSlice(), Mask: net.CIDRMask(m.subnet.Bits(), 32)}}
	// Stale addresses go first: deleting a primary address takes the
	// secondaries of its subnet with it.
	if reused {
		addrs, err := listRetry(func() ([]netlink.Addr, error) { return pod.AddrList(eth, netlink.FAMILY_V4) })
		if err != nil {
			return fmt.Errorf("addresses of %s: %w", PodInterface, err)
		}
		for _, a := range addrs {
			if a.IPNet.String() != addr.IPNet.String() {
				if err := pod.AddrDel(eth, &a); err != nil && !errors.Is(err, unix.EADDRNOTAVAIL) {
					return fmt.Errorf("remove stale address %s: %w", a.IPNet, err)
				}
			}
		}
	}
	if err := pod.AddrReplace(eth, addr); err != nil {
		return fmt.Errorf("address %s: %w", addr.IPNet, err)
	}
	if err := pod.LinkSetUp(eth); err != nil {
		return fmt.Errorf("%s up: %w", PodInterface, err)
	}
	def := &netlink.Route{
		LinkIndex: eth.Attrs().Index,
		Dst:       &net.IPNet{IP: net.IPv4zero.To4(), Mask: net.CIDRMask(0, 32)},
		Gw:        m.gateway.AsSlice(),
	}
	if err := pod.RouteReplace(def); err != nil {
		return fmt.Errorf("default route via %s: %w", m.gateway, err)
	}
	return nil
}

// Teardown removes the pod's veth pair and network namespace, its
// hostPorts (SetHostPorts) and releases its address. Processes still in the namespace keep it alive but
// unreachable. Idempotent.
func (m *Manager) Teardown(ctx context.Context, podUID string) error {
	if err := validUID(podUID); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	att := m.attachment(podUID, netip.Addr{})
	if link, err := m.host.LinkByName(att.HostVeth); err == nil {
		if err := m.host.LinkDel(link); err != nil && !errors.Is(err, unix.ENODEV) {
			return fmt.Errorf("network: delete veth %q: %w", att.HostVeth, err)
		}
	}
	if err := deleteNetns(att.NetnsName); err != nil {
		return fmt.Errorf("network: %w", err)
	}
	if err := m.clearHostPorts(podUID); err != nil {
		return fmt.Errorf("network: %w", err)
	}
	if err := m.ipam.release(podUID); err != nil {
		return err
	}
	return nil
}

// RemoveStrayPorts deletes every veth port of the bridge that is the host
// end of none of keep's pods (left by a pod whose namespace is gone from
// NetnsDir but still held by a process), and returns their names. A
// bridge's ports survive its deletion, so Decommission calls it with no
// pod before RemoveBridge. Absent bridge: nothing to do.
func (m *Manager) RemoveStrayPorts(ctx context.Context, keep []string) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	br, err := m.host.LinkByName(m.cfg.BridgeName)
	if err != nil {
		return nil, nil
	}
	known := map[string]bool{}
	for _, uid := range keep {
		known[m.HostVethName(uid)] = true
	}
	links, err := listRetry(m.host.LinkList)
	if err != nil {
		return nil, fmt.Errorf("network: list links: %w", err)
	}
	var removed []string
	var errs []error
	for _, l := range links {
		if _, ok := l.(*netlink.Veth); !ok || l.Attrs().MasterIndex != br.Attrs().Index || known[l.Attrs().Name] {
			continue
		}
		if err := m.host.LinkDel(l); err != nil && !errors.Is(err, unix.ENODEV) {
			errs = append(errs, fmt.Errorf("network: delete stray port %q: %w", l.Attrs().Name, err))
			continue
		}
		removed = append(removed, l.Attrs().Name)
	}
	return removed, errors.Join(errs...)
}

// List returns the attachments of this node's pods, for recovery after an
// agent restart: every pod that has a namespace, a host veth or an address,
// sorted by UID. A pod with only some of them has the others "" and is
// healed by Setup or removed by Teardown.
func (m *Manager) List(ctx context.Context) ([]Attachment, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	held, err := m.ipam.list()
	if err != nil {
		return nil, err
	}
	found := map[string]*Attachment{}
	get := func(uid string) *Attachment {
		if a, ok := found[uid]; ok {
			return a
		}
		a := &Attachment{PodUID: uid, Gateway: m.gateway.String()}
		found[uid] = a
		return a
	}
	for uid, ip := range held {
		get(uid).IP = ip.String()
	}
	prefix := "podflow-" + m.cfg.BridgeName + "-"
	entries, err := os.ReadDir(NetnsDir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("network: list %s: %w", NetnsDir, err)
	}
	for _, e := range entries {
		if uid, ok := strings.CutPrefix(e.Name(), prefix); ok && validUID(uid) == nil {
			a := get(uid)
			a.NetnsName = e.Name()
			a.NetnsPath = filepath.Join(NetnsDir, e.Name())
		}
	}
	// A host veth never outlives its pod's address (Setup allocates first,
	// Teardown releases last), so the pods found so far name every veth.
	for uid, a := range found {
		if l, err := m.host.LinkByName(m.HostVethName(uid)); err == nil {
			if _, ok := l.(*netlink.Veth); ok {
				a.HostVeth = l.Attrs().Name
			}
		}
	}
	out := make([]Attachment, 0, len(found))
	for _, a := range found {
		out = append(out, *a)
	}
	slices.SortFunc(out, func(a, b Attachment) int { return strings.Compare(a.PodUID, b.PodUID) })
	return out, nil
}
