package proxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	corev1 "github.com/podflow/podflow/proto/corev1"
)

// Proxy programs one node's service rules. Sync and Close may be called
// from any goroutine; they are serialised.
type Proxy struct {
	cfg    Config
	ns     netns.NsHandle // -1: the caller's namespace
	link   *netlink.Handle
	mu     sync.Mutex
	last   *Plan // what the table holds; nil before the first Sync
	closed bool
}

// New checks cfg, installs the unreachable route for the service CIDR and
// an empty table, and returns the Proxy. It must run as root.
func New(ctx context.Context, cfg Config) (_ *Proxy, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	p, err := open(cfg)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			p.release()
		}
	}()
	if err := p.link.RouteReplace(p.unreachable()); err != nil {
		return nil, fmt.Errorf("%w: unreachable route %s: %w", ErrKernel, cfg.ServiceCIDR, err)
	}
	if r := p.localRoute(); r != nil {
		if err := p.link.RouteReplace(r); err != nil {
			return nil, fmt.Errorf("%w: route %s dev %s table %d: %w", ErrKernel, cfg.PodCIDR, cfg.Bridge, cfg.RouteTable, err)
		}
	}
	if err := p.apply(Plan{}); err != nil {
		return nil, err
	}
	return p, nil
}

// localRoute is the bridge table's route to the node's own pods (nil when
// not configured).
func (p *Proxy) localRoute() *netlink.Route {
	if p.cfg.RouteTable == 0 {
		return nil
	}
	br, err := p.link.LinkByName(p.cfg.Bridge)
	if err != nil {
		return nil
	}
	cidr := netip.MustParsePrefix(p.cfg.PodCIDR)
	return &netlink.Route{
		LinkIndex: br.Attrs().Index,
		Dst:       &net.IPNet{IP: cidr.Addr().AsSlice(), Mask: net.CIDRMask(cidr.Bits(), 32)},
		Scope:     netlink.SCOPE_LINK,
		Table:     p.cfg.RouteTable,
	}
}

// open checks cfg and opens the handles of a Proxy.
func open(cfg Config) (*Proxy, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	p := &Proxy{cfg: cfg, ns: netns.None()}
	var err error
	if cfg.NetNS != "" {
		if p.ns, err = netns.GetFromPath(cfg.NetNS); err != nil {
			return nil, fmt.Errorf("%w: open netns %q: %w", ErrKernel, cfg.NetNS, err)
		}
		p.link, err = netlink.NewHandleAt(p.ns)
	} else {
		p.link, err = netlink.NewHandle()
	}
	if err != nil {
		p.release()
		return nil, fmt.Errorf("%w: netlink handle: %w", ErrKernel, err)
	}
	return p, nil
}

// unreachable is the main table's route for the whole service CIDR.
func (p *Proxy) unreachable() *netlink.Route {
	cidr := netip.MustParsePrefix(p.cfg.ServiceCIDR)
	return &netlink.Route{
		Dst:   &net.IPNet{IP: cidr.Addr().AsSlice(), Mask: net.CIDRMask(cidr.Bits(), 32)},
		Type:  unix.RTN_UNREACHABLE,
		Table: unix.RT_TABLE_MAIN,
	}
}

func (p *Proxy) conn() (*nftables.Conn, error) {
	var opts []nftables.ConnOption
	if p.ns.IsOpen() {
		opts = append(opts, nftables.WithNetNSFd(int(p.ns)))
	}
	c, err := nftables.New(opts...)
	if err != nil {
		return nil, fmt.Errorf("%w: nftables: %w", ErrKernel, err)
	}
	return c, nil
}

func (p *Proxy) apply(plan Plan) error {
	c, err := p.conn()
	if err != nil {
		return err
	}
	if err := program(c, p.cfg, plan); err != nil {
		return err
	}
	p.last = &plan
	return nil
}

// ErrClosed: Sync after Close.
var ErrClosed = errors.New("proxy: closed")

// Sync programs the rules for services and slices (everything the caller
// knows: what is not passed is removed). It reprograms only when the plan
// changed, and reports whether it did. Then, every time, it deletes the
// UDP conntrack entries towards ClusterIP:ports whose endpoint no longer
// serves them (staleUDP).
func (p *Proxy) Sync(ctx context.Context, services []*corev1.Service, slices []*corev1.EndpointSlice) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	plan := BuildFor(p.cfg.NodeName, services, slices).Within(netip.MustParsePrefix(p.cfg.ServiceCIDR))
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false, ErrClosed
	}
	var prev Plan
	if p.last != nil {
		prev = *p.last
	}
	changed := p.last == nil || !p.last.Equal(plan)
	if changed {
		if err := p.apply(plan); err != nil {
			return true, err
		}
	}
	_, err := p.flushStaleUDP(plan, prev)
	return changed, err
}

// Plan returns the plan last programmed.
func (p *Proxy) Plan() Plan {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.last == nil {
		return Plan{}
	}
	return *p.last
}

// UnreachableRoute reports whether the service CIDR's unreachable route
// is in the main table (tests assert it before they send).
func UnreachableRoute(h *netlink.Handle, serviceCIDR string) (bool, error) {
	cidr, err := netip.ParsePrefix(serviceCIDR)
	if err != nil {
		return false, err
	}
	routes, err := h.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_TABLE)
	if err != nil {
		return false, err
	}
	for _, r := range routes {
		if r.Type == unix.RTN_UNREACHABLE && r.Dst != nil && r.Dst.String() == cidr.String() {
			return true, nil
		}
	}
	return false, nil
}

// Close removes the table, then the unreachable route. Idempotent.
func (p *Proxy) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	p.closed = true
	var errs []error
	if c, err := p.conn(); err != nil {
		errs = append(errs, err)
	} else if err := removeTable(c, p.cfg.Table); err != nil {
		errs = append(errs, err)
	}
	if len(errs) == 0 { // keep the routes while rules may remain
		errs = append(errs, p.removeRoutes())
	}
	p.release()
	return errors.Join(errs...)
}

func (p *Proxy) removeRoutes() error {
	var errs []error
	if r := p.localRoute(); r != nil {
		if err := p.link.RouteDel(r); err != nil && !errors.Is(err, unix.ESRCH) {
			errs = append(errs, fmt.Errorf("%w: delete route %s table %d: %w", ErrKernel, p.cfg.PodCIDR, p.cfg.RouteTable, err))
		}
	}
	if err := p.link.RouteDel(p.unreachable()); err != nil && !errors.Is(err, unix.ESRCH) {
		errs = append(errs, fmt.Errorf("%w: delete unreachable route: %w", ErrKernel, err))
	}
	return errors.Join(errs...)
}

// Remove deletes what a proxy with cfg leaves in the kernel (its table,
// then its routes), for a node agent that did not Close (decommission).
// Idempotent.
func Remove(cfg Config) error {
	p, err := open(cfg)
	if err != nil {
		return err
	}
	return p.Close()
}

func (p *Proxy) release() {
	if p.link != nil {
		p.link.Close()
	}
	if p.ns.IsOpen() {
		p.ns.Close()
	}
}
