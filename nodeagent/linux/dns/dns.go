package dns

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/miekg/dns"
	"golang.org/x/sys/unix"

	corev1 "github.com/podflow/podflow/proto/corev1"
)

// LabelServiceName names an EndpointSlice's Service.
const LabelServiceName = "kubernetes.io/service-name"

// ErrConfig: the Config is invalid.
var ErrConfig = errors.New("dns: invalid config")

// Config configures a Server.
type Config struct {
	// Addr is the UDP and TCP address to listen on (default
	// "127.0.0.1:0": loopback, any free port).
	Addr string
	// Device, when set, binds both listeners to that network interface
	// (SO_BINDTODEVICE): the node agent's server answers only queries that
	// arrive on the node's bridge, that is from its pods — not from the
	// host (whose packets to the bridge's address arrive on lo) nor from
	// any other interface.
	Device string
	// Domain is the cluster domain (default "cluster.local").
	Domain string
	// TTL of every answer (default 5 s, as CoreDNS's kubernetes plugin).
	TTL time.Duration
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{Addr: "127.0.0.1:0", Domain: "cluster.local", TTL: 5 * time.Second}
}

// Validate checks the Config.
func (c Config) Validate() error {
	if _, _, err := net.SplitHostPort(c.Addr); err != nil {
		return fmt.Errorf("%w: Addr %q: %w", ErrConfig, c.Addr, err)
	}
	if _, ok := dns.IsDomainName(c.Domain); !ok || c.Domain == "" {
		return fmt.Errorf("%w: Domain %q", ErrConfig, c.Domain)
	}
	if c.TTL < time.Second {
		return fmt.Errorf("%w: TTL %s must be at least 1s", ErrConfig, c.TTL)
	}
	return nil
}

// records is one immutable snapshot of the zone.
type records struct {
	a   map[string][]netip.Addr // fqdn -> addresses
	srv map[string][]*dns.SRV   // fqdn -> SRV answers
}

// Server answers cluster DNS queries.
type Server struct {
	cfg    Config
	domain string // fqdn, lower case: "cluster.local."
	mu     sync.RWMutex
	zone   *records
	udp    *dns.Server
	tcp    *dns.Server
	addr   string
	wg     sync.WaitGroup
}

// New returns a Server with no records.
func New(cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Server{cfg: cfg, domain: dns.CanonicalName(cfg.Domain), zone: &records{}}, nil
}

// Sync replaces the records with those of services and slices; it reports
// true (the records are always rebuilt), so a Server is a
// nodewire.ServiceSyncer like the proxy.
func (s *Server) Sync(_ context.Context, services []*corev1.Service, slices_ []*corev1.EndpointSlice) (bool, error) {
	z := build(s.domain, services, slices_)
	s.mu.Lock()
	s.zone = z
	s.mu.Unlock()
	return true, nil
}

func build(domain string, services []*corev1.Service, sls []*corev1.EndpointSlice) *records {
	z := &records{a: map[string][]netip.Addr{}, srv: map[string][]*dns.SRV{}}
	byService := map[string][]*corev1.EndpointSlice{}
	for _, sl := range sls {
		key := sl.GetMetadata().GetNamespace() + "/" + sl.GetMetadata().GetLabels()[LabelServiceName]
		byService[key] = append(byService[key], sl)
	}
	for _, svc := range services {
		ns, name := svc.GetMetadata().GetNamespace(), svc.GetMetadata().GetName()
		fqdn := strings.ToLower(name + "." + ns + ".svc." + domain)
		headless := svc.GetSpec().GetClusterIp() == "None"
		if headless {
			z.a[fqdn] = readyIPs(byService[ns+"/"+name])
		} else if ip, err := netip.ParseAddr(svc.GetSpec().GetClusterIp()); err == nil && ip.Is4() {
			z.a[fqdn] = []netip.Addr{ip}
		} else {
			continue // ExternalName, not allocated
		}
		for _, sp := range svc.GetSpec().GetPorts() {
			if sp.GetName() == "" {
				continue
			}
			port := sp.GetPort()
			if headless {
				port = slicePort(byService[ns+"/"+name], sp.GetName())
			}
			if port <= 0 || port > 65535 {
				continue
			}
			q := strings.ToLower("_" + sp.GetName() + "._" + cmp.Or(sp.GetProtocol(), "TCP") + "." + fqdn)
			z.srv[q] = append(z.srv[q], &dns.SRV{Priority: 0, Weight: 100, Port: uint16(port), Target: fqdn})
		}
	}
	return z
}

