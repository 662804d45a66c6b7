package network

// hostPort, as the CNI portmap plugin publishes it: a container port
// DNATed from the node's addresses, in an nftables table of the node's
// own ("podflow-hostport-<bridge>"), rebuilt whole in one transaction
// from the mappings of every pod, which are kept under DataDir (so they
// survive the agent and are gone with the pod's Teardown).

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// HostPort publishes a container port on the node: connections to
// HostIP:HostPort (the node's addresses when HostIP is "" or 0.0.0.0) go
// to the pod's ContainerPort.
type HostPort struct {
	HostPort      int32  `json:"hostPort"`
	ContainerPort int32  `json:"containerPort"`
	Protocol      string `json:"protocol"` // TCP (""), UDP or SCTP
	HostIP        string `json:"hostIP,omitempty"`
}

// podPorts is what is kept per pod: its address and its mappings.
type podPorts struct {
	IP    string     `json:"ip"`
	Ports []HostPort `json:"ports"`
}

// HostPortRule is one DNAT of the hostport table: packets to Daddr:Port
// (Protocol) go to To. FromPods rules match in prerouting, for packets
// arriving on a podflow bridge ("pf*"); FromHost rules in output, for the
// host's own connections.
type HostPortRule struct {
	Daddr    netip.Addr
	Protocol string
	Port     uint16
	To       netip.AddrPort
	FromPods bool
	FromHost bool
}

func (r HostPortRule) String() string {
	var hooks []string
	if r.FromPods {
		hooks = append(hooks, "prerouting iifname \"pf*\"")
	}
	if r.FromHost {
		hooks = append(hooks, "output")
	}
	return fmt.Sprintf("[%s] ip daddr %s %s dport %d dnat to %s", strings.Join(hooks, ", "), r.Daddr, strings.ToLower(r.Protocol), r.Port, r.To)
}

// HostPortTable is the name of the node's hostport table.
func (c Config) HostPortTable() string { return "podflow-hostport-" + c.BridgeName }

// hostPortRules plans the table from every pod's mappings (pod UID →
// ports), on a node whose addresses are gateway and hostIPs: a mapping
// without a hostIP (or 0.0.0.0) is published on each of them, from pods
// and from the host; one on one of them, there; one on a loopback
// address, to the host alone (podflow does not set route_localnet, so a
// host client must use a node address as its source, as `curl
// --interface`); any other hostIP is not the node's, and gets nothing.
// Sorted by port, protocol, address and pod, so the first pod (by UID)
// wins a conflict the scheduler should have prevented.
func hostPortRules(gateway netip.Addr, hostIPs []netip.Addr, pods map[string]podPorts) []HostPortRule {
	type keyed struct {
		uid string
		HostPortRule
	}
	var out []keyed
	nodeIPs := append([]netip.Addr{gateway}, hostIPs...)
	for uid, pp := range pods {
		podIP, err := netip.ParseAddr(pp.IP)
		if err != nil || !podIP.Is4() {
			continue
		}
		for _, p := range pp.Ports {
			if p.HostPort <= 0 || p.HostPort > 65535 || p.ContainerPort <= 0 || p.ContainerPort > 65535 {
				continue
			}
			proto := cmp.Or(strings.ToUpper(p.Protocol), "TCP")
			if proto != "TCP" && proto != "UDP" && proto != "SCTP" {
				continue
			}
			to := netip.AddrPortFrom(podIP, uint16(p.ContainerPort))
			add := func(daddr netip.Addr, pods, host bool) {
				out = append(out, keyed{uid, HostPortRule{Daddr: daddr, Protocol: proto, Port: uint16(p.HostPort), To: to, FromPods: pods, FromHost: host}})
			}
			switch ip, err := netip.ParseAddr(p.HostIP); {
			case p.HostIP == "" || (err == nil && ip.IsUnspecified()):
				for _, a := range nodeIPs {
					add(a, true, true)
				}
			case err != nil || !ip.Is4():
			case ip.IsLoopback():
				add(ip, false, true)
			case slices.Contains(nodeIPs, ip):
				add(ip, true, true)
			}
		}
	}
	slices.SortFunc(out, func(a, b keyed) int {
		return cmp.Or(cmp.Compare(a.Port, b.Port), cmp.Compare(a.Protocol, b.Protocol), a.Daddr.Compare(b.Daddr), cmp.Compare(a.uid, b.uid))
	})
	rules := make([]HostPortRule, len(out))
	for i, k := range out {
		rules[i] = k.HostPortRule
	}
	return rules
}

