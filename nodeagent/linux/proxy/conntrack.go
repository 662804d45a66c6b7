package proxy

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// staleUDP matches the UDP conntrack flows the rules no longer stand
// behind, as kube-proxy's conntrack cleanup (pkg/proxy/conntrack) does: a
// flow to a ClusterIP:port DNATed to an address that does not serve that
// port any more. A UDP "connection" is only its conntrack entry: without
// the flush a client that keeps sending from one source port goes on
// reaching the endpoint the first packet was DNATed to, long after it has
// left the slice (the entry lives as long as packets keep coming).
//
// Unlike kube-proxy, a ClusterIP:port without any serving endpoint (or
// whose Service is gone) loses its flows too: podflow programs no reject
// rule for it, so the flush is what sends the client's next packet to the
// unreachable route.
//
// Node ports alike: a flow to one of the node's addresses and a UDP node
// port of the plan or of the one before it (any other port of the node's
// addresses is not the proxy's: a hostPort, a host's server) is stale
// when the port has no rule any more or was DNATed to an address that no
// longer serves it.
type staleUDP struct {
	cidr      netip.Prefix
	nodeIPs   []netip.Addr
	nodePorts map[uint16]bool                 // UDP node ports of the plan and the previous one
	serving   map[netip.AddrPort][]netip.Addr // ClusterIP:port or node IP:node port → serving IPs
}

var _ netlink.CustomConntrackFilter = (*staleUDP)(nil)

// newStaleUDP is the filter of plan's stale flows; prev is the plan
// programmed before it (the zero Plan for none).
func newStaleUDP(serviceCIDR netip.Prefix, nodeIPs []string, plan, prev Plan) *staleUDP {
	f := &staleUDP{cidr: serviceCIDR, nodePorts: map[uint16]bool{}, serving: map[netip.AddrPort][]netip.Addr{}}
	for _, s := range nodeIPs {
		if a, err := netip.ParseAddr(s); err == nil {
			f.nodeIPs = append(f.nodeIPs, a)
		}
	}
	for _, sp := range prev.Ports {
		if sp.Protocol == "UDP" && sp.External {
			f.nodePorts[sp.Port] = true
		}
	}
	for _, sp := range plan.Ports {
		if sp.Protocol != "UDP" {
			continue
		}
		if !sp.External {
			f.serving[netip.AddrPortFrom(sp.IP, sp.Port)] = sp.Serving
			continue
		}
		f.nodePorts[sp.Port] = true
		for _, ip := range f.nodeIPs {
			f.serving[netip.AddrPortFrom(ip, sp.Port)] = sp.Serving
		}
	}
	return f
}

func addrOf(ip []byte) netip.Addr {
	a, _ := netip.AddrFromSlice(ip)
	return a.Unmap()
}

// MatchConntrackFlow implements netlink.CustomConntrackFilter: it reports
// whether flow is stale.
func (f *staleUDP) MatchConntrackFlow(flow *netlink.ConntrackFlow) bool {
	if flow.Forward.Protocol != unix.IPPROTO_UDP {
		return false
	}
	dst, replySrc := addrOf(flow.Forward.DstIP), addrOf(flow.Reverse.SrcIP)
	toNodePort := slices.Contains(f.nodeIPs, dst) && f.nodePorts[flow.Forward.DstPort]
	if (!f.cidr.Contains(dst) && !toNodePort) || replySrc == dst { // not to a ClusterIP or node port, or not DNATed
		return false
	}
	serving, ok := f.serving[netip.AddrPortFrom(dst, flow.Forward.DstPort)]
	return !ok || !slices.Contains(serving, replySrc)
}

// flushStaleUDP deletes the stale UDP flows of plan, prev the plan before
// it (after its rules are
// programmed, so that no new flow is DNATed by the old ones) and reports
// how many went.
func (p *Proxy) flushStaleUDP(plan, prev Plan) (uint, error) {
	n, err := p.link.ConntrackDeleteFilters(netlink.ConntrackTable, unix.AF_INET,
		newStaleUDP(netip.MustParsePrefix(p.cfg.ServiceCIDR), p.cfg.NodeIPs, plan, prev))
	if err != nil {
		return n, fmt.Errorf("%w: flush stale UDP conntrack entries: %w", ErrKernel, err)
	}
	return n, nil
}
