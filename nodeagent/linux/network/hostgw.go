package network

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// HostRoute is a host-gw route (flannel's host-gw backend): another
// host's node's pod CIDR, reached through that host's address on this
// machine's uplink.
type HostRoute struct {
	CIDR netip.Prefix // the peer node's pod CIDR
	Via  netip.Addr   // the address of the host that runs the node
}

func (r HostRoute) String() string { return r.CIDR.String() + " via " + r.Via.String() }

// SetHostRoutes makes the host-gw routes of this bridge's table exactly
// routes: traffic from this node's pods to a pod CIDR of a node on
// another host leaves through the interface that holds a connected
// subnet of the host's address and is sent to that address, without
// NAT; the peer host forwards it to its own bridge. Routes of the table
// through a gateway that routes does not name are removed (a host that
// left, a pod CIDR given up).
//
// A route is refused, and the others are still made, unless:
//   - its CIDR lies inside Config.ClusterCIDR (where podflow allocates pod
//     CIDRs), overlaps neither this node's pod CIDR nor the subnet of a
//     podflow bridge on this machine (those are AddPeerRoute's);
//   - its via is one of clusterHosts (the addresses of the hosts that
//     joined the cluster), not an address of this machine, and in a
//     subnet connected to an interface other than loopback and the podflow
//     bridges: a neighbour, never a gateway further away.
//
// Refusals are ErrHostRouteRefused, joined. Forwarding on the uplink (for
// the traffic arriving from the other hosts) is the machine's setting
// (net.ipv4.ip_forward, as Kubernetes requires); SetHostRoutes changes
// no sysctl. Idempotent.
func (m *Manager) SetHostRoutes(ctx context.Context, routes []HostRoute, clusterHosts []netip.Addr) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	cluster, err := netip.ParsePrefix(m.cfg.ClusterCIDR)
	if err != nil {
		return fmt.Errorf("%w: cluster CIDR %q", ErrInvalidConfig, m.cfg.ClusterCIDR)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	links, err := m.uplinks()
	if err != nil {
		return fmt.Errorf("network: %w", err)
	}
	var local []netip.Prefix
	if err := m.eachPeerAddr(func(_ netlink.Link, _ netip.Addr, subnet netip.Prefix) error {
		local = append(local, subnet)
		return nil
	}); err != nil {
		return fmt.Errorf("network: %w", err)
	}
	var errs []error
	want := map[netip.Prefix]HostRoute{}
	for _, r := range routes {
		link, err := m.checkHostRoute(r, cluster, local, clusterHosts, links)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if prev, ok := want[r.CIDR]; ok && prev.Via != r.Via {
			errs = append(errs, fmt.Errorf("%w: %s: also via %s", ErrHostRouteRefused, r, prev.Via))
			continue
		}
		want[r.CIDR] = r
		route := &netlink.Route{
			LinkIndex: link.Attrs().Index,
			Dst:       &net.IPNet{IP: r.CIDR.Addr().AsSlice(), Mask: net.CIDRMask(r.CIDR.Bits(), 32)},
			Gw:        r.Via.AsSlice(),
			Table:     m.cfg.RouteTable,
		}
		if err := m.host.RouteReplace(route); err != nil {
			errs = append(errs, fmt.Errorf("network: route %s dev %s table %d: %w", r, link.Attrs().Name, m.cfg.RouteTable, err))
		}
	}
	// Stale host-gw routes: the table's routes through a gateway.
	cur, err := listRetry(func() ([]netlink.Route, error) {
		return m.host.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Table: m.cfg.RouteTable}, netlink.RT_FILTER_TABLE)
	})
	if err != nil {
		errs = append(errs, fmt.Errorf("network: list table %d: %w", m.cfg.RouteTable, err))
	}
	for _, r := range cur {
		if r.Gw == nil || r.Dst == nil {
			continue
		}
		dst, ok := prefixOfNet(r.Dst)
		via, vok := netip.AddrFromSlice(r.Gw.To4())
		if w, keep := want[dst]; ok && vok && keep && w.Via == via {
			continue
		}
		if err := m.host.RouteDel(&r); err != nil && !errors.Is(err, unix.ESRCH) {
			errs = append(errs, fmt.Errorf("network: delete route %s via %s: %w", r.Dst, r.Gw, err))
		}
	}
	return errors.Join(errs...)
}

