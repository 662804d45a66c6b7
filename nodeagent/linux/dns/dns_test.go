package dns

import (
	"context"
	"slices"
	"testing"

	"github.com/miekg/dns"
	"google.golang.org/protobuf/proto"

	corev1 "github.com/podflow/podflow/proto/corev1"
)

func start(t *testing.T) *Server {
	t.Helper()
	s, err := New(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	port := int32(8080)
	name := "http"
	svcs := []*corev1.Service{
		{Metadata: &corev1.ObjectMeta{Namespace: "default", Name: "web"}, Spec: &corev1.ServiceSpec{ClusterIp: "10.96.0.10",
			Ports: []*corev1.ServicePort{{Name: "http", Protocol: "TCP", Port: 80}}}},
		{Metadata: &corev1.ObjectMeta{Namespace: "team", Name: "peers"}, Spec: &corev1.ServiceSpec{ClusterIp: "None",
			Ports: []*corev1.ServicePort{{Name: "http", Protocol: "TCP", Port: 80}}}},
		{Metadata: &corev1.ObjectMeta{Namespace: "team", Name: "empty"}, Spec: &corev1.ServiceSpec{ClusterIp: "None",
			Ports: []*corev1.ServicePort{{Name: "http", Protocol: "TCP", Port: 80}}}},
		{Metadata: &corev1.ObjectMeta{Namespace: "default", Name: "ext"}, Spec: &corev1.ServiceSpec{Type: "ExternalName", ExternalName: "db.example.com"}},
		{Metadata: &corev1.ObjectMeta{Namespace: "default", Name: "alias"}, Spec: &corev1.ServiceSpec{Type: "ExternalName", ExternalName: "web.default.svc.cluster.local"}},
	}
	sls := []*corev1.EndpointSlice{{Metadata: &corev1.ObjectMeta{Namespace: "team", Name: "peers-1", Labels: map[string]string{LabelServiceName: "peers"}},
		Ports: []*corev1.EndpointPort{{Name: &name, Port: &port}},
		Endpoints: []*corev1.Endpoint{
			{Addresses: []string{"10.244.1.12"}, Conditions: &corev1.EndpointConditions{Ready: proto.Bool(true)}},
			{Addresses: []string{"10.244.1.11"}, Conditions: &corev1.EndpointConditions{Ready: proto.Bool(true)}, Hostname: proto.String("host-a")},
			{Addresses: []string{"10.244.1.13"}, Conditions: &corev1.EndpointConditions{Ready: proto.Bool(false)}},
		}}}
	if _, err := s.Sync(context.Background(), svcs, sls); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	return s
}

func TestQueries(t *testing.T) {
	s := start(t)
	for _, tc := range []struct {
		name      string
		qname     string
		qtype     uint16
		net       string
		wantRcode int
		want      []string // answers' data, sorted
	}{
		{"service A", "web.default.svc.cluster.local.", dns.TypeA, "udp", dns.RcodeSuccess, []string{"10.96.0.10"}},
		{"service A over TCP", "web.default.svc.cluster.local.", dns.TypeA, "tcp", dns.RcodeSuccess, []string{"10.96.0.10"}},
		{"case-insensitive", "WEB.Default.svc.cluster.local.", dns.TypeA, "udp", dns.RcodeSuccess, []string{"10.96.0.10"}},
		{"headless: every Ready pod", "peers.team.svc.cluster.local.", dns.TypeA, "udp", dns.RcodeSuccess, []string{"10.244.1.11", "10.244.1.12"}},
		{"SRV of a named port", "_http._tcp.web.default.svc.cluster.local.", dns.TypeSRV, "udp", dns.RcodeSuccess,
			[]string{"0 100 80 web.default.svc.cluster.local."}},
		{"headless SRV: each endpoint by name, its port, the weight shared", "_http._tcp.peers.team.svc.cluster.local.", dns.TypeSRV, "udp", dns.RcodeSuccess,
			[]string{"0 50 8080 10-244-1-12.peers.team.svc.cluster.local.", "0 50 8080 host-a.peers.team.svc.cluster.local."}},
		{"a pod's hostname under its subdomain's Service", "host-a.peers.team.svc.cluster.local.", dns.TypeA, "udp", dns.RcodeSuccess, []string{"10.244.1.11"}},
		{"an endpoint without a hostname: its address dashed", "10-244-1-12.peers.team.svc.cluster.local.", dns.TypeA, "udp", dns.RcodeSuccess, []string{"10.244.1.12"}},
		{"a not-ready endpoint has no name", "10-244-1-13.peers.team.svc.cluster.local.", dns.TypeA, "udp", dns.RcodeNameError, nil},
		{"headless without endpoints", "empty.team.svc.cluster.local.", dns.TypeA, "udp", dns.RcodeNameError, nil},
		{"ExternalName CNAME", "ext.default.svc.cluster.local.", dns.TypeCNAME, "udp", dns.RcodeSuccess, []string{"CNAME db.example.com."}},
		{"ExternalName A: the CNAME, never forwarded", "ext.default.svc.cluster.local.", dns.TypeA, "udp", dns.RcodeSuccess, []string{"CNAME db.example.com."}},
		{"ExternalName inside the cluster: chased", "alias.default.svc.cluster.local.", dns.TypeA, "udp", dns.RcodeSuccess,
			[]string{"10.96.0.10", "CNAME web.default.svc.cluster.local."}},
		{"PTR of a ClusterIP", "10.0.96.10.in-addr.arpa.", dns.TypePTR, "udp", dns.RcodeSuccess, []string{"PTR web.default.svc.cluster.local."}},
		{"PTR of an endpoint", "11.1.244.10.in-addr.arpa.", dns.TypePTR, "udp", dns.RcodeSuccess, []string{"PTR host-a.peers.team.svc.cluster.local."}},
		{"PTR of an unknown address: refused, never forwarded", "9.9.9.9.in-addr.arpa.", dns.TypePTR, "udp", dns.RcodeRefused, nil},
		{"pod A", "10-244-1-7.team.pod.cluster.local.", dns.TypeA, "udp", dns.RcodeSuccess, []string{"10.244.1.7"}},
		{"AAAA of a service: no data", "web.default.svc.cluster.local.", dns.TypeAAAA, "udp", dns.RcodeSuccess, nil},
		{"unknown service", "nope.default.svc.cluster.local.", dns.TypeA, "udp", dns.RcodeNameError, nil},
		{"wrong namespace", "web.team.svc.cluster.local.", dns.TypeA, "udp", dns.RcodeNameError, nil},
		{"outside the cluster domain: refused, never forwarded", "example.com.", dns.TypeA, "udp", dns.RcodeRefused, nil},
		{"a suffix lookalike", "cluster.local.example.com.", dns.TypeA, "udp", dns.RcodeRefused, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := new(dns.Msg)
			m.SetQuestion(tc.qname, tc.qtype)
			c := &dns.Client{Net: tc.net}
			r, _, err := c.Exchange(m, s.Addr())
			if err != nil {
				t.Fatal(err)
			}
			if r.Rcode != tc.wantRcode {
				t.Fatalf("rcode %s, want %s", dns.RcodeToString[r.Rcode], dns.RcodeToString[tc.wantRcode])
			}
			var got []string
			for _, rr := range r.Answer {
				switch rr := rr.(type) {
				case *dns.A:
					got = append(got, rr.A.String())
				case *dns.SRV:
					got = append(got, rr.String()[len(rr.Hdr.String()):])
				case *dns.CNAME:
					got = append(got, "CNAME "+rr.Target)
				case *dns.PTR:
					got = append(got, "PTR "+rr.Ptr)
				}
			}
			slices.Sort(got)
			if !slices.Equal(got, tc.want) {
				t.Fatalf("answers %q, want %q", got, tc.want)
			}
		})
	}
}

