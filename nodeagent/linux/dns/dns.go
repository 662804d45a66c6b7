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
	a     map[string][]netip.Addr // fqdn -> addresses
	srv   map[string][]*dns.SRV   // fqdn -> SRV answers
	cname map[string]string       // fqdn of an ExternalName Service -> its externalName (fqdn)
	ptr   map[string][]string     // <reversed ip>.in-addr.arpa. -> fqdns
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

// build computes the zone as CoreDNS's kubernetes plugin answers it from
// Services and EndpointSlices (the Ready endpoints):
//   - <svc>.<ns>.svc A: the ClusterIP; for a headless Service every
//     endpoint's address (none: the name does not exist);
//   - <endpoint>.<svc>.<ns>.svc A: an endpoint's address, <endpoint> being
//     its hostname (a pod's spec.hostname under its subdomain's Service)
//     or its address with dashes;
//   - _<port>._<proto>.<svc>.<ns>.svc SRV for each named port: the
//     Service's name and port, or for a headless Service each endpoint's
//     name and port, weights spread as CoreDNS spreads them;
//   - <svc>.<ns>.svc CNAME for an ExternalName Service;
//   - PTR for a ClusterIP (the Service's name) and for an endpoint's
//     address (the endpoint's name).
func build(domain string, services []*corev1.Service, sls []*corev1.EndpointSlice) *records {
	z := &records{a: map[string][]netip.Addr{}, srv: map[string][]*dns.SRV{}, cname: map[string]string{}, ptr: map[string][]string{}}
	byService := map[string][]*corev1.EndpointSlice{}
	for _, sl := range sls {
		if t := sl.GetAddressType(); t != "" && t != "IPv4" {
			continue
		}
		key := sl.GetMetadata().GetNamespace() + "/" + sl.GetMetadata().GetLabels()[LabelServiceName]
		byService[key] = append(byService[key], sl)
	}
	addPTR := func(ptr map[string][]string, ip netip.Addr, name string) {
		rev, err := dns.ReverseAddr(ip.String())
		if err == nil && !slices.Contains(ptr[rev], name) {
			ptr[rev] = append(ptr[rev], name)
		}
	}
	endpointPTR := map[string][]string{} // a ClusterIP's PTR wins over these
	for _, svc := range services {
		ns, name := svc.GetMetadata().GetNamespace(), svc.GetMetadata().GetName()
		fqdn := strings.ToLower(name + "." + ns + ".svc." + domain)
		spec := svc.GetSpec()
		if spec.GetType() == "ExternalName" {
			// A name, not an address (CoreDNS serves no record for an IP).
			if ext := spec.GetExternalName(); ext != "" && net.ParseIP(ext) == nil {
				z.cname[fqdn] = dns.Fqdn(ext)
			}
			continue
		}
		headless := spec.GetClusterIp() == "None"
		cip, err := netip.ParseAddr(spec.GetClusterIp())
		if !headless && (err != nil || !cip.Is4()) {
			continue // not allocated
		}
		eps := readyEndpoints(byService[ns+"/"+name])
		if headless {
			for _, ep := range eps {
				if !slices.Contains(z.a[fqdn], ep.ip) {
					z.a[fqdn] = append(z.a[fqdn], ep.ip)
				}
			}
			slices.SortFunc(z.a[fqdn], netip.Addr.Compare)
		} else {
			z.a[fqdn] = []netip.Addr{cip}
			addPTR(z.ptr, cip, fqdn)
		}
		for _, ep := range eps {
			epName := ep.name + "." + fqdn
			if !slices.Contains(z.a[epName], ep.ip) {
				z.a[epName] = append(z.a[epName], ep.ip)
			}
			addPTR(endpointPTR, ep.ip, epName)
		}
		for _, sp := range spec.GetPorts() {
			if sp.GetName() == "" {
				continue
			}
			proto := cmp.Or(sp.GetProtocol(), "TCP")
			q := strings.ToLower("_" + sp.GetName() + "._" + proto + "." + fqdn)
			if !headless {
				if p := sp.GetPort(); p > 0 && p <= 65535 {
					z.srv[q] = append(z.srv[q], &dns.SRV{Port: uint16(p), Target: fqdn})
				}
				continue
			}
			for _, ep := range eps {
				if p, ok := ep.ports[sp.GetName()+"/"+proto]; ok {
					z.srv[q] = append(z.srv[q], &dns.SRV{Port: uint16(p), Target: ep.name + "." + fqdn})
				}
			}
		}
	}
	for rev, names := range endpointPTR {
		if _, isCluster := z.ptr[rev]; !isCluster {
			slices.Sort(names)
			z.ptr[rev] = names
		}
	}
	for q, rrs := range z.srv {
		slices.SortFunc(rrs, func(a, b *dns.SRV) int { return cmp.Or(cmp.Compare(a.Target, b.Target), cmp.Compare(a.Port, b.Port)) })
		// CoreDNS's weights: 100 shared among the records of a priority.
		for _, rr := range rrs {
			rr.Weight = uint16(100 / len(rrs))
		}
		z.srv[q] = rrs
	}
	return z
}

// endpoint is one Ready address of a Service: its DNS name (hostname, or
// the address with dashes) and its ports by "name/protocol".
type endpoint struct {
	ip    netip.Addr
	name  string
	ports map[string]int32
}

