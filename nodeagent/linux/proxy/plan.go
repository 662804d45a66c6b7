package proxy

import (
	"cmp"
	"crypto/sha256"
	"encoding/base32"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	corev1 "github.com/podflow/podflow/proto/corev1"
)

// bridgePrefix starts the name of every podflow bridge (and of nothing
// else podflow makes that packets arrive on): node ports are proxied for
// packets arriving on "pf*".
const bridgePrefix = "pf"

// LabelServiceName names an EndpointSlice's Service.
const LabelServiceName = "kubernetes.io/service-name"

// Session affinity (core/v1 ServiceAffinity and its ClientIP timeout).
const (
	AffinityClientIP = "ClientIP"
	// DefaultAffinityTimeout is sessionAffinityConfig.clientIP.timeoutSeconds'
	// default, 3 hours; MaxAffinityTimeout its limit, a day. A timeout
	// outside 1 s..MaxAffinityTimeout (which kube-apiserver would refuse)
	// gets the default.
	DefaultAffinityTimeout = 10800 * time.Second
	MaxAffinityTimeout     = 86400 * time.Second
)

// Plan is the proxy's desired state: every service port that gets rules,
// sorted by ClusterIP, protocol and port.
type Plan struct {
	Ports []ServicePort
}

// ServicePort is one ClusterIP:port of a Service, or one node port of
// it, and the endpoints its connections are spread over.
type ServicePort struct {
	Service  string // "ns/name"
	Name     string // the port's name ("" when the Service has one port)
	IP       netip.Addr
	Protocol string // "TCP" or "UDP"
	Port     uint16 // the service port, or the node port when External
	// External marks the node port of a NodePort or LoadBalancer
	// Service: matched on the node's addresses (Config.NodeIPs), IP is
	// the Service's ClusterIP.
	External  bool
	Endpoints []netip.AddrPort // sorted
	// Affinity, when not 0, is the ClientIP session affinity timeout: a
	// client keeps the endpoint it last opened a connection to until it
	// has opened none for this long.
	Affinity time.Duration
	// Serving are the addresses of every serving endpoint (Ready, or
	// Serving while terminating), sorted: the UDP flows towards another
	// address are stale (kube-proxy's conntrack cleanup). It programs no
	// rule, so Equal ignores it.
	Serving []netip.Addr
}

// Build computes the plan for services and their EndpointSlices, for a
// node of no known name (BuildFor("", ...)).
func Build(services []*corev1.Service, slices_ []*corev1.EndpointSlice) Plan {
	return BuildFor("", services, slices_)
}

// Service types and traffic policies the plan reads.
const (
	typeNodePort     = "NodePort"
	typeLoadBalancer = "LoadBalancer"
	policyLocal      = "Local"
)

// BuildFor computes node's plan for services and their EndpointSlices.
// Headless and ExternalName Services, ports of other protocols and
// service ports without a usable endpoint get no rules. A NodePort or
// LoadBalancer Service's node ports get an External entry each, with the
// same endpoints as its ClusterIP: every client of a node port is a pod
// or the host itself (nothing from off the machine is proxied), and
// kube-proxy sends those to every endpoint whatever the
// externalTrafficPolicy ("short-circuit pod traffic", "short-circuit
// local traffic"). An internalTrafficPolicy of Local keeps ClusterIP
// traffic on node's own endpoints (none: no rule); with node "" it is
// not applied.
func BuildFor(node string, services []*corev1.Service, slices_ []*corev1.EndpointSlice) Plan {
	byService := map[string][]*corev1.EndpointSlice{}
	for _, s := range slices_ {
		if s.GetAddressType() != "" && s.GetAddressType() != "IPv4" {
			continue
		}
		key := s.GetMetadata().GetNamespace() + "/" + s.GetMetadata().GetLabels()[LabelServiceName]
		byService[key] = append(byService[key], s)
	}
	var plan Plan
	for _, svc := range services {
		ip, err := netip.ParseAddr(svc.GetSpec().GetClusterIp())
		if err != nil || !ip.Is4() || svc.GetSpec().GetType() == "ExternalName" {
			continue
		}
		key := svc.GetMetadata().GetNamespace() + "/" + svc.GetMetadata().GetName()
		for _, sp := range svc.GetSpec().GetPorts() {
			proto := cmp.Or(sp.GetProtocol(), "TCP")
			if (proto != "TCP" && proto != "UDP") || sp.GetPort() <= 0 || sp.GetPort() > 65535 {
				continue
			}
			eps, serving := endpoints(byService[key], sp.GetName(), proto, "")
			if len(eps) == 0 {
				continue
			}
			internal := eps
			if node != "" && svc.GetSpec().GetInternalTrafficPolicy() == policyLocal {
				internal, _ = endpoints(byService[key], sp.GetName(), proto, node)
			}
			if len(internal) > 0 {
				plan.Ports = append(plan.Ports, ServicePort{Service: key, Name: sp.GetName(), IP: ip, Protocol: proto,
					Port: uint16(sp.GetPort()), Endpoints: internal, Affinity: affinity(svc.GetSpec()), Serving: serving})
			}
			if t := svc.GetSpec().GetType(); (t == typeNodePort || t == typeLoadBalancer) && sp.GetNodePort() > 0 && sp.GetNodePort() <= 65535 {
				plan.Ports = append(plan.Ports, ServicePort{Service: key, Name: sp.GetName(), IP: ip, Protocol: proto,
					Port: uint16(sp.GetNodePort()), External: true, Endpoints: eps, Affinity: affinity(svc.GetSpec()), Serving: serving})
			}
		}
	}
	slices.SortFunc(plan.Ports, func(a, b ServicePort) int {
		ext := func(sp ServicePort) int {
			if sp.External {
				return 1
			}
			return 0
		}
		return cmp.Or(cmp.Compare(ext(a), ext(b)), a.IP.Compare(b.IP), cmp.Compare(a.Protocol, b.Protocol), cmp.Compare(a.Port, b.Port))
	})
	return plan
}

