// Package proxy is podflow's kube-proxy: it turns Services and their
// EndpointSlices into one nftables table that DNATs each ClusterIP:port to
// a Ready endpoint, the way kube-proxy's nftables mode does
// (pkg/proxy/nftables/proxier.go), programmed with github.com/google/nftables.
//
// The desired state is data: Build computes a Plan (every service port
// with its chosen endpoints) from the objects, and Plan.Rules prints it as
// nft(8) would. Sync applies a plan by replacing the whole table in one
// netlink transaction (add, delete, re-create: atomic, so a packet sees
// either the old rules or the new ones), and only when the plan changed.
//
// The table ("podflow-proxy-<node id>", family ip) holds:
//   - chain prerouting (nat, dstnat): for packets arriving on the node's
//     bridge, "ip daddr <clusterIP> meta l4proto <p> th dport <port> goto
//     <svc chain>";
//   - a chain per service port: "numgen random mod N vmap { 0 : goto
//     <endpoint chain>, ... }";
//   - a chain per endpoint: "dnat ip to <pod ip>:<target port>";
//   - chain postrouting (nat, srcnat): hairpin only — a DNATed packet
//     leaving on the bridge it came in on is SNATed to the bridge's
//     gateway, so the reply comes back through the host (pods share one L2
//     segment; without br_netfilter a direct reply would bypass
//     conntrack). Nothing is masqueraded towards a host interface.
//
// Endpoints are the Ready ones; when a service port has none, its Serving
// and Terminating ones (kube-proxy's fallback), else no rule at all: the
// ClusterIP then meets the unreachable route and is answered locally.
//
// Network safety: New installs an unreachable route for the whole service
// CIDR in the main table before any rule is programmed, so an address
// without a rule never leaves the machine; packets are matched only on the
// node's bridge, never on a host interface.
//
// The caller:
//
//  1. calls New (root, in the namespace the node's bridge lives in, or
//     with Config.NetNS);
//
//  2. calls Sync with every Service and EndpointSlice it knows, from one
//     goroutine at a time, whenever one changes;
//
//  3. calls Close on shutdown: it removes the table, then the route.
//
//     p, err := proxy.New(ctx, proxy.DefaultConfig("node-1", "pf1234abcd", "10.244.1.1"))
//     defer p.Close()
//     err = p.Sync(ctx, services, slices)
package proxy
