package roles

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/podflow/podflow/nodeagent/linux/network"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/pipeline"
)

// TestHostGWRoutes: a node routes another host's node's pod CIDR via
// that host's advertised address, taken from the host records alone; an
// allocation of a node that is no host, or whose record is malformed or
// filed under another name, gets no route.
func TestHostGWRoutes(t *testing.T) {
	rec := func(key, value string) *raftstore.KV {
		return &raftstore.KV{Key: pipeline.HostPrefix + key, Value: []byte(value)}
	}
	hosts := []*raftstore.KV{
		rec("h1", `{"name":"h1","advertise":"198.18.0.1"}`),
		rec("h2", `{"name":"h2","advertise":"198.18.0.2"}`),
		rec("h3", `{"name":"h3","advertise":"not an address"}`),
		rec("h4", `{"name":"h2","advertise":"198.18.0.4"}`), // filed under another name
		rec("h5", `{"name":"h5","advertise":"fd00::5"}`),
		rec("h6", `not json`),
	}
	remote := []podCIDRAlloc{
		{node: "h2", cidr: "10.244.2.0/24"},
		{node: "h3", cidr: "10.244.3.0/24"},
		{node: "h4", cidr: "10.244.4.0/24"},
		{node: "h5", cidr: "10.244.5.0/24"},
		{node: "h6", cidr: "10.244.6.0/24"},
		{node: "stranger", cidr: "10.244.7.0/24"}, // wrote an allocation, is no host
		{node: "h1", cidr: "10.244.1.0/24"},       // its own
		{node: "h2", cidr: "garbage"},
	}
	routes, via := hostGWRoutes(remote, hosts, "h1")
	want := []network.HostRoute{{CIDR: netip.MustParsePrefix("10.244.2.0/24"), Via: netip.MustParseAddr("198.18.0.2")}}
	if !slices.Equal(routes, want) {
		t.Errorf("routes %v, want %v", routes, want)
	}
	if wantVia := []netip.Addr{netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("198.18.0.2")}; !slices.Equal(via, wantVia) {
		t.Errorf("hosts %v, want %v", via, wantVia)
	}
}