func (m *Manager) hostPortDir() string { return filepath.Join(m.cfg.DataDir, "hostports") }

// SetHostPorts publishes ports of pod podUID, whose address is ip (a pod
// with no ports: publishes nothing, and removes what it published), then
// reprograms the node's hostport table. Idempotent. Failures are
// ErrSandbox.
func (m *Manager) SetHostPorts(podUID, ip string, ports []HostPort) error {
	if err := validUID(podUID); err != nil {
		return sandboxErr(err, "pod %q", podUID)
	}
	m.hpMu.Lock()
	defer m.hpMu.Unlock()
	path := filepath.Join(m.hostPortDir(), podUID+".json")
	if len(ports) == 0 {
		if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
			return nil // nothing published, nothing to reprogram
		}
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return sandboxErr(err, "hostports of pod %q", podUID)
		}
	} else {
		b, err := json.Marshal(podPorts{IP: ip, Ports: ports})
		if err != nil {
			return sandboxErr(err, "hostports of pod %q", podUID)
		}
		if err := os.MkdirAll(m.hostPortDir(), 0o700); err != nil {
			return sandboxErr(err, "hostports directory")
		}
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, b, 0o600); err != nil {
			return sandboxErr(err, "hostports of pod %q", podUID)
		}
		if err := os.Rename(tmp, path); err != nil {
			return sandboxErr(err, "hostports of pod %q", podUID)
		}
	}
	if err := m.syncHostPorts(); err != nil {
		return sandboxErr(err, "hostports of pod %q", podUID)
	}
	return nil
}

// HostPortRules returns the rules the node's hostport table holds, as
// planned from the kept mappings (tests and diagnostics).
func (m *Manager) HostPortRules() ([]HostPortRule, error) {
	pods, err := m.readHostPorts()
	if err != nil {
		return nil, err
	}
	return hostPortRules(m.gateway, m.hostIPs(), pods), nil
}

func (m *Manager) hostIPs() []netip.Addr {
	var out []netip.Addr
	for _, s := range m.cfg.HostIPs {
		if a, err := netip.ParseAddr(s); err == nil && a != m.gateway {
			out = append(out, a)
		}
	}
	return out
}

func (m *Manager) readHostPorts() (map[string]podPorts, error) {
	entries, err := os.ReadDir(m.hostPortDir())
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	pods := map[string]podPorts{}
	for _, e := range entries {
		uid, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || validUID(uid) != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join(m.hostPortDir(), e.Name()))
		if err != nil {
			return nil, err
		}
		var pp podPorts
		if err := json.Unmarshal(b, &pp); err != nil {
			continue // a torn file from before a crash: the pod's next SetHostPorts rewrites it
		}
		pods[uid] = pp
	}
	return pods, nil
}

