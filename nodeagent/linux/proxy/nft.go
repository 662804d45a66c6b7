package proxy

import (
	"errors"
	"fmt"
	"net/netip"

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

func matchProto(p string) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{l4proto(p)}},
	}
}

// program writes the whole table of plan in one transaction on c:
// create-if-absent, delete, create again, so the kernel swaps the old
// table for the new one atomically.
func program(c *nftables.Conn, cfg Config, plan Plan) error {
	gw := netip.MustParseAddr(cfg.Gateway).As4()
	table := &nftables.Table{Family: nftables.TableFamilyIPv4, Name: cfg.Table}
	c.AddTable(table)
	c.DelTable(table)
	c.AddTable(table)
	pre := c.AddChain(&nftables.Chain{Name: "prerouting", Table: table, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityNATDest})
	post := c.AddChain(&nftables.Chain{Name: "postrouting", Table: table, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPostrouting, Priority: nftables.ChainPriorityNATSource})

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

	for i, sp := range plan.Ports {
		svc := c.AddChain(&nftables.Chain{Name: sp.serviceChain(), Table: table})
		vmap := &nftables.Set{Table: table, Name: fmt.Sprintf("__map%d", i), ID: uint32(i + 1), Anonymous: true, Constant: true,
			IsMap: true, KeyType: nftables.TypeInteger, DataType: nftables.TypeVerdict}
		elems := make([]nftables.SetElement, len(sp.Endpoints))
		for j, ep := range sp.Endpoints {
			chain := c.AddChain(&nftables.Chain{Name: sp.endpointChain(ep), Table: table})
			ip := ep.Addr().As4()
			exprs := append(matchProto(sp.Protocol),
				&expr.Immediate{Register: 1, Data: ip[:]},
				&expr.Immediate{Register: 2, Data: binaryutil.BigEndian.PutUint16(ep.Port())},
				&expr.NAT{Type: expr.NATTypeDestNAT, Family: unix.NFPROTO_IPV4, RegAddrMin: 1, RegAddrMax: 1,
					RegProtoMin: 2, RegProtoMax: 2, Specified: true},
			)
			c.AddRule(&nftables.Rule{Table: table, Chain: chain, Exprs: exprs})
			elems[j] = nftables.SetElement{Key: binaryutil.NativeEndian.PutUint32(uint32(j)),
				VerdictData: &expr.Verdict{Kind: expr.VerdictGoto, Chain: chain.Name}}
		}
		if err := c.AddSet(vmap, elems); err != nil {
			return fmt.Errorf("%w: map of %s: %w", ErrKernel, sp.serviceChain(), err)
		}
		c.AddRule(&nftables.Rule{Table: table, Chain: svc, Exprs: []expr.Any{
			&expr.Numgen{Register: 1, Modulus: uint32(len(sp.Endpoints)), Type: unix.NFT_NG_RANDOM},
			&expr.Lookup{SourceRegister: 1, DestRegister: 0, IsDestRegSet: true, SetName: vmap.Name, SetID: vmap.ID},
		}})

		ip := sp.IP.As4()
		match := append(matchIf(expr.MetaKeyIIFNAME, cfg.Bridge),
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: ip[:]},
		)
		match = append(match, matchProto(sp.Protocol)...)
		match = append(match,
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.BigEndian.PutUint16(sp.Port)},
			&expr.Verdict{Kind: expr.VerdictGoto, Chain: svc.Name},
		)
		c.AddRule(&nftables.Rule{Table: table, Chain: pre, Exprs: match})
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("%w: program table %q: %w", ErrKernel, cfg.Table, err)
	}
	return nil
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
