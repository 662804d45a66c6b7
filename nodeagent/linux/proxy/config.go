package proxy

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
)

// Sentinel errors of the package.
var (
	// ErrConfig: the Config is invalid.
	ErrConfig = errors.New("proxy: invalid config")
	// ErrKernel: programming nftables or a route failed.
	ErrKernel = errors.New("proxy: kernel")
)

// Config configures a Proxy.
type Config struct {
	// Table is the nftables table (family ip) the proxy owns; it must
	// start with "podflow". Default "podflow-proxy-" + 8 hex digits of a
	// hash of the node name.
	Table string
	// Bridge is the node's pod bridge: only packets arriving on it are
	// proxied.
	Bridge string
	// Gateway is the bridge's address, the source of hairpin traffic.
	Gateway string
	// ServiceCIDR holds every ClusterIP (default 10.96.0.0/16); it gets an
	// unreachable route in the main table before any rule exists.
	ServiceCIDR string
	// PodCIDR and RouteTable, when RouteTable is not 0, add a route to the
	// node's own pod CIDR via the bridge in the bridge's policy routing
	// table (network.Config.RouteTable), so a packet DNATed to a pod on
	// the bridge it came from is routed back onto it.
	PodCIDR    string
	RouteTable int
	// NetNS, when set, is the path of the network namespace to program
	// (tests); "" is the caller's.
	NetNS string
	// NodeName is the node's name: an endpoint on it is local (the
	// internalTrafficPolicy Local of a Service).
	NodeName string
	// NodeIPs are the node's own addresses, where NodePort Services
	// answer (kube-proxy's --nodeport-addresses primary: the node's
	// address, never loopback): default the bridge's gateway. A node
	// port is proxied for packets to them arriving on a podflow bridge
	// ("pf*": from pods of any node of the machine) and for the host's
	// own, never for anything from another interface.
	NodeIPs []string
}

// DefaultConfig returns the configuration of node's proxy on bridge with
// gateway, the node's address.
func DefaultConfig(node, bridge, gateway string) Config {
	return Config{Table: TableFor(node), Bridge: bridge, Gateway: gateway, ServiceCIDR: "10.96.0.0/16",
		NodeName: node, NodeIPs: []string{gateway}}
}

// TableFor returns the default table of node's proxy.
func TableFor(node string) string {
	h := sha256.Sum256([]byte(node))
	return "podflow-proxy-" + hex.EncodeToString(h[:4])
}

// Validate checks the Config.
func (c Config) Validate() error {
	if len(c.Table) < len("podflow") || c.Table[:len("podflow")] != "podflow" || len(c.Table) > 64 {
		return fmt.Errorf("%w: Table %q must start with \"podflow\" and be at most 64 bytes", ErrConfig, c.Table)
	}
	if c.Bridge == "" || len(c.Bridge) > 15 {
		return fmt.Errorf("%w: Bridge %q must be an interface name", ErrConfig, c.Bridge)
	}
	if a, err := netip.ParseAddr(c.Gateway); err != nil || !a.Is4() {
		return fmt.Errorf("%w: Gateway %q must be an IPv4 address", ErrConfig, c.Gateway)
	}
	p, err := netip.ParsePrefix(c.ServiceCIDR)
	if err != nil || !p.Addr().Is4() || p.Masked() != p || p.Bits() < 8 {
		return fmt.Errorf("%w: ServiceCIDR %q must be an IPv4 CIDR of /8 or longer", ErrConfig, c.ServiceCIDR)
	}
	for _, ip := range c.NodeIPs {
		if a, err := netip.ParseAddr(ip); err != nil || !a.Is4() || a.IsLoopback() || a.IsUnspecified() {
			return fmt.Errorf("%w: NodeIPs: %q must be an IPv4 address, not loopback (kube-proxy serves no localhost node ports)", ErrConfig, ip)
		}
	}
	if c.RouteTable != 0 {
		if p, err := netip.ParsePrefix(c.PodCIDR); err != nil || !p.Addr().Is4() || p.Masked() != p {
			return fmt.Errorf("%w: PodCIDR %q must be an IPv4 CIDR when RouteTable is set", ErrConfig, c.PodCIDR)
		}
	}
	return nil
}
