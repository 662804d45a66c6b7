// Package network is podflow's CNI: the node agent's pod network, programmed
// with netlink (vishvananda/netlink), without CNI binaries.
//
// Per node: a bridge (default "pf" + hash of the node name) holding the
// gateway, the first address of the node's pod CIDR. Per pod: a network
// namespace "podflow-<bridge>-<uid>" bind-mounted under /run/netns, a veth
// pair created with its pod end directly in that namespace and named eth0
// and its host end (14 bytes, "pf" + hash) a port of the bridge, an address
// from the pod CIDR, a default route via the gateway, and lo up. Addresses
// are persisted under DataDir as CNI host-local does (one file per address,
// created atomically), so they survive agent restarts and are never handed
// out twice.
//
// Namespaces under /run/netns get the layout `ip netns add` and CNI make:
// before creating one, the Manager makes /run/netns a shared mount point
// of its own (bind-mounting it onto itself when it is a plain directory,
// and moving the namespaces already mounted there into the new mount), so
// that an `ip netns add` by anyone never covers podflow's namespaces.
// Teardown detaches every mount stacked on a namespace file (MNT_DETACH)
// before removing it; a file pinned underneath a covering mount made
// before that layout is ErrNetnsBusy. EnsureBridge refuses a pod CIDR that
// another podflow bridge on the machine serves (ErrCIDRInUse).
//
// Pod-to-pod traffic between two node agents on one machine goes through the
// host: each bridge has IPv4 forwarding enabled on that interface only
// (net.ipv4.conf.<bridge>.forwarding=1; global sysctls are untouched). Any
// change of the global net.ipv4.ip_forward overwrites that value on every
// interface, so the Manager watches the kernel's forwarding announcements
// (RTNLGRP_IPV4_NETCONF) and sets its bridge's value back to 1, from
// EnsureBridge until RemoveBridge or Close. A policy rule sends what
// arrives on the bridge to the bridge's own routing table, which holds
// routes to peer podflow bridges (AddPeerRoute) and an unreachable
// default, and the node's own pod CIDR via the bridge (for a packet DNATed
// back onto it). Nothing a pod sends can be forwarded off the machine,
// except by a host-gw route (SetHostRoutes): a pod CIDR of the cluster
// CIDR via the address of another host of the cluster, a neighbour on a
// connected subnet of an interface other than podflow's; there is no
// masquerading, and bridges only ever get veth ports, in
// hairpin mode (kubelet's hairpin-veth: a pod reaching itself through its
// node gets its packets back).
//
// hostPorts (SetHostPorts, as the CNI portmap plugin): a pod's container
// ports are DNATed from the node's addresses (the gateway and
// Config.HostIPs; a loopback hostIP for the host's own connections only,
// route_localnet is never set) in a table of the node's own,
// "podflow-hostport-<bridge>", rebuilt in one transaction from every
// pod's mappings, which are kept under DataDir/hostports. They are
// matched for packets arriving on a podflow bridge ("pf*") and for the
// host's own, never from another interface; a connection DNATed back
// onto the bridge gets the gateway as its source (hairpin SNAT). Teardown
// removes a pod's mappings, RemoveBridge the table.
//
// Caller's obligations:
//
//  1. Run as root in the host network namespace.
//  2. EnsureBridge once at start (and after anything removed the bridge),
//     before Setup. Call AddPeerRoute for every other node agent's CIDR on
//     the machine, on both sides, and SetHostRoutes with those of nodes on
//     other hosts.
//  3. Drive one pod from one goroutine at a time; different pods may be set
//     up concurrently.
//  4. At start, List and Teardown what the store no longer knows: the
//     kernel and the disk outlive the agent. Run one Manager per node name
//     on the machine (the node agent holds a lock for it): names derive
//     from the node, and List finds every pod of the node's bridge.
//  5. Close the Manager; when the node goes away, Teardown every pod,
//     RemoveStrayPorts, then RemoveBridge (a bridge's ports outlive it).
//  6. Call New from the host network namespace; never leave a thread of
//     the process in a pod's namespace (run code there with
//     networktest.Do's pattern: lock, enter, leave, unlock; a thread that
//     cannot leave must stay locked so that the runtime discards it).
//
// WithPhases reports how long each phase of a Setup took (ip, netns, veth,
// configure), for pod start latency breakdowns.
//
// Example:
//
//	m, err := network.New(network.DefaultConfig("node-1", "10.244.1.0/24", "/var/lib/podflow/node-1"))
//	if err != nil {
//		return err
//	}
//	defer m.Close()
//	if err := m.EnsureBridge(ctx); err != nil {
//		return err
//	}
//	att, err := m.Setup(ctx, string(pod.GetMetadata().GetUid()))
//	if err != nil {
//		return err // errors.Is(err, network.ErrSandbox)
//	}
//	// start the pod's processes in att.NetnsPath; the pod answers on att.IP
//	_ = m.Teardown(ctx, att.PodUID)
package network