// affinity is spec's ClientIP affinity timeout, 0 for none.
func affinity(spec *corev1.ServiceSpec) time.Duration {
	if spec.GetSessionAffinity() != AffinityClientIP {
		return 0
	}
	cip := spec.GetSessionAffinityConfig().GetClientIp()
	if cip == nil || cip.TimeoutSeconds == nil {
		return DefaultAffinityTimeout
	}
	d := time.Duration(cip.GetTimeoutSeconds()) * time.Second
	if d < time.Second || d > MaxAffinityTimeout {
		return DefaultAffinityTimeout
	}
	return d
}

// endpoints returns the addresses serving the service port called name
// (only those on node, unless node is ""): the Ready ones, or when there
// are none the Serving and Terminating ones; and the IPs of every serving
// one.
func endpoints(sls []*corev1.EndpointSlice, name, proto, node string) (_ []netip.AddrPort, serving []netip.Addr) {
	var ready, terminating []netip.AddrPort
	for _, s := range sls {
		var port uint16
		for _, p := range s.GetPorts() {
			if p.GetName() == name && cmp.Or(p.GetProtocol(), "TCP") == proto && p.GetPort() > 0 && p.GetPort() <= 65535 {
				port = uint16(p.GetPort())
			}
		}
		if port == 0 {
			continue
		}
		for _, ep := range s.GetEndpoints() {
			c := ep.GetConditions()
			// A nil ready is "unknown", which consumers treat as ready.
			isReady := c == nil || c.Ready == nil || c.GetReady()
			fallback := !isReady && c.GetServing() && c.GetTerminating()
			if (!isReady && !fallback) || (node != "" && ep.GetNodeName() != node) {
				continue
			}
			for _, a := range ep.GetAddresses() {
				ip, err := netip.ParseAddr(a)
				if err != nil || !ip.Is4() {
					continue
				}
				if isReady {
					ready = append(ready, netip.AddrPortFrom(ip, port))
				} else {
					terminating = append(terminating, netip.AddrPortFrom(ip, port))
				}
				serving = append(serving, ip)
			}
		}
	}
	out := ready
	if len(out) == 0 {
		out = terminating
	}
	slices.SortFunc(out, func(a, b netip.AddrPort) int { return a.Compare(b) })
	slices.SortFunc(serving, func(a, b netip.Addr) int { return a.Compare(b) })
	return slices.Compact(out), slices.Compact(serving)
}

// Within returns the plan of p's ports whose ClusterIP is in cidr: the
// proxy programs no rule for an address its unreachable route does not
// cover (a Service left from another service CIDR).
func (p Plan) Within(cidr netip.Prefix) Plan {
	var q Plan
	for _, sp := range p.Ports {
		if cidr.Contains(sp.IP) {
			q.Ports = append(q.Ports, sp)
		}
	}
	return q
}

// Equal reports whether p and q program the same rules.
func (p Plan) Equal(q Plan) bool {
	return slices.EqualFunc(p.Ports, q.Ports, func(a, b ServicePort) bool {
		return a.Service == b.Service && a.Name == b.Name && a.IP == b.IP && a.Protocol == b.Protocol &&
			a.Port == b.Port && a.External == b.External && slices.Equal(a.Endpoints, b.Endpoints) && a.Affinity == b.Affinity
	})
}

