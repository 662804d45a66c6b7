package proxy

import (
	"net"
	"net/netip"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

func TestStaleUDP(t *testing.T) {
	plan := Plan{Ports: []ServicePort{
		{Service: "default/dns", IP: netip.MustParseAddr("10.96.0.10"), Protocol: "UDP", Port: 53,
			Serving: []netip.Addr{netip.MustParseAddr("10.244.1.11"), netip.MustParseAddr("10.244.1.12")}},
		{Service: "default/web", IP: netip.MustParseAddr("10.96.0.20"), Protocol: "TCP", Port: 80},
		{Service: "default/dns", IP: netip.MustParseAddr("10.96.0.10"), Protocol: "UDP", Port: 30053, External: true,
			Serving: []netip.Addr{netip.MustParseAddr("10.244.1.11")}},
	}}
	prev := Plan{Ports: []ServicePort{{Service: "default/gone", IP: netip.MustParseAddr("10.96.0.30"), Protocol: "UDP", Port: 30054, External: true}}}
	f := newStaleUDP(netip.MustParsePrefix("10.96.0.0/16"), []string{"10.244.1.1"}, plan, prev)
	flow := func(proto uint8, dst string, dport uint16, replySrc string) *netlink.ConntrackFlow {
		return &netlink.ConntrackFlow{
			Forward: netlink.IPTuple{Protocol: proto, SrcIP: net.ParseIP("10.244.1.20"), DstIP: net.ParseIP(dst), SrcPort: 40000, DstPort: dport},
			Reverse: netlink.IPTuple{Protocol: proto, SrcIP: net.ParseIP(replySrc), DstIP: net.ParseIP("10.244.1.1"), SrcPort: 5353, DstPort: 40000},
		}
	}
	for _, tc := range []struct {
		name  string
		flow  *netlink.ConntrackFlow
		stale bool
	}{
		{"to a serving endpoint", flow(unix.IPPROTO_UDP, "10.96.0.10", 53, "10.244.1.12"), false},
		{"to an endpoint gone", flow(unix.IPPROTO_UDP, "10.96.0.10", 53, "10.244.1.13"), true},
		{"to a port without rules", flow(unix.IPPROTO_UDP, "10.96.0.10", 54, "10.244.1.11"), true},
		{"to a Service gone", flow(unix.IPPROTO_UDP, "10.96.0.30", 53, "10.244.1.11"), true},
		{"TCP is left alone", flow(unix.IPPROTO_TCP, "10.96.0.20", 80, "10.244.1.99"), false},
		{"outside the service CIDR", flow(unix.IPPROTO_UDP, "10.244.1.11", 5353, "10.244.1.11"), false},
		{"not DNATed", flow(unix.IPPROTO_UDP, "10.96.0.40", 53, "10.96.0.40"), false},
		{"node port to a serving endpoint", flow(unix.IPPROTO_UDP, "10.244.1.1", 30053, "10.244.1.11"), false},
		{"node port to an endpoint gone", flow(unix.IPPROTO_UDP, "10.244.1.1", 30053, "10.244.1.12"), true},
		{"a node port gone", flow(unix.IPPROTO_UDP, "10.244.1.1", 30054, "10.244.1.11"), true},
		{"another port of the node (a hostPort) is not the proxy's", flow(unix.IPPROTO_UDP, "10.244.1.1", 5353, "10.244.1.11"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := f.MatchConntrackFlow(tc.flow); got != tc.stale {
				t.Fatalf("stale = %v, want %v", got, tc.stale)
			}
		})
	}
}
