package proxy

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	corev1 "github.com/podflow/podflow/proto/corev1"
)

func service(name, ip string, ports ...*corev1.ServicePort) *corev1.Service {
	return &corev1.Service{Metadata: &corev1.ObjectMeta{Namespace: "default", Name: name},
		Spec: &corev1.ServiceSpec{ClusterIp: ip, Ports: ports}}
}

func port(name, proto string, p int32) *corev1.ServicePort {
	return &corev1.ServicePort{Name: name, Protocol: proto, Port: p}
}

type ep struct {
	ip                        string
	ready, serving, terminate bool
}

func slice(svc string, ports []*corev1.EndpointPort, eps ...ep) *corev1.EndpointSlice {
	s := &corev1.EndpointSlice{Metadata: &corev1.ObjectMeta{Namespace: "default", Name: svc + "-abc",
		Labels: map[string]string{LabelServiceName: svc}}, AddressType: "IPv4", Ports: ports}
	for _, e := range eps {
		s.Endpoints = append(s.Endpoints, &corev1.Endpoint{Addresses: []string{e.ip}, Conditions: &corev1.EndpointConditions{
			Ready: proto.Bool(e.ready), Serving: proto.Bool(e.serving), Terminating: proto.Bool(e.terminate)}})
	}
	return s
}

func sport(name, proto string, p int32) *corev1.EndpointPort {
	return &corev1.EndpointPort{Name: proto3(name), Protocol: proto3(proto), Port: &p}
}

func proto3(s string) *string { return &s }

func addrs(ss ...string) []netip.AddrPort {
	out := make([]netip.AddrPort, len(ss))
	for i, s := range ss {
		out[i] = netip.MustParseAddrPort(s)
	}
	return out
}

func TestBuild(t *testing.T) {
	web := []*corev1.EndpointPort{sport("", "TCP", 8080)}
	for _, tc := range []struct {
		name     string
		services []*corev1.Service
		slices   []*corev1.EndpointSlice
		want     []ServicePort
	}{
		{name: "ready endpoints only",
			services: []*corev1.Service{service("web", "10.96.0.10", port("", "TCP", 80))},
			slices: []*corev1.EndpointSlice{slice("web", web,
				ep{"10.244.1.12", true, true, false}, ep{"10.244.1.11", true, true, false}, ep{"10.244.1.13", false, false, false})},
			want: []ServicePort{{Service: "default/web", IP: netip.MustParseAddr("10.96.0.10"), Protocol: "TCP", Port: 80,
				Endpoints: addrs("10.244.1.11:8080", "10.244.1.12:8080")}}},
		{name: "terminating drained while a ready one exists",
			services: []*corev1.Service{service("web", "10.96.0.10", port("", "TCP", 80))},
			slices:   []*corev1.EndpointSlice{slice("web", web, ep{"10.244.1.11", true, true, false}, ep{"10.244.1.12", false, true, true})},
			want: []ServicePort{{Service: "default/web", IP: netip.MustParseAddr("10.96.0.10"), Protocol: "TCP", Port: 80,
				Endpoints: addrs("10.244.1.11:8080")}}},
		{name: "serving terminating ones when no ready one is left",
			services: []*corev1.Service{service("web", "10.96.0.10", port("", "TCP", 80))},
			slices:   []*corev1.EndpointSlice{slice("web", web, ep{"10.244.1.12", false, true, true}, ep{"10.244.1.13", false, false, true})},
			want: []ServicePort{{Service: "default/web", IP: netip.MustParseAddr("10.96.0.10"), Protocol: "TCP", Port: 80,
				Endpoints: addrs("10.244.1.12:8080")}}},
		{name: "no endpoints, no rule",
			services: []*corev1.Service{service("web", "10.96.0.10", port("", "TCP", 80))},
			slices:   []*corev1.EndpointSlice{slice("web", web, ep{"10.244.1.13", false, false, false})}},
		{name: "headless and ExternalName get none",
			services: []*corev1.Service{service("peers", "None", port("", "TCP", 80)),
				{Metadata: &corev1.ObjectMeta{Namespace: "default", Name: "ext"}, Spec: &corev1.ServiceSpec{Type: "ExternalName"}}},
			slices: []*corev1.EndpointSlice{slice("peers", web, ep{"10.244.1.11", true, true, false})}},
		{name: "named ports resolve per slice port, sorted by ip proto port",
			services: []*corev1.Service{service("dns", "10.96.0.53", port("dns", "UDP", 53), port("dns-tcp", "TCP", 53), port("sctp", "SCTP", 9))},
			slices: []*corev1.EndpointSlice{slice("dns", []*corev1.EndpointPort{sport("dns", "UDP", 1053), sport("dns-tcp", "TCP", 1054)},
				ep{"10.244.1.20", true, true, false})},
			want: []ServicePort{
				{Service: "default/dns", Name: "dns-tcp", IP: netip.MustParseAddr("10.96.0.53"), Protocol: "TCP", Port: 53, Endpoints: addrs("10.244.1.20:1054")},
				{Service: "default/dns", Name: "dns", IP: netip.MustParseAddr("10.96.0.53"), Protocol: "UDP", Port: 53, Endpoints: addrs("10.244.1.20:1053")},
			}},
		{name: "slices of another namespace are not the service's",
			services: []*corev1.Service{service("web", "10.96.0.10", port("", "TCP", 80))},
			slices: []*corev1.EndpointSlice{func() *corev1.EndpointSlice {
				s := slice("web", web, ep{"10.244.1.11", true, true, false})
				s.Metadata.Namespace = "other"
				return s
			}()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Build(tc.services, tc.slices)
			if !got.Equal(Plan{Ports: tc.want}) {
				t.Fatalf("Build =\n%+v\nwant\n%+v", got.Ports, tc.want)
			}
		})
	}
}

