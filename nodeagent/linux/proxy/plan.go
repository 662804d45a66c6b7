package proxy

import (
	"cmp"
	"crypto/sha256"
	"encoding/base32"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "github.com/podflow/podflow/proto/corev1"
)

// LabelServiceName names an EndpointSlice's Service.
const LabelServiceName = "kubernetes.io/service-name"

// Plan is the proxy's desired state: every service port that gets rules,
// sorted by ClusterIP, protocol and port.
type Plan struct {
	Ports []ServicePort
}

// ServicePort is one ClusterIP:port of a Service and the endpoints its
// connections are spread over.
type ServicePort struct {
	Service   string // "ns/name"
	Name      string // the port's name ("" when the Service has one port)
	IP        netip.Addr
	Protocol  string // "TCP" or "UDP"
	Port      uint16
	Endpoints []netip.AddrPort // sorted
}

// Build computes the plan for services and their EndpointSlices. Headless
// and ExternalName Services, ports of other protocols and service ports
// without a usable endpoint get no rules.
func Build(services []*corev1.Service, slices_ []*corev1.EndpointSlice) Plan {
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
			eps := endpoints(byService[key], sp.GetName(), proto)
			if len(eps) == 0 {
				continue
			}
			plan.Ports = append(plan.Ports, ServicePort{Service: key, Name: sp.GetName(), IP: ip, Protocol: proto,
				Port: uint16(sp.GetPort()), Endpoints: eps})
		}
	}
	slices.SortFunc(plan.Ports, func(a, b ServicePort) int {
		return cmp.Or(a.IP.Compare(b.IP), cmp.Compare(a.Protocol, b.Protocol), cmp.Compare(a.Port, b.Port))
	})
	return plan
}

// endpoints returns the addresses serving the service port called name:
// the Ready ones, or when there are none the Serving and Terminating ones.
func endpoints(sls []*corev1.EndpointSlice, name, proto string) []netip.AddrPort {
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
			if !isReady && !fallback {
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
			}
		}
	}
	out := ready
	if len(out) == 0 {
		out = terminating
	}
	slices.SortFunc(out, func(a, b netip.AddrPort) int { return a.Compare(b) })
	return slices.Compact(out)
}

// Equal reports whether p and q program the same rules.
func (p Plan) Equal(q Plan) bool {
	return slices.EqualFunc(p.Ports, q.Ports, func(a, b ServicePort) bool {
		return a.Service == b.Service && a.Name == b.Name && a.IP == b.IP && a.Protocol == b.Protocol &&
			a.Port == b.Port && slices.Equal(a.Endpoints, b.Endpoints)
	})
}

// chainID is a short stable hash, as kube-proxy's chain names carry.
func chainID(s string) string {
	h := sha256.Sum256([]byte(s))
	return base32.StdEncoding.EncodeToString(h[:5])
}

// serviceChain names the chain of a service port.
func (sp ServicePort) serviceChain() string {
	id := fmt.Sprintf("%s/%s/%d", sp.Service, strings.ToLower(sp.Protocol), sp.Port)
	return truncate("svc-" + chainID(id) + "-" + id)
}

// endpointChain names the chain of one endpoint of a service port.
func (sp ServicePort) endpointChain(ep netip.AddrPort) string {
	id := fmt.Sprintf("%s/%s/%d__%s", sp.Service, strings.ToLower(sp.Protocol), sp.Port, ep)
	return truncate("ep-" + chainID(id) + "-" + id)
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
		fmt.Fprintf(&b, "\t\tiifname %q ip daddr %s meta l4proto %s th dport %d goto %q\n",
			cfg.Bridge, sp.IP, strings.ToLower(sp.Protocol), sp.Port, sp.serviceChain())
	}
	fmt.Fprintf(&b, "\t}\n\tchain postrouting {\n\t\ttype nat hook postrouting priority srcnat;\n")
	fmt.Fprintf(&b, "\t\tiifname %q oifname %q ct status dnat snat ip to %s\n\t}\n", cfg.Bridge, cfg.Bridge, cfg.Gateway)
	for _, sp := range p.Ports {
		fmt.Fprintf(&b, "\tchain %q {\n\t\tnumgen random mod %d vmap {", sp.serviceChain(), len(sp.Endpoints))
		for i, ep := range sp.Endpoints {
			sep := ","
			if i == len(sp.Endpoints)-1 {
				sep = ""
			}
			fmt.Fprintf(&b, " %d : goto %q%s", i, sp.endpointChain(ep), sep)
		}
		fmt.Fprintf(&b, " }\n\t}\n")
		for _, ep := range sp.Endpoints {
			fmt.Fprintf(&b, "\tchain %q {\n\t\tmeta l4proto %s dnat ip to %s\n\t}\n", sp.endpointChain(ep), strings.ToLower(sp.Protocol), ep)
		}
	}
	b.WriteString("}\n")
	return b.String()
}