func readyIPs(sls []*corev1.EndpointSlice) []netip.Addr {
	var out []netip.Addr
	for _, sl := range sls {
		for _, ep := range sl.GetEndpoints() {
			c := ep.GetConditions()
			if c != nil && c.Ready != nil && !c.GetReady() {
				continue
			}
			for _, a := range ep.GetAddresses() {
				if ip, err := netip.ParseAddr(a); err == nil && ip.Is4() {
					out = append(out, ip)
				}
			}
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return slices.Compact(out)
}

func slicePort(sls []*corev1.EndpointSlice, name string) int32 {
	for _, sl := range sls {
		for _, p := range sl.GetPorts() {
			if p.GetName() == name {
				return p.GetPort()
			}
		}
	}
	return 0
}

// ServeDNS answers one query from the current records.
func (s *Server) ServeDNS(w dns.ResponseWriter, req *dns.Msg) {
	m := new(dns.Msg)
	m.SetReply(req)
	m.Authoritative = true
	if len(req.Question) != 1 {
		m.SetRcode(req, dns.RcodeFormatError)
		_ = w.WriteMsg(m)
		return
	}
	q := req.Question[0]
	name := dns.CanonicalName(q.Name)
	if !dns.IsSubDomain(s.domain, name) || q.Qclass != dns.ClassINET {
		m.Authoritative = false
		m.SetRcode(req, dns.RcodeRefused) // never forwarded
		_ = w.WriteMsg(m)
		return
	}
	s.mu.RLock()
	z := s.zone
	s.mu.RUnlock()
	hdr := func(t uint16) dns.RR_Header {
		return dns.RR_Header{Name: q.Name, Rrtype: t, Class: dns.ClassINET, Ttl: uint32(s.cfg.TTL / time.Second)}
	}
	addrs, isName := z.a[name]
	if !isName {
		if ip, ok := s.podIP(name); ok {
			addrs, isName = []netip.Addr{ip}, true
		}
	}
	srvs, isSRV := z.srv[name]
	switch {
	case isSRV:
		if q.Qtype == dns.TypeSRV || q.Qtype == dns.TypeANY {
			for _, r := range srvs {
				rr := *r
				rr.Hdr = hdr(dns.TypeSRV)
				m.Answer = append(m.Answer, &rr)
				for _, ip := range z.a[rr.Target] {
					m.Extra = append(m.Extra, &dns.A{Hdr: dns.RR_Header{Name: rr.Target, Rrtype: dns.TypeA, Class: dns.ClassINET,
						Ttl: uint32(s.cfg.TTL / time.Second)}, A: ip.AsSlice()})
				}
			}
		}
	case isName:
		if q.Qtype == dns.TypeA || q.Qtype == dns.TypeANY {
			for _, ip := range addrs {
				m.Answer = append(m.Answer, &dns.A{Hdr: hdr(dns.TypeA), A: ip.AsSlice()})
			}
		}
	default:
		m.SetRcode(req, dns.RcodeNameError)
	}
	if len(m.Answer) == 0 {
		m.Ns = []dns.RR{s.soa()}
	}
	_ = w.WriteMsg(m)
}

// podIP parses <a-b-c-d>.<ns>.pod.<domain>.
func (s *Server) podIP(name string) (netip.Addr, bool) {
	labels := dns.SplitDomainName(strings.TrimSuffix(name, "."+s.domain))
	if len(labels) != 3 || labels[2] != "pod" {
		return netip.Addr{}, false
	}
	ip, err := netip.ParseAddr(strings.ReplaceAll(labels[0], "-", "."))
	return ip, err == nil && ip.Is4()
}

func (s *Server) soa() dns.RR {
	return &dns.SOA{Hdr: dns.RR_Header{Name: s.domain, Rrtype: dns.TypeSOA, Class: dns.ClassINET, Ttl: uint32(s.cfg.TTL / time.Second)},
		Ns: "ns.dns." + s.domain, Mbox: "hostmaster." + s.domain, Serial: 1, Refresh: 7200, Retry: 1800, Expire: 86400,
		Minttl: uint32(s.cfg.TTL / time.Second)}
}

// Start listens on Addr (UDP and TCP, the same port) and serves until
// Close.
func (s *Server) Start() error {
	lc := net.ListenConfig{}
	if dev := s.cfg.Device; dev != "" {
		lc.Control = func(_, _ string, c syscall.RawConn) error {
			var serr error
			if err := c.Control(func(fd uintptr) { serr = unix.BindToDevice(int(fd), dev) }); err != nil {
				return err
			}
			return serr
		}
	}
	pc, l, err := listenPair(lc, s.cfg.Addr)
	if err != nil {
		return err
	}
	s.addr = pc.LocalAddr().String()
	started := make(chan struct{}, 2)
	notify := func() { started <- struct{}{} }
	s.udp = &dns.Server{PacketConn: pc, Handler: s, NotifyStartedFunc: notify}
	s.tcp = &dns.Server{Listener: l, Handler: s, NotifyStartedFunc: notify}
	for _, srv := range []*dns.Server{s.udp, s.tcp} {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			_ = srv.ActivateAndServe()
		}()
	}
	<-started // Shutdown refuses a server that has not started
	<-started
	return nil
}

// portPicks bounds listenPair's choices of a port for an address with
// port 0.
const portPicks = 16

// listenPair listens on addr over UDP and then TCP on the same port. With
// port 0 the kernel picks the UDP port, and that number may be taken over
// TCP by another socket: then another UDP port is picked, at most
// portPicks times. A port named in addr is tried once.
func listenPair(lc net.ListenConfig, addr string) (net.PacketConn, net.Listener, error) {
	ctx := context.Background()
	_, port, _ := net.SplitHostPort(addr) // Validate checked it
	return pairOn(port == "0",
		func() (net.PacketConn, error) { return lc.ListenPacket(ctx, "udp", addr) },
		func(a string) (net.Listener, error) { return lc.Listen(ctx, "tcp", a) })
}

// pairOn is listenPair's loop: udp picks the UDP socket, tcp listens on
// its address; only an anyPort pick is made again, on EADDRINUSE.
func pairOn(anyPort bool, udp func() (net.PacketConn, error), tcp func(string) (net.Listener, error)) (net.PacketConn, net.Listener, error) {
	for pick := 1; ; pick++ {
		pc, err := udp()
		if err != nil {
			return nil, nil, fmt.Errorf("dns: listen udp: %w", err)
		}
		l, err := tcp(pc.LocalAddr().String())
		if err == nil {
			return pc, l, nil
		}
		pc.Close()
		if !anyPort || !errors.Is(err, syscall.EADDRINUSE) || pick == portPicks {
			return nil, nil, fmt.Errorf("dns: listen tcp %s: %w", pc.LocalAddr(), err)
		}
	}
}

// Addr returns the address Start listens on.
func (s *Server) Addr() string { return s.addr }

// Close stops serving and closes the listeners. Idempotent.
func (s *Server) Close() error {
	var errs []error
	for _, srv := range []*dns.Server{s.udp, s.tcp} {
		if srv != nil {
			if err := srv.Shutdown(); err != nil {
				errs = append(errs, err)
			}
		}
	}
	s.udp, s.tcp = nil, nil
	s.wg.Wait()
	return errors.Join(errs...)
}
