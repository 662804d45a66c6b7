package proxy

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// ipsDstNAT is the conntrack status bit of a DNATed connection.
const ipsDstNAT = 0x20

func ifname(name string) []byte {
	b := make([]byte, unix.IFNAMSIZ)
	copy(b, name)
	return b
}

func l4proto(p string) byte {
	if p == "UDP" {
		return unix.IPPROTO_UDP
	}
	return unix.IPPROTO_TCP
}

// matchIf loads the interface name (meta key) and compares it with name.
func matchIf(key expr.MetaKey, name string) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: key, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: ifname(name)},
	}
}

// matchIfPrefix matches an interface name starting with prefix (nft's
// iifname "prefix*": a compare of the prefix's bytes alone).
func matchIfPrefix(key expr.MetaKey, prefix string) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: key, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte(prefix)},
	}
}

// dstMatch is pre (an interface match, or nil) then "ip daddr ip meta
// l4proto proto th dport port goto chain".
func dstMatch(pre []expr.Any, ip netip.Addr, proto string, port uint16, chain string) []expr.Any {
	a := ip.As4()
	m := append(pre,
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: a[:]},
	)
	m = append(m, matchProto(proto)...)
	return append(m,
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.BigEndian.PutUint16(port)},
		&expr.Verdict{Kind: expr.VerdictGoto, Chain: chain},
	)
}

func matchProto(p string) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{l4proto(p)}},
	}
}

// program brings the table to plan in one transaction on c, as
// kube-proxy's nftables mode does: the table, the chains and the affinity
// sets are created if absent, every chain of the table is flushed and the
// wanted ones get their rules again, then the chains and affinity sets no
// longer wanted are deleted. An affinity set that stays is never flushed,
// so its clients keep their endpoints across syncs. The kernel applies
// the transaction atomically: a packet sees the old rules or the new.
func program(c *nftables.Conn, cfg Config, plan Plan) error {
	table := &nftables.Table{Family: nftables.TableFamilyIPv4, Name: cfg.Table}
	haveChains, haveSets, err := contents(c, table)
	if err != nil {
		return err
	}
	c.AddTable(table)
	pre := c.AddChain(&nftables.Chain{Name: "prerouting", Table: table, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityNATDest})
	post := c.AddChain(&nftables.Chain{Name: "postrouting", Table: table, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPostrouting, Priority: nftables.ChainPriorityNATSource})
	out := c.AddChain(&nftables.Chain{Name: "output", Table: table, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookOutput, Priority: nftables.ChainPriorityNATDest})
	wantChains := map[string]*nftables.Chain{pre.Name: pre, post.Name: post, out.Name: out}
	wantSets := map[string]*nftables.Set{}
	var setID uint32 // unique within the transaction
	for _, sp := range plan.Ports {
		wantChains[sp.serviceChain()] = &nftables.Chain{Name: sp.serviceChain(), Table: table}
		for _, ep := range sp.Endpoints {
			wantChains[sp.endpointChain(ep)] = &nftables.Chain{Name: sp.endpointChain(ep), Table: table}
			if sp.Affinity != 0 {
				setID++
				wantSets[sp.affinitySet(ep)] = &nftables.Set{Table: table, Name: sp.affinitySet(ep), ID: setID,
					KeyType: nftables.TypeIPAddr, Dynamic: true, HasTimeout: true, Timeout: sp.Affinity}
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(wantSets)) {
		if err := c.AddSet(wantSets[name], nil); err != nil {
			return fmt.Errorf("%w: set %s: %w", ErrKernel, name, err)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(wantChains)) {
		if name != pre.Name && name != post.Name && name != out.Name {
			c.AddChain(wantChains[name])
		}
	}
	for name := range haveChains { // what the rules reference goes with them
		if wantChains[name] == nil {
			c.FlushChain(&nftables.Chain{Name: name, Table: table})
		}
	}
	for _, ch := range wantChains {
		c.FlushChain(ch)
	}

	gw := netip.MustParseAddr(cfg.Gateway).As4()
	hairpin := append(matchIf(expr.MetaKeyIIFNAME, cfg.Bridge), matchIf(expr.MetaKeyOIFNAME, cfg.Bridge)...)
	hairpin = append(hairpin,
		&expr.Ct{Register: 1, Key: expr.CtKeySTATUS},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(ipsDstNAT), Xor: binaryutil.NativeEndian.PutUint32(0)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: binaryutil.NativeEndian.PutUint32(0)},
		&expr.Immediate{Register: 1, Data: gw[:]},
		&expr.NAT{Type: expr.NATTypeSourceNAT, Family: unix.NFPROTO_IPV4, RegAddrMin: 1, RegAddrMax: 1},
	)
	c.AddRule(&nftables.Rule{Table: table, Chain: post, Exprs: hairpin})
	// An endpoint reaching itself through a Service: SNATed to the
	// gateway (kube-proxy masquerades this hairpin), or it would get its
	// own address back as a source. Matched on the addresses: the input
	// interface is not known at postrouting when br_netfilter is loaded.
	for _, ep := range plan.endpointIPs() {
		a := ep.As4()
		c.AddRule(&nftables.Rule{Table: table, Chain: post, Exprs: []expr.Any{
			saddr(),
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: a[:]},
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: a[:]},
			&expr.Ct{Register: 1, Key: expr.CtKeySTATUS},
			&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
				Mask: binaryutil.NativeEndian.PutUint32(ipsDstNAT), Xor: binaryutil.NativeEndian.PutUint32(0)},
			&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: binaryutil.NativeEndian.PutUint32(0)},
			&expr.Immediate{Register: 1, Data: gw[:]},
			&expr.NAT{Type: expr.NATTypeSourceNAT, Family: unix.NFPROTO_IPV4, RegAddrMin: 1, RegAddrMax: 1},
		}})
	}

	for _, sp := range plan.Ports {
		svc := wantChains[sp.serviceChain()]
		setID++
		vmap := &nftables.Set{Table: table, Name: "__map%d", ID: setID, Anonymous: true, Constant: true,
			IsMap: true, KeyType: nftables.TypeInteger, DataType: nftables.TypeVerdict}
		elems := make([]nftables.SetElement, len(sp.Endpoints))
		for j, ep := range sp.Endpoints {
			chain := wantChains[sp.endpointChain(ep)]
			var exprs []expr.Any
			if sp.Affinity != 0 { // update @aff { ip saddr }: this client, this endpoint, for the timeout
				aff := wantSets[sp.affinitySet(ep)]
				exprs = append(exprs, saddr(),
					&expr.Dynset{SrcRegKey: 1, SetName: aff.Name, SetID: aff.ID, Operation: unix.NFT_DYNSET_OP_UPDATE, Timeout: sp.Affinity})
			}
			ip := ep.Addr().As4()
			exprs = append(exprs, matchProto(sp.Protocol)...)
			exprs = append(exprs,
				&expr.Immediate{Register: 1, Data: ip[:]},
				&expr.Immediate{Register: 2, Data: binaryutil.BigEndian.PutUint16(ep.Port())},
				&expr.NAT{Type: expr.NATTypeDestNAT, Family: unix.NFPROTO_IPV4, RegAddrMin: 1, RegAddrMax: 1,
					RegProtoMin: 2, RegProtoMax: 2, Specified: true},
			)
			c.AddRule(&nftables.Rule{Table: table, Chain: chain, Exprs: exprs})
			elems[j] = nftables.SetElement{Key: binaryutil.NativeEndian.PutUint32(uint32(j)),
				VerdictData: &expr.Verdict{Kind: expr.VerdictGoto, Chain: chain.Name}}
			if sp.Affinity != 0 { // ip saddr @aff goto <endpoint>: a known client keeps its endpoint
				aff := wantSets[sp.affinitySet(ep)]
				c.AddRule(&nftables.Rule{Table: table, Chain: svc, Exprs: []expr.Any{saddr(),
					&expr.Lookup{SourceRegister: 1, SetName: aff.Name, SetID: aff.ID},
					&expr.Verdict{Kind: expr.VerdictGoto, Chain: chain.Name},
				}})
			}
		}
		if err := c.AddSet(vmap, elems); err != nil {
			return fmt.Errorf("%w: map of %s: %w", ErrKernel, sp.serviceChain(), err)
		}
		c.AddRule(&nftables.Rule{Table: table, Chain: svc, Exprs: []expr.Any{
			&expr.Numgen{Register: 1, Modulus: uint32(len(sp.Endpoints)), Type: unix.NFT_NG_RANDOM},
			&expr.Lookup{SourceRegister: 1, DestRegister: 0, IsDestRegSet: true, SetName: vmap.Name, SetID: vmap.ID},
		}})

		if !sp.External {
			c.AddRule(&nftables.Rule{Table: table, Chain: pre,
				Exprs: dstMatch(matchIf(expr.MetaKeyIIFNAME, cfg.Bridge), sp.IP, sp.Protocol, sp.Port, svc.Name)})
			continue
		}
		for _, s := range cfg.NodeIPs {
			ip := netip.MustParseAddr(s) // Validate checked it
			c.AddRule(&nftables.Rule{Table: table, Chain: pre,
				Exprs: dstMatch(matchIfPrefix(expr.MetaKeyIIFNAME, bridgePrefix), ip, sp.Protocol, sp.Port, svc.Name)})
			c.AddRule(&nftables.Rule{Table: table, Chain: out, Exprs: dstMatch(nil, ip, sp.Protocol, sp.Port, svc.Name)})
		}
	}
	for name := range haveChains {
		if wantChains[name] == nil {
			c.DelChain(&nftables.Chain{Name: name, Table: table})
		}
	}
	for _, name := range haveSets {
		if wantSets[name] == nil {
			c.DelSet(&nftables.Set{Name: name, Table: table})
		}
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("%w: program table %q: %w", ErrKernel, cfg.Table, err)
	}
	return nil
}

