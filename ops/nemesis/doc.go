// Package nemesis injects network faults between podflow's own processes
// on one machine: each directed link between two store replicas, or
// between two NATS servers' routes, runs through a loopback TCP relay of
// the chaos process (Net), which can cut
// it (partition, isolate a leader, bridge, one-way), slow it (delay and
// jitter) or flap it; nothing leaves the machine and nothing in the
// kernel changes — except for packet loss: a Net built with NewVia over a
// LossyPath (Linux, root) reaches its destinations through two network
// namespaces podflow creates, joined by a veth pair, where nftables drops
// a random share of the packets (Lose); Close removes them.
//
// Obligations of the caller:
//
//  1. Start the Net (New) with every node's real listen address before the
//     nodes, and make each node dial its peers at DialAddrs(node)
//     (raftstore.Config.PeerAddrs; `podflow store run --peer-addrs`; a
//     NATS server's route URLs, advertising a Refusing address so that
//     no route learnt by gossip goes around the relays).
//  2. Describe faults as data (Partition, Isolate, Bridge, OneWay, Slow)
//     and set one at a time with Apply; Heal before checking.
//  3. Close the Net when done: its relays and their connections end.
//  4. To check that no traffic went around the relays (nodes in other
//     processes), call Bypasses: every established connection to a node's
//     real address that this process did not open is named.
//
// Usage:
//
//	n, err := nemesis.New(map[string]string{"s1": a1, "s2": a2, "s3": a3})
//	defer n.Close()
//	cfg.PeerAddrs = n.DialAddrs("s1") // … for each replica
//	_ = n.Apply(nemesis.Isolate(n.Nodes(), leader))
//	_ = n.Heal()
//
// A cut link keeps its connections open and holds the bytes it read, so
// senders see a partition as TCP does (writes that block, RPCs that time
// out) rather than a refused connection; the bytes are delivered when the
// link heals unless an endpoint gave up on the connection first.
package nemesis
