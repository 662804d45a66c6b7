package network

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"
)

// Package sentinels. Match them with errors.Is. Every failure of the
// kernel work (EnsureBridge, Setup, Teardown, List, RemoveBridge …) is
// ErrSandbox besides its cause (one of the others, a netlink errno …); the
// node agent maps ErrSandbox to its FailedCreatePodSandBox code.
var (
	// ErrSandbox classifies every failure to program the pod network.
	ErrSandbox = errors.New("network: pod network")
	// ErrInvalidConfig wraps every Config.Validate failure.
	ErrInvalidConfig = errors.New("network: invalid config")
	// ErrInvalidArgument is returned for a pod UID or CIDR that cannot be used.
	ErrInvalidArgument = errors.New("network: invalid argument")
	// ErrRangeFull is returned when the pod CIDR has no free address.
	ErrRangeFull = errors.New("network: no free address in the pod CIDR")
	// ErrLinkConflict is returned when a link with podflow's name exists
	// but is not what podflow would have made (e.g. not a bridge).
	ErrLinkConflict = errors.New("network: link exists with another type")
	// ErrPeerNotLocal is returned by AddPeerRoute for a peer CIDR that is
	// not served by another podflow bridge on this machine: podflow never
	// routes pod traffic off the machine.
	ErrPeerNotLocal = errors.New("network: peer CIDR is not on a local podflow bridge")
	// ErrHostRouteRefused is returned by SetHostRoutes for a route that
	// is not to a pod CIDR of the cluster through a neighbouring host of
	// the cluster.
	ErrHostRouteRefused = errors.New("network: host route refused")
	// ErrCIDRInUse is returned by EnsureBridge for a pod CIDR that
	// overlaps the subnet of another podflow bridge on the machine.
	ErrCIDRInUse = errors.New("network: pod CIDR in use on this machine")
	// ErrNetnsBusy is returned by Teardown for a namespace file that stays
	// mounted underneath a mount covering NetnsDir (one made before podflow
	// gave NetnsDir its shared layout): it cannot be unmounted by path.
	ErrNetnsBusy = errors.New("network: netns file is pinned by a covering mount")
)

// Config configures a Manager (one per node agent).
type Config struct {
	// NodeName is the node this manager serves; it names the bridge.
	NodeName string
	// DataDir holds the IPAM state of this node (DataDir/ipam/...); it must
	// survive agent restarts.
	DataDir string
	// PodCIDR is the node's pod CIDR, e.g. "10.244.3.0/24". Its first
	// address is the gateway, on the bridge. It must lie in ClusterCIDR.
	PodCIDR string
	// ClusterCIDR holds every node's pod CIDR (default 10.244.0.0/16).
	ClusterCIDR string
	// BridgeName is the node's bridge (≤ 15 bytes); default "pf" + 8 hex
	// digits of a hash of NodeName.
	BridgeName string
	// MTU of the bridge and of both veth ends (default 1500).
	MTU int
	// RouteTable is the policy routing table for traffic arriving on the
	// bridge (default derived from BridgeName, in 0x70000000..0x7fffffff).
	RouteTable int
	// RulePriority is the priority of the "iif <bridge> lookup RouteTable"
	// rule; it must come before the main table's 32766 (default 32000).
	RulePriority int
	// HostIPs are the node's addresses besides the gateway (its
	// InternalIP), where hostPorts are published too; never loopback.
	HostIPs []string
}

// DefaultConfig returns the configuration of node with podCIDR and dataDir
// and every other field defaulted.
func DefaultConfig(node, podCIDR, dataDir string) Config {
	br := BridgeNameFor(node)
	return Config{
		NodeName:     node,
		DataDir:      dataDir,
		PodCIDR:      podCIDR,
		ClusterCIDR:  "10.244.0.0/16",
		BridgeName:   br,
		MTU:          1500,
		RouteTable:   tableFor(br),
		RulePriority: 32000,
	}
}

// BridgeNameFor returns the default bridge name of node: "pf" + 8 hex digits.
func BridgeNameFor(node string) string {
	sum := sha256.Sum256([]byte(node))
	return "pf" + hex.EncodeToString(sum[:4])
}

func tableFor(bridge string) int {
	sum := sha256.Sum256([]byte("table/" + bridge))
	return int(0x70000000 | binary.BigEndian.Uint32(sum[:4])&0x0fffffff)
}

// Validate checks c.
func (c Config) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidConfig, fmt.Sprintf(format, args...))
	}
	if c.NodeName == "" {
		return bad("NodeName is empty")
	}
	if !filepath.IsAbs(c.DataDir) {
		return bad("DataDir %q is not absolute", c.DataDir)
	}
	pod, err := netip.ParsePrefix(c.PodCIDR)
	if err != nil || !pod.Addr().Is4() || pod.Masked() != pod {
		return bad("PodCIDR %q is not an IPv4 network address/prefix", c.PodCIDR)
	}
	if pod.Bits() > 29 {
		return bad("PodCIDR %q is smaller than a /29", c.PodCIDR)
	}
	cluster, err := netip.ParsePrefix(c.ClusterCIDR)
	if err != nil || !cluster.Addr().Is4() || cluster.Masked() != cluster {
		return bad("ClusterCIDR %q is not an IPv4 network address/prefix", c.ClusterCIDR)
	}
	if !cluster.Contains(pod.Addr()) || pod.Bits() < cluster.Bits() {
		return bad("PodCIDR %q is not inside ClusterCIDR %q", c.PodCIDR, c.ClusterCIDR)
	}
	if len(c.BridgeName) == 0 || len(c.BridgeName) > 15 || strings.ContainsAny(c.BridgeName, "/ \t\n:") || !strings.HasPrefix(c.BridgeName, "pf") {
		return bad("BridgeName %q must start with \"pf\" and fit 15 bytes", c.BridgeName)
	}
	if c.MTU < 576 || c.MTU > 65535 {
		return bad("MTU %d is outside 576..65535", c.MTU)
	}
	if c.RouteTable < 256 || c.RouteTable > 0x7fffffff {
		return bad("RouteTable %d is outside 256..2147483647 (lower tables are reserved)", c.RouteTable)
	}
	for _, ip := range c.HostIPs {
		if a, err := netip.ParseAddr(ip); err != nil || !a.Is4() || a.IsLoopback() || a.IsUnspecified() {
			return bad("HostIPs: %q is not a non-loopback IPv4 address", ip)
		}
	}
	if c.RulePriority <= 0 || c.RulePriority >= 32766 {
		return bad("RulePriority %d must be in 1..32765, before the main table", c.RulePriority)
	}
	return nil
}