// endpointIPs are the distinct addresses of every endpoint of p, sorted.
func (p Plan) endpointIPs() []netip.Addr {
	var out []netip.Addr
	for _, sp := range p.Ports {
		for _, ep := range sp.Endpoints {
			out = append(out, ep.Addr())
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return slices.Compact(out)
}

// chainID is a short stable hash, as kube-proxy's chain names carry.
func chainID(s string) string {
	h := sha256.Sum256([]byte(s))
	return base32.StdEncoding.EncodeToString(h[:5])
}

// id names a service port in chain and set names: the node port of a
// Service is "ext" to it.
func (sp ServicePort) id() string {
	kind := ""
	if sp.External {
		kind = "ext/"
	}
	return fmt.Sprintf("%s/%s%s/%d", sp.Service, kind, strings.ToLower(sp.Protocol), sp.Port)
}

// serviceChain names the chain of a service port.
func (sp ServicePort) serviceChain() string {
	id := sp.id()
	return truncate("svc-" + chainID(id) + "-" + id)
}

// endpointChain names the chain of one endpoint of a service port.
func (sp ServicePort) endpointChain(ep netip.AddrPort) string {
	id := fmt.Sprintf("%s__%s", sp.id(), ep)
	return truncate("ep-" + chainID(id) + "-" + id)
}

// affinitySet names the ClientIP affinity set of one endpoint of a
// service port: the clients that last reached it, each until the timeout
// (which is part of the name, so a changed timeout is a new set).
func (sp ServicePort) affinitySet(ep netip.AddrPort) string {
	id := fmt.Sprintf("%s__%s/%s", sp.id(), ep, sp.Affinity)
	return "aff-" + chainID(id)
}

func truncate(s string) string {
	if len(s) > 200 {
		return s[:200]
	}
	return s
}

// Rules prints the table p programs in nft(8)'s syntax, for tests and
// for people.
func (p Plan) Rules(cfg Config) string {
	var b strings.Builder
	fmt.Fprintf(&b, "table ip %s {\n", cfg.Table)
	fmt.Fprintf(&b, "\tchain prerouting {\n\t\ttype nat hook prerouting priority dstnat;\n")
	for _, sp := range p.Ports {
		if !sp.External {
			fmt.Fprintf(&b, "\t\tiifname %q ip daddr %s meta l4proto %s th dport %d goto %q\n",
				cfg.Bridge, sp.IP, strings.ToLower(sp.Protocol), sp.Port, sp.serviceChain())
			continue
		}
		for _, ip := range cfg.NodeIPs {
			fmt.Fprintf(&b, "\t\tiifname \"%s*\" ip daddr %s meta l4proto %s th dport %d goto %q\n",
				bridgePrefix, ip, strings.ToLower(sp.Protocol), sp.Port, sp.serviceChain())
		}
	}
	fmt.Fprintf(&b, "\t}\n\tchain output {\n\t\ttype nat hook output priority dstnat;\n")
	for _, sp := range p.Ports {
		if sp.External {
			for _, ip := range cfg.NodeIPs {
				fmt.Fprintf(&b, "\t\tip daddr %s meta l4proto %s th dport %d goto %q\n",
					ip, strings.ToLower(sp.Protocol), sp.Port, sp.serviceChain())
			}
		}
	}
	fmt.Fprintf(&b, "\t}\n\tchain postrouting {\n\t\ttype nat hook postrouting priority srcnat;\n")
	fmt.Fprintf(&b, "\t\tiifname %q oifname %q ct status dnat snat ip to %s\n", cfg.Bridge, cfg.Bridge, cfg.Gateway)
	for _, ep := range p.endpointIPs() {
		fmt.Fprintf(&b, "\t\tip saddr %s ip daddr %s ct status dnat snat ip to %s\n", ep, ep, cfg.Gateway)
	}
	fmt.Fprintf(&b, "\t}\n")
	for _, sp := range p.Ports {
		if sp.Affinity == 0 {
			continue
		}
		for _, ep := range sp.Endpoints {
			fmt.Fprintf(&b, "\tset %s {\n\t\ttype ipv4_addr\n\t\tflags dynamic,timeout\n\t\ttimeout %ds\n\t}\n",
				sp.affinitySet(ep), int(sp.Affinity.Seconds()))
		}
	}
	for _, sp := range p.Ports {
		fmt.Fprintf(&b, "\tchain %q {\n", sp.serviceChain())
		if sp.Affinity != 0 {
			for _, ep := range sp.Endpoints {
				fmt.Fprintf(&b, "\t\tip saddr @%s goto %q\n", sp.affinitySet(ep), sp.endpointChain(ep))
			}
		}
		fmt.Fprintf(&b, "\t\tnumgen random mod %d vmap {", len(sp.Endpoints))
		for i, ep := range sp.Endpoints {
			sep := ","
			if i == len(sp.Endpoints)-1 {
				sep = ""
			}
			fmt.Fprintf(&b, " %d : goto %q%s", i, sp.endpointChain(ep), sep)
		}
		fmt.Fprintf(&b, " }\n\t}\n")
		for _, ep := range sp.Endpoints {
			fmt.Fprintf(&b, "\tchain %q {\n", sp.endpointChain(ep))
			if sp.Affinity != 0 {
				fmt.Fprintf(&b, "\t\tupdate @%s { ip saddr }\n", sp.affinitySet(ep))
			}
			fmt.Fprintf(&b, "\t\tmeta l4proto %s dnat ip to %s\n\t}\n", strings.ToLower(sp.Protocol), ep)
		}
	}
	b.WriteString("}\n")
	return b.String()
}