// HostRoutes returns the host-gw routes of this bridge's table.
func (m *Manager) HostRoutes() ([]HostRoute, error) {
	cur, err := listRetry(func() ([]netlink.Route, error) {
		return m.host.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Table: m.cfg.RouteTable}, netlink.RT_FILTER_TABLE)
	})
	if err != nil {
		return nil, fmt.Errorf("network: list table %d: %w", m.cfg.RouteTable, err)
	}
	var out []HostRoute
	for _, r := range cur {
		if r.Gw == nil || r.Dst == nil {
			continue
		}
		dst, ok := prefixOfNet(r.Dst)
		via, vok := netip.AddrFromSlice(r.Gw.To4())
		if ok && vok {
			out = append(out, HostRoute{CIDR: dst, Via: via})
		}
	}
	return out, nil
}

func prefixOfNet(n *net.IPNet) (netip.Prefix, bool) {
	ip, ok := netip.AddrFromSlice(n.IP.To4())
	if !ok {
		return netip.Prefix{}, false
	}
	ones, bits := n.Mask.Size()
	if bits != 32 {
		return netip.Prefix{}, false
	}
	return netip.PrefixFrom(ip, ones), true
}

// uplink is an interface a host-gw route may leave by, with the subnets
// connected to it.
type uplink struct {
	link    netlink.Link
	addrs   []netip.Addr
	subnets []netip.Prefix
}

// uplinks lists the interfaces with IPv4 addresses other than loopback
// and podflow's bridges (pod veths have none on the host side).
func (m *Manager) uplinks() ([]uplink, error) {
	links, err := listRetry(m.host.LinkList)
	if err != nil {
		return nil, fmt.Errorf("list links: %w", err)
	}
	var out []uplink
	for _, l := range links {
		a := l.Attrs()
		if a.Flags&net.FlagLoopback != 0 || strings.HasPrefix(a.Alias, aliasPrefix) || a.Name == m.cfg.BridgeName {
			continue
		}
		addrs, err := listRetry(func() ([]netlink.Addr, error) { return m.host.AddrList(l, netlink.FAMILY_V4) })
		if err != nil {
			return nil, fmt.Errorf("addresses of %q: %w", a.Name, err)
		}
		u := uplink{link: l}
		for _, ad := range addrs {
			ip, ok := netip.AddrFromSlice(ad.IP.To4())
			if !ok {
				continue
			}
			ones, _ := ad.Mask.Size()
			u.addrs = append(u.addrs, ip)
			u.subnets = append(u.subnets, netip.PrefixFrom(ip, ones).Masked())
		}
		if len(u.addrs) > 0 {
			out = append(out, u)
		}
	}
	return out, nil
}

// checkHostRoute applies SetHostRoutes' rules to r and returns the
// interface it leaves by.
func (m *Manager) checkHostRoute(r HostRoute, cluster netip.Prefix, local []netip.Prefix, hosts []netip.Addr, links []uplink) (netlink.Link, error) {
	refuse := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrHostRouteRefused, r, fmt.Sprintf(format, args...))
	}
	switch {
	case !r.CIDR.IsValid() || !r.CIDR.Addr().Is4() || r.CIDR.Masked() != r.CIDR:
		return nil, refuse("not an IPv4 network prefix")
	case !r.Via.IsValid() || !r.Via.Is4():
		return nil, refuse("via is not an IPv4 address")
	case r.CIDR.Bits() < cluster.Bits() || !cluster.Contains(r.CIDR.Addr()):
		return nil, refuse("outside the cluster CIDR %s", cluster)
	case r.CIDR.Overlaps(m.subnet):
		return nil, refuse("overlaps this node's pod CIDR %s", m.subnet)
	case slices.ContainsFunc(local, r.CIDR.Overlaps):
		return nil, refuse("served by a podflow bridge on this machine")
	case !slices.Contains(hosts, r.Via):
		return nil, refuse("%s is not the address of a host of the cluster", r.Via)
	case r.Via.IsLoopback() || r.Via.IsUnspecified() || r.Via.IsMulticast() || cluster.Contains(r.Via):
		return nil, refuse("%s cannot be a host's address", r.Via)
	}
	for _, u := range links {
		if slices.Contains(u.addrs, r.Via) {
			return nil, refuse("%s is this machine's own address", r.Via)
		}
	}
	for _, u := range links {
		for i, s := range u.subnets {
			if s.Contains(r.Via) && u.addrs[i] != r.Via {
				return u.link, nil
			}
		}
	}
	return nil, refuse("%s is in no subnet connected to this machine: host-gw routes need the hosts on one link", r.Via)
}