func TestRules(t *testing.T) {
	cfg := DefaultConfig("node-1", "pf0", "10.244.1.1")
	plan := Build([]*corev1.Service{service("web", "10.96.0.10", port("", "TCP", 80))},
		[]*corev1.EndpointSlice{slice("web", []*corev1.EndpointPort{sport("", "TCP", 8080)},
			ep{"10.244.1.11", true, true, false}, ep{"10.244.1.12", true, true, false})})
	got := plan.Rules(cfg)
	for _, want := range []string{
		"table ip " + TableFor("node-1") + " {",
		`iifname "pf0" ip daddr 10.96.0.10 meta l4proto tcp th dport 80 goto "svc-`,
		"numgen random mod 2 vmap { 0 : goto \"ep-",
		"dnat ip to 10.244.1.11:8080",
		"dnat ip to 10.244.1.12:8080",
		`iifname "pf0" oifname "pf0" ct status dnat snat ip to 10.244.1.1`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("rules lack %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "masquerade") {
		t.Errorf("rules masquerade:\n%s", got)
	}
}

func TestConfigValidate(t *testing.T) {
	good := DefaultConfig("node-1", "pf0", "10.244.1.1")
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, mut := range map[string]func(*Config){
		"table without podflow": func(c *Config) { c.Table = "kube-proxy" },
		"no bridge":             func(c *Config) { c.Bridge = "" },
		"bad gateway":           func(c *Config) { c.Gateway = "x" },
		"bad cidr":              func(c *Config) { c.ServiceCIDR = "10.96.0.1/16" },
	} {
		t.Run(name, func(t *testing.T) {
			c := good
			mut(&c)
			if c.Validate() == nil {
				t.Fatal("Validate accepted it")
			}
		})
	}
}

func TestBuildAffinity(t *testing.T) {
	web := []*corev1.EndpointSlice{slice("web", []*corev1.EndpointPort{sport("", "TCP", 8080)},
		ep{"10.244.1.11", true, true, false}, ep{"10.244.1.12", false, true, true}, ep{"10.244.1.13", false, false, false})}
	timeout := func(s int32) *corev1.SessionAffinityConfig {
		return &corev1.SessionAffinityConfig{ClientIp: &corev1.ClientIPConfig{TimeoutSeconds: proto.Int32(s)}}
	}
	for _, tc := range []struct {
		name     string
		affinity string
		config   *corev1.SessionAffinityConfig
		want     time.Duration
	}{
		{"none", "", nil, 0},
		{"None with a timeout is none", "None", timeout(60), 0},
		{"ClientIP defaults to 3h", AffinityClientIP, nil, DefaultAffinityTimeout},
		{"ClientIP with an empty clientIP", AffinityClientIP, &corev1.SessionAffinityConfig{ClientIp: &corev1.ClientIPConfig{}}, DefaultAffinityTimeout},
		{"ClientIP 60s", AffinityClientIP, timeout(60), time.Minute},
		{"ClientIP a day", AffinityClientIP, timeout(86400), MaxAffinityTimeout},
		{"over a day gets the default", AffinityClientIP, timeout(86401), DefaultAffinityTimeout},
		{"0 gets the default", AffinityClientIP, timeout(0), DefaultAffinityTimeout},
	} {
		t.Run(tc.name, func(t *testing.T) {
			svc := service("web", "10.96.0.10", port("", "TCP", 80))
			svc.Spec.SessionAffinity, svc.Spec.SessionAffinityConfig = tc.affinity, tc.config
			plan := Build([]*corev1.Service{svc}, web)
			if len(plan.Ports) != 1 || plan.Ports[0].Affinity != tc.want {
				t.Fatalf("ports %+v, want one with affinity %v", plan.Ports, tc.want)
			}
			// Serving: the ready one and the serving terminating one.
			if got := plan.Ports[0].Serving; !slices.Equal(got, []netip.Addr{netip.MustParseAddr("10.244.1.11"), netip.MustParseAddr("10.244.1.12")}) {
				t.Errorf("serving %v", got)
			}
		})
	}
}

func TestRulesAffinity(t *testing.T) {
	cfg := DefaultConfig("node-1", "pf0", "10.244.1.1")
	svc := service("web", "10.96.0.10", port("", "TCP", 80))
	svc.Spec.SessionAffinity = AffinityClientIP
	plan := Build([]*corev1.Service{svc}, []*corev1.EndpointSlice{slice("web", []*corev1.EndpointPort{sport("", "TCP", 8080)},
		ep{"10.244.1.11", true, true, false}, ep{"10.244.1.12", true, true, false})})
	got := plan.Rules(cfg)
	sp := plan.Ports[0]
	for _, ep := range sp.Endpoints {
		for _, want := range []string{
			"set " + sp.affinitySet(ep) + " {\n\t\ttype ipv4_addr\n\t\tflags dynamic,timeout\n\t\ttimeout 10800s\n",
			"ip saddr @" + sp.affinitySet(ep) + " goto \"" + sp.endpointChain(ep) + "\"",
			"update @" + sp.affinitySet(ep) + " { ip saddr }\n\t\tmeta l4proto tcp dnat ip to " + ep.String(),
		} {
			if !strings.Contains(got, want) {
				t.Errorf("rules lack %q:\n%s", want, got)
			}
		}
	}
	if sp.affinitySet(sp.Endpoints[0]) == sp.affinitySet(sp.Endpoints[1]) {
		t.Error("two endpoints share an affinity set")
	}
	// A changed timeout is a new set (the kernel keeps an existing set's).
	other := sp
	other.Affinity = time.Minute
	if other.affinitySet(sp.Endpoints[0]) == sp.affinitySet(sp.Endpoints[0]) {
		t.Error("a changed timeout keeps the set's name")
	}
	if plan.Equal(Plan{Ports: []ServicePort{other}}) {
		t.Error("plans of different timeouts are Equal")
	}
}

// TestBuildNodePort: a NodePort Service's port gets its ClusterIP entry
// and an External one on its node port, with the same endpoints; a
// ClusterIP Service's stray nodePort gets none; internalTrafficPolicy
// Local keeps the ClusterIP on the node's own endpoints (none: no
// ClusterIP entry, the node port stays); the rules match the node port on
// the node's addresses from podflow bridges ("pf*") and the host, and
// masquerade nothing.
func TestBuildNodePort(t *testing.T) {
	np := service("web", "10.96.0.10", &corev1.ServicePort{Protocol: "TCP", Port: 80, NodePort: 30080})
	np.Spec.Type = "NodePort"
	web := []*corev1.EndpointSlice{slice("web", []*corev1.EndpointPort{sport("", "TCP", 8080)},
		ep{"10.244.1.11", true, true, false}, ep{"10.244.2.11", true, true, false})}
	web[0].Endpoints[0].NodeName = proto.String("node-1")
	web[0].Endpoints[1].NodeName = proto.String("node-2")
	both := addrs("10.244.1.11:8080", "10.244.2.11:8080")
	vip := netip.MustParseAddr("10.96.0.10")
	got := BuildFor("node-1", []*corev1.Service{np}, web)
	want := Plan{Ports: []ServicePort{
		{Service: "default/web", IP: vip, Protocol: "TCP", Port: 80, Endpoints: both},
		{Service: "default/web", IP: vip, Protocol: "TCP", Port: 30080, External: true, Endpoints: both},
	}}
	if !got.Equal(want) {
		t.Fatalf("BuildFor =\n%+v\nwant\n%+v", got.Ports, want.Ports)
	}

	cip := service("web", "10.96.0.10", &corev1.ServicePort{Protocol: "TCP", Port: 80, NodePort: 30080})
	if got := BuildFor("node-1", []*corev1.Service{cip}, web); len(got.Ports) != 1 || got.Ports[0].External {
		t.Fatalf("a ClusterIP Service's plan %+v, want its ClusterIP only", got.Ports)
	}

	local := proto.Clone(np).(*corev1.Service)
	local.Spec.InternalTrafficPolicy = proto.String("Local")
	got = BuildFor("node-1", []*corev1.Service{local}, web)
	if len(got.Ports) != 2 || !slices.Equal(got.Ports[0].Endpoints, addrs("10.244.1.11:8080")) || !slices.Equal(got.Ports[1].Endpoints, both) {
		t.Fatalf("internalTrafficPolicy Local on node-1: %+v", got.Ports)
	}
	got = BuildFor("node-3", []*corev1.Service{local}, web)
	if len(got.Ports) != 1 || !got.Ports[0].External {
		t.Fatalf("internalTrafficPolicy Local on a node without endpoints: %+v, want the node port only", got.Ports)
	}

	cfg := DefaultConfig("node-1", "pf0", "10.244.1.1")
	cfg.NodeIPs = append(cfg.NodeIPs, "192.168.7.2")
	rules := BuildFor("node-1", []*corev1.Service{np}, web).Rules(cfg)
	for _, want := range []string{
		`iifname "pf*" ip daddr 10.244.1.1 meta l4proto tcp th dport 30080 goto "svc-`,
		`iifname "pf*" ip daddr 192.168.7.2 meta l4proto tcp th dport 30080 goto "svc-`,
		"chain output {\n\t\ttype nat hook output priority dstnat;\n\t\tip daddr 10.244.1.1 meta l4proto tcp th dport 30080 goto \"svc-",
		`iifname "pf0" ip daddr 10.96.0.10 meta l4proto tcp th dport 80 goto "svc-`,
	} {
		if !strings.Contains(rules, want) {
			t.Errorf("rules lack %q:\n%s", want, rules)
		}
	}
	if strings.Contains(rules, "masquerade") {
		t.Errorf("rules masquerade:\n%s", rules)
	}
	for _, bad := range []string{"127.0.0.1", "0.0.0.0", "fd00::1"} {
		c := cfg
		c.NodeIPs = []string{bad}
		if err := c.Validate(); err == nil {
			t.Errorf("NodeIPs [%s] accepted", bad)
		}
	}
}
