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
type staleUDP struct {
	cidr    netip.Prefix
	serving map[netip.AddrPort][]netip.Addr // ClusterIP:port → serving IPs
}

var _ netlink.CustomConntrackFilter = (*staleUDP)(nil)

func newStaleUDP(serviceCIDR netip.Prefix, plan Plan) *staleUDP {
	f := &staleUDP{cidr: serviceCIDR, serving: map[netip.AddrPort][]netip.Addr{}}
	for _, sp := range plan.Ports {
		if sp.Protocol == "UDP" {
			f.serving[netip.AddrPortFrom(sp.IP, sp.Port)] = sp.Serving
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
	if !f.cidr.Contains(dst) || replySrc == dst { // not to a ClusterIP, or not DNATed
		return false
	}
	serving, ok := f.serving[netip.AddrPortFrom(dst, flow.Forward.DstPort)]
	return !ok || !slices.Contains(serving, replySrc)
}

// flushStaleUDP deletes the stale UDP flows of plan (after its rules are
// programmed, so that no new flow is DNATed by the old ones) and reports
// how many went.
func (p *Proxy) flushStaleUDP(plan Plan) (uint, error) {
	n, err := p.link.ConntrackDeleteFilters(netlink.ConntrackTable, unix.AF_INET,
		newStaleUDP(netip.MustParsePrefix(p.cfg.ServiceCIDR), plan))
	if err != nil {
		return n, fmt.Errorf("%w: flush stale UDP conntrack entries: %w", ErrKernel, err)
	}
	return n, nil
}
