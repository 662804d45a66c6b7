// Package proxy is podflow's kube-proxy: it turns Services and their
// EndpointSlices into one nftables table that DNATs each ClusterIP:port to
// a Ready endpoint, the way kube-proxy's nftables mode does
// (pkg/proxy/nftables/proxier.go), programmed with github.com/google/nftables.
//
// The desired state is data: Build computes a Plan (every service port
// with its chosen endpoints) from the objects, and Plan.Rules prints it as
// nft(8) would. Sync applies a plan, only when it changed, in one netlink
// transaction as kube-proxy does: the table, its chains and its affinity
// sets created if absent, every chain flushed and refilled, the chains and
// sets no longer wanted deleted (atomic: a packet sees either the old
// rules or the new ones). Affinity sets are never flushed.
//
// The table ("podflow-proxy-<node id>", family ip) holds:
//   - chain prerouting (nat, dstnat): for packets arriving on the node's
//     bridge, "ip daddr <clusterIP> meta l4proto <p> th dport <port> goto
//     <svc chain>"; for a NodePort (or LoadBalancer) Service's node port,
//     for packets arriving on any podflow bridge, "iifname "pf*" ip daddr
//     <node IP> meta l4proto <p> th dport <node port> goto <svc chain>",
//     for each of Config.NodeIPs (the node's addresses, by default its
//     bridge's gateway; never loopback, as kube-proxy's nftables mode);
//   - chain output (nat, dstnat): the node ports again, for the host's
//     own connections to the node's addresses;
//   - a chain per service port: with ClientIP affinity first "ip saddr
//     @<endpoint's affinity set> goto <endpoint chain>" for each endpoint,
//     then "numgen random mod N vmap { 0 : goto <endpoint chain>, ... }";
//   - a chain per endpoint: with ClientIP affinity first "update
//     @<affinity set> { ip saddr }", then "dnat ip to <pod ip>:<target
//     port>";
//   - with ClientIP affinity, a set per endpoint ("aff-<hash>", type
//     ipv4_addr, flags dynamic,timeout, timeout
//     sessionAffinityConfig.clientIP.timeoutSeconds, default 10800 s):
//     the clients whose last new connection went to that endpoint, each
//     kept for the timeout after it;
//   - chain postrouting (nat, srcnat): hairpin only — a DNATed packet
//     leaving on the bridge it came in on is SNATed to the bridge's
//     gateway, so the reply comes back through the host (pods share one L2
//     segment; without br_netfilter a direct reply would bypass
//     conntrack); and, since br_netfilter hides that input interface, an
//     endpoint reaching itself ("ip saddr E ip daddr E ct status dnat",
//     per endpoint, as kube-proxy masquerades hairpin traffic). Nothing is
//     masqueraded towards a host interface.
//
// Endpoints are the Ready ones; when a service port has none, its Serving
// and Terminating ones (kube-proxy's fallback), else no rule at all: the
// ClusterIP then meets the unreachable route and is answered locally. An
// internalTrafficPolicy of Local keeps ClusterIP traffic on the node's
// own endpoints. A node port spreads over every endpoint whatever the
// externalTrafficPolicy: its clients are pods and the host, which
// kube-proxy never holds to Local either; nothing arriving from another
// interface is proxied, so no client from off the machine reaches a pod
// through a node port.
//
// UDP: after every Sync the conntrack entries of UDP flows to a
// ClusterIP:port or a node port that were DNATed to an address no longer
// serving it (or whose port has no rule any more) are deleted, as
// kube-proxy's conntrack cleanup does, so a client that keeps one source
// port reaches the new endpoint instead of the old one. TCP connections
// are left to finish.
//
// Network safety: New installs an unreachable route for the whole service
// CIDR in the main table before any rule is programmed, so an address
// without a rule never leaves the machine; packets are matched only on
// podflow's bridges (and node ports also in the host's own output), never
// on a host interface. A ClusterIP outside
// Config.ServiceCIDR (a Service of another range) gets no rule.
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