// syncHostPorts brings the hostport table to the kept mappings in one
// transaction (the table removed when there are none). hpMu held.
func (m *Manager) syncHostPorts() error {
	pods, err := m.readHostPorts()
	if err != nil {
		return err
	}
	rules := hostPortRules(m.gateway, m.hostIPs(), pods)
	c, err := nftables.New(nftables.WithNetNSFd(int(m.hostNS)))
	if err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	table := &nftables.Table{Family: nftables.TableFamilyIPv4, Name: m.cfg.HostPortTable()}
	if len(rules) == 0 {
		return removeHostPortTable(c, table)
	}
	c.AddTable(table)
	pre := c.AddChain(&nftables.Chain{Name: "prerouting", Table: table, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityNATDest})
	out := c.AddChain(&nftables.Chain{Name: "output", Table: table, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookOutput, Priority: nftables.ChainPriorityNATDest})
	post := c.AddChain(&nftables.Chain{Name: "postrouting", Table: table, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPostrouting, Priority: nftables.ChainPriorityNATSource})
	for _, ch := range []*nftables.Chain{pre, out, post} {
		c.FlushChain(ch)
	}
	for _, r := range rules {
		if r.FromPods {
			c.AddRule(&nftables.Rule{Table: table, Chain: pre, Exprs: append([]expr.Any{
				&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
				&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte("pf")}, // iifname "pf*": podflow's bridges
			}, dnat(r)...)})
		}
		if r.FromHost {
			c.AddRule(&nftables.Rule{Table: table, Chain: out, Exprs: dnat(r)})
		}
	}
	// Hairpin: a pod reaching a hostPort of its own node (its own, or a
	// neighbour's) is routed back onto the bridge; it gets the gateway as
	// its source, so the reply comes back through the host (and a pod
	// reaching itself is not handed a packet from its own address), as
	// the portmap plugin's hairpin SNAT. Matched on the connection's
	// original destination, a node address: the bridge's input interface
	// is not known at postrouting when br_netfilter is loaded, and a
	// Service's connections (to a ClusterIP) keep their source. Nothing
	// is masqueraded towards another interface.
	gw := m.gateway.As4()
	name := make([]byte, unix.IFNAMSIZ)
	copy(name, m.cfg.BridgeName)
	for _, a := range append([]netip.Addr{m.gateway}, m.hostIPs()...) {
		d := a.As4()
		c.AddRule(&nftables.Rule{Table: table, Chain: post, Exprs: []expr.Any{
			&expr.Meta{Key: expr.MetaKeyOIFNAME, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: name},
			&expr.Ct{Register: 1, Key: expr.CtKeySTATUS},
			&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
				Mask: binaryutil.NativeEndian.PutUint32(0x20 /* IPS_DST_NAT */), Xor: binaryutil.NativeEndian.PutUint32(0)},
			&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: binaryutil.NativeEndian.PutUint32(0)},
			&expr.Ct{Register: 1, Key: expr.CtKeyDST, Direction: 0 /* original */},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: d[:]},
			&expr.Immediate{Register: 1, Data: gw[:]},
			&expr.NAT{Type: expr.NATTypeSourceNAT, Family: unix.NFPROTO_IPV4, RegAddrMin: 1, RegAddrMax: 1},
		}})
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("program table %q: %w", table.Name, err)
	}
	return nil
}

// dnat is "ip daddr D meta l4proto P th dport N dnat to A:p".
func dnat(r HostPortRule) []expr.Any {
	d, to := r.Daddr.As4(), r.To.Addr().As4()
	proto := map[string]byte{"TCP": unix.IPPROTO_TCP, "UDP": unix.IPPROTO_UDP, "SCTP": unix.IPPROTO_SCTP}[r.Protocol]
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: d[:]},
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{proto}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.BigEndian.PutUint16(r.Port)},
		&expr.Immediate{Register: 1, Data: to[:]},
		&expr.Immediate{Register: 2, Data: binaryutil.BigEndian.PutUint16(r.To.Port())},
		&expr.NAT{Type: expr.NATTypeDestNAT, Family: unix.NFPROTO_IPV4, RegAddrMin: 1, RegAddrMax: 1,
			RegProtoMin: 2, RegProtoMax: 2, Specified: true},
	}
}

// removeHostPortTable deletes the table; a missing table is success.
func removeHostPortTable(c *nftables.Conn, table *nftables.Table) error {
	c.AddTable(table) // so that the delete never fails on a missing table
	c.DelTable(table)
	if err := c.Flush(); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("delete table %q: %w", table.Name, err)
	}
	return nil
}

// clearHostPorts forgets podUID's mappings and reprograms the table
// (Teardown).
func (m *Manager) clearHostPorts(podUID string) error {
	return m.SetHostPorts(podUID, "", nil)
}

// removeHostPorts forgets every mapping and removes the table
// (RemoveBridge).
func (m *Manager) removeHostPorts() error {
	m.hpMu.Lock()
	defer m.hpMu.Unlock()
	if err := os.RemoveAll(m.hostPortDir()); err != nil {
		return err
	}
	c, err := nftables.New(nftables.WithNetNSFd(int(m.hostNS)))
	if err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	return removeHostPortTable(c, &nftables.Table{Family: nftables.TableFamilyIPv4, Name: m.cfg.HostPortTable()})
}
