package sim

import (
	"errors"
	"fmt"
	"net/netip"
	"sync"
)

// ErrRangeFull is returned by IPAM.Allocate when every address is in use.
var ErrRangeFull = errors.New("sim: pod CIDR has no free address")

// IPAM hands out the addresses of one pod CIDR, next-fit like CNI's
// host-local plugin: the network address, the first address (the bridge's
// gateway) and the broadcast address are never given out, an address in use
// is never given out twice, and a released address is reused only after the
// rest of the range has been tried. It is safe for concurrent use.
type IPAM struct {
	mu          sync.Mutex
	first, last netip.Addr
	next        netip.Addr
	used        map[netip.Addr]string // address -> owner
}

// NewIPAM returns an allocator over cidr (IPv4, at most /30).
func NewIPAM(cidr string) (*IPAM, error) {
	p, err := netip.ParsePrefix(cidr)
	if err != nil {
		return nil, fmt.Errorf("sim: pod CIDR %q: %w", cidr, err)
	}
	if !p.Addr().Is4() || p.Bits() > 30 || p.Masked() != p {
		return nil, fmt.Errorf("sim: pod CIDR %q: need an IPv4 network of /30 or wider", cidr)
	}
	first := p.Addr().Next().Next() // skip network and gateway
	b := p.Addr().As4()
	host := uint32(1)<<(32-p.Bits()) - 1
	v := (uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])) | host
	last := netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}).Prev() // skip broadcast
	return &IPAM{first: first, last: last, next: first, used: map[netip.Addr]string{}}, nil
}

// Allocate reserves a free address for owner.
func (p *IPAM) Allocate(owner string) (netip.Addr, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	a := p.next
	for {
		if _, taken := p.used[a]; !taken {
			p.used[a] = owner
			p.next = p.after(a)
			return a, nil
		}
		a = p.after(a)
		if a == p.next {
			return netip.Addr{}, ErrRangeFull
		}
	}
}

func (p *IPAM) after(a netip.Addr) netip.Addr {
	if a == p.last {
		return p.first
	}
	return a.Next()
}

// Release frees a; releasing a free address does nothing.
func (p *IPAM) Release(a netip.Addr) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.used, a)
}

// InUse counts allocated addresses.
func (p *IPAM) InUse() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.used)
}

// Size is how many addresses the range can give out.
func (p *IPAM) Size() int {
	a, b := p.first.As4(), p.last.As4()
	u := func(x [4]byte) int { return int(x[0])<<24 | int(x[1])<<16 | int(x[2])<<8 | int(x[3]) }
	return u(b) - u(a) + 1
}