// saddr loads the IPv4 source address into register 1.
func saddr() expr.Any {
	return &expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 12, Len: 4}
}

// contents lists the chains and the named sets the table holds (none
// when it does not exist).
func contents(c *nftables.Conn, table *nftables.Table) (chains map[string]bool, sets []string, err error) {
	tables, err := c.ListTablesOfFamily(table.Family)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: list tables: %w", ErrKernel, err)
	}
	if !slices.ContainsFunc(tables, func(t *nftables.Table) bool { return t.Name == table.Name }) {
		return nil, nil, nil
	}
	all, err := c.ListChainsOfTableFamily(table.Family)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: list chains: %w", ErrKernel, err)
	}
	chains = map[string]bool{}
	for _, ch := range all {
		if ch.Table.Name == table.Name {
			chains[ch.Name] = true
		}
	}
	named, err := c.GetSets(table)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: list sets of %q: %w", ErrKernel, table.Name, err)
	}
	for _, s := range named {
		if !s.Anonymous && !strings.HasPrefix(s.Name, "__") {
			sets = append(sets, s.Name)
		}
	}
	return chains, sets, nil
}

// removeTable deletes the table; a missing table is success.
func removeTable(c *nftables.Conn, name string) error {
	table := &nftables.Table{Family: nftables.TableFamilyIPv4, Name: name}
	c.AddTable(table) // so that the delete never fails on a missing table
	c.DelTable(table)
	if err := c.Flush(); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("%w: delete table %q: %w", ErrKernel, name, err)
	}
	return nil
}