// TestSyncReplaces: a Service gone from the state is NXDOMAIN at once.
func TestSyncReplaces(t *testing.T) {
	s := start(t)
	if _, err := s.Sync(context.Background(), nil, nil); err != nil {
		t.Fatal(err)
	}
	wantNXDomain(t, s.Addr(), "web.default.svc.cluster.local.")
}

// wantNXDomain asks addr for name's A record and wants NXDOMAIN.
func wantNXDomain(t *testing.T, addr, name string) {
	t.Helper()
	m := new(dns.Msg)
	m.SetQuestion(name, dns.TypeA)
	r, _, err := new(dns.Client).Exchange(m, addr)
	if err != nil {
		t.Fatal(err)
	}
	if r.Rcode != dns.RcodeNameError {
		t.Fatalf("%s: rcode %s, want NXDOMAIN", name, dns.RcodeToString[r.Rcode])
	}
}

// TestDevice: with Device set the listeners are bound to that interface;
// one that does not exist fails Start (and leaves nothing listening).
func TestDevice(t *testing.T) {
	for _, tc := range []struct {
		dev     string
		wantErr bool
	}{{"lo", false}, {"pfnosuchdev0", true}} {
		t.Run(tc.dev, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Device = tc.dev
			s, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			err = s.Start()
			if (err != nil) != tc.wantErr {
				t.Fatalf("Start() = %v, want error %v", err, tc.wantErr)
			}
			if err != nil {
				return
			}
			defer s.Close()
			wantNXDomain(t, s.Addr(), "web.default.svc.cluster.local.")
		})
	}
}