func readyEndpoints(sls []*corev1.EndpointSlice) []endpoint {
	var out []endpoint
	for _, sl := range sls {
		ports := map[string]int32{}
		for _, p := range sl.GetPorts() {
			if p.GetPort() > 0 && p.GetPort() <= 65535 {
				ports[p.GetName()+"/"+cmp.Or(p.GetProtocol(), "TCP")] = p.GetPort()
			}
		}
		for _, ep := range sl.GetEndpoints() {
			c := ep.GetConditions()
			if c != nil && c.Ready != nil && !c.GetReady() {
				continue
			}
			for _, a := range ep.GetAddresses() {
				ip, err := netip.ParseAddr(a)
				if err != nil || !ip.Is4() {
					continue
				}
				name := strings.ToLower(ep.GetHostname())
				if name == "" {
					name = strings.ReplaceAll(ip.String(), ".", "-")
				}
				out = append(out, endpoint{ip: ip, name: name, ports: ports})
			}
		}
	}
	slices.SortFunc(out, func(a, b endpoint) int { return cmp.Or(a.ip.Compare(b.ip), cmp.Compare(a.name, b.name)) })
	return out
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
	s.mu.RLock()
	z := s.zone
	s.mu.RUnlock()
	ttl := uint32(s.cfg.TTL / time.Second)
	hdr := func(owner string, t uint16) dns.RR_Header {
		return dns.RR_Header{Name: owner, Rrtype: t, Class: dns.ClassINET, Ttl: ttl}
	}
	refuse := func() {
		m.Authoritative = false
		m.SetRcode(req, dns.RcodeRefused) // never forwarded
		_ = w.WriteMsg(m)
	}
	if q.Qclass != dns.ClassINET {
		refuse()
		return
	}
	if dns.IsSubDomain("in-addr.arpa.", name) {
		// The reverse names of the cluster's addresses; any other is
		// not this server's to answer (CoreDNS falls through to its
		// upstream, and this server has none).
		ptrs, ok := z.ptr[name]
		if !ok {
			refuse()
			return
		}
		if q.Qtype == dns.TypePTR || q.Qtype == dns.TypeANY {
			for _, p := range ptrs {
				m.Answer = append(m.Answer, &dns.PTR{Hdr: hdr(q.Name, dns.TypePTR), Ptr: p})
			}
		}
		_ = w.WriteMsg(m)
		return
	}
	if !dns.IsSubDomain(s.domain, name) {
		refuse()
		return
	}
	addrs, isName := z.a[name]
	if !isName {
		if ip, ok := s.podIP(name); ok {
			addrs, isName = []netip.Addr{ip}, true
		}
	}
	target, isCNAME := z.cname[name]
	srvs, isSRV := z.srv[name]
	switch {
	case isCNAME:
		m.Answer = append(m.Answer, &dns.CNAME{Hdr: hdr(q.Name, dns.TypeCNAME), Target: target})
		if q.Qtype != dns.TypeCNAME {
			// A target inside the cluster domain is resolved here, as
			// CoreDNS resolves it through itself; any other is left to
			// the client: this server never asks another.
			m.Answer = append(m.Answer, s.chase(z, target, q.Qtype, ttl)...)
		}
	case isSRV:
		if q.Qtype == dns.TypeSRV || q.Qtype == dns.TypeANY {
			for _, r := range srvs {
				rr := *r
				rr.Hdr = hdr(q.Name, dns.TypeSRV)
				m.Answer = append(m.Answer, &rr)
				for _, ip := range z.a[rr.Target] {
					m.Extra = append(m.Extra, &dns.A{Hdr: hdr(rr.Target, dns.TypeA), A: ip.AsSlice()})
				}
			}
		}
	case isName && len(addrs) > 0:
		if q.Qtype == dns.TypeA || q.Qtype == dns.TypeANY {
			for _, ip := range addrs {
				m.Answer = append(m.Answer, &dns.A{Hdr: hdr(q.Name, dns.TypeA), A: ip.AsSlice()})
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

// maxChase bounds the CNAMEs followed for one answer.
const maxChase = 8

// chase answers qtype for target, a CNAME's target, when it lies inside
// the cluster domain: its own CNAMEs, then its addresses.
func (s *Server) chase(z *records, target string, qtype uint16, ttl uint32) []dns.RR {
	var out []dns.RR
	for range maxChase {
		name := dns.CanonicalName(target)
		if !dns.IsSubDomain(s.domain, name) {
			return out
		}
		if next, ok := z.cname[name]; ok {
			out = append(out, &dns.CNAME{Hdr: dns.RR_Header{Name: target, Rrtype: dns.TypeCNAME, Class: dns.ClassINET, Ttl: ttl}, Target: next})
			target = next
			continue
		}
		addrs := z.a[name]
		if len(addrs) == 0 {
			if ip, ok := s.podIP(name); ok {
				addrs = []netip.Addr{ip}
			}
		}
		if qtype == dns.TypeA || qtype == dns.TypeANY {
			for _, ip := range addrs {
				out = append(out, &dns.A{Hdr: dns.RR_Header{Name: target, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: ttl}, A: ip.AsSlice()})
			}
		}
		return out
	}
	return out
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
