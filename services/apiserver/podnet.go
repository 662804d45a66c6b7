package apiserver

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/pipeline"
)

// PodListeners serves the front door on the addresses this machine's pods
// can route to, besides Config.Addr (loopback): the gateway of each
// podflow node bridge on the machine whose pod CIDR this cluster's store
// has allocated (pipeline.PodCIDRPrefix) — the bridge's first address,
// which every pod of the node has as its default route. The kubernetes
// Service's endpoints are these addresses (Endpoint), so a pod reaches
// the API at https://kubernetes.default.svc through the node proxy's DNAT,
// and nothing is bound to an address off the machine's pod networks.
//
// Bridges come and go with their node agents, so the local addresses are
// looked at every Interval: a listener is opened (SO_REUSEPORT, shared by
// the replicas) for a new gateway and closed once its address is gone.
type PodListeners struct {
	// Store is read for the pod CIDR allocations.
	Store *objects.Store
	// Port is the port to serve on (Config.Addr's).
	Port int
	// Fallback is the endpoint when no gateway is served (the loopback
	// address of a cluster without a Linux node): Endpoint still names
	// this replica.
	Fallback netip.AddrPort
	// Interval between looks at the local addresses (default 2s).
	Interval time.Duration
	Log      *slog.Logger

	mu      sync.Mutex
	serving map[netip.Addr]context.CancelFunc
}

// Endpoint returns the address pods reach this replica at: the lowest
// gateway served, else Fallback (false when that is unset).
func (p *PodListeners) Endpoint() (netip.AddrPort, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var best netip.Addr
	for a := range p.serving {
		if !best.IsValid() || a.Less(best) {
			best = a
		}
	}
	if best.IsValid() {
		return netip.AddrPortFrom(best, uint16(p.Port)), true
	}
	return p.Fallback, p.Fallback.IsValid()
}

// Serving returns the gateways being served.
func (p *PodListeners) Serving() []netip.Addr {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]netip.Addr, 0, len(p.serving))
	for a := range p.serving {
		out = append(out, a)
	}
	return out
}

// run looks at the local addresses now and every Interval until ctx ends,
// serving s on each gateway found.
func (p *PodListeners) run(ctx context.Context, g *errgroup.Group, s *Server) {
	if p.Interval <= 0 {
		p.Interval = 2 * time.Second
	}
	if p.Log == nil {
		p.Log = slog.Default()
	}
	p.mu.Lock()
	p.serving = map[netip.Addr]context.CancelFunc{}
	p.mu.Unlock()
	g.Go(func() error {
		t := time.NewTicker(p.Interval)
		defer t.Stop()
		for {
			p.sync(ctx, g, s)
			select {
			case <-ctx.Done():
				return nil
			case <-t.C:
			}
		}
	})
}

// gateways returns the local IPv4 addresses that are the gateway (first
// address) of their interface's prefix, with that prefix.
func gateways() (map[netip.Addr]netip.Prefix, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, err
	}
	out := map[netip.Addr]netip.Prefix{}
	for _, a := range addrs {
		ipn, ok := a.(*net.IPNet)
		if !ok {
			continue
		}
		ip, ok := netip.AddrFromSlice(ipn.IP.To4())
		if !ok || ip.IsLoopback() {
			continue
		}
		ones, bits := ipn.Mask.Size()
		if bits != 32 || ones >= 31 {
			continue
		}
		pfx := netip.PrefixFrom(ip, ones).Masked()
		if pfx.Addr().Next() == ip {
			out[ip] = pfx
		}
	}
	return out, nil
}

func (p *PodListeners) sync(ctx context.Context, g *errgroup.Group, s *Server) {
	gws, err := gateways()
	if err != nil {
		p.Log.Warn("pod listeners: local addresses", "err", err)
		return
	}
	want := map[netip.Addr]bool{}
	for ip, pfx := range gws {
		key := pipeline.PodCIDRPrefix + strings.ReplaceAll(pfx.String(), "/", "-")
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := p.Store.KV().Get(rctx, key)
		cancel()
		switch {
		case err == nil:
			want[ip] = true
		case errors.Is(err, raftstore.ErrNotFound):
		default:
			// The store cannot say: keep what is served.
			p.mu.Lock()
			if _, ok := p.serving[ip]; ok {
				want[ip] = true
			}
			p.mu.Unlock()
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for ip, stop := range p.serving {
		if !want[ip] {
			stop()
			delete(p.serving, ip)
			p.Log.Info("stopped serving on a pod network gateway", "addr", ip)
		}
	}
	for ip := range want {
		if _, ok := p.serving[ip]; ok {
			continue
		}
		addr := net.JoinHostPort(ip.String(), strconv.Itoa(p.Port))
		l, err := Listen(ctx, addr)
		if err != nil {
			p.Log.Warn("pod listeners: listen", "addr", addr, "err", err)
			continue
		}
		lctx, stop := context.WithCancel(ctx)
		p.serving[ip] = stop
		g.Go(func() error {
			if err := s.serveExtra(lctx, l); err != nil && lctx.Err() == nil {
				p.Log.Warn("pod listeners: serve", "addr", addr, "err", err)
			}
			return nil
		})
		p.Log.Info("serving on a pod network gateway", "addr", addr)
	}
}
