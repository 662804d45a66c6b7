package validate_test

import (
	"testing"

	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/validate"
)

func svcOf(spec *corev1.ServiceSpec) *corev1.Service {
	return &corev1.Service{Metadata: &corev1.ObjectMeta{Namespace: "default", Name: "web"}, Spec: spec}
}

func intPort(p int32) *corev1.IntOrString {
	return &corev1.IntOrString{Value: &corev1.IntOrString_IntVal{IntVal: p}}
}

// TestDefaultService: what kube-apiserver stores for a minimal Service of
// each type — the spec a `kubectl get svc -o yaml` shows.
func TestDefaultService(t *testing.T) {
	for _, tc := range []struct {
		name  string
		given *corev1.ServiceSpec
		want  *corev1.ServiceSpec
	}{
		{
			name:  "ClusterIP",
			given: &corev1.ServiceSpec{Selector: map[string]string{"app": "web"}, Ports: []*corev1.ServicePort{{Port: 80}}},
			want: &corev1.ServiceSpec{Selector: map[string]string{"app": "web"}, Type: "ClusterIP", SessionAffinity: "None",
				Ports:      []*corev1.ServicePort{{Port: 80, Protocol: "TCP", TargetPort: intPort(80)}},
				IpFamilies: []string{"IPv4"}, IpFamilyPolicy: proto.String("SingleStack"), InternalTrafficPolicy: proto.String("Cluster")},
		},
		{
			name:  "NodePort",
			given: &corev1.ServiceSpec{Type: "NodePort", Selector: map[string]string{"app": "web"}, Ports: []*corev1.ServicePort{{Port: 80, TargetPort: intPort(8080)}}},
			want: &corev1.ServiceSpec{Selector: map[string]string{"app": "web"}, Type: "NodePort", SessionAffinity: "None",
				Ports:      []*corev1.ServicePort{{Port: 80, Protocol: "TCP", TargetPort: intPort(8080)}},
				IpFamilies: []string{"IPv4"}, IpFamilyPolicy: proto.String("SingleStack"), InternalTrafficPolicy: proto.String("Cluster"),
				ExternalTrafficPolicy: "Cluster"},
		},
		{
			name:  "ClientIP affinity gets its timeout",
			given: &corev1.ServiceSpec{SessionAffinity: "ClientIP", Ports: []*corev1.ServicePort{{Port: 80, Protocol: "UDP"}}},
			want: &corev1.ServiceSpec{Type: "ClusterIP", SessionAffinity: "ClientIP",
				SessionAffinityConfig: &corev1.SessionAffinityConfig{ClientIp: &corev1.ClientIPConfig{TimeoutSeconds: proto.Int32(10800)}},
				Ports:                 []*corev1.ServicePort{{Port: 80, Protocol: "UDP", TargetPort: intPort(80)}},
				IpFamilies:            []string{"IPv4"}, IpFamilyPolicy: proto.String("SingleStack"), InternalTrafficPolicy: proto.String("Cluster")},
		},
		{
			name:  "headless without a selector is RequireDualStack, as kube-apiserver defaults it",
			given: &corev1.ServiceSpec{ClusterIp: "None", Ports: []*corev1.ServicePort{{Port: 80}}},
			want: &corev1.ServiceSpec{Type: "ClusterIP", SessionAffinity: "None", ClusterIp: "None", ClusterIps: []string{"None"},
				Ports:      []*corev1.ServicePort{{Port: 80, Protocol: "TCP", TargetPort: intPort(80)}},
				IpFamilies: []string{"IPv4", "IPv6"}, IpFamilyPolicy: proto.String("RequireDualStack"), InternalTrafficPolicy: proto.String("Cluster")},
		},
		{
			name:  "ExternalName has no families",
			given: &corev1.ServiceSpec{Type: "ExternalName", ExternalName: "db.example.com"},
			want:  &corev1.ServiceSpec{Type: "ExternalName", SessionAffinity: "None", ExternalName: "db.example.com"},
		},
		{
			name:  "LoadBalancer allocates node ports",
			given: &corev1.ServiceSpec{Type: "LoadBalancer", Ports: []*corev1.ServicePort{{Port: 80}}},
			want: &corev1.ServiceSpec{Type: "LoadBalancer", SessionAffinity: "None",
				Ports:      []*corev1.ServicePort{{Port: 80, Protocol: "TCP", TargetPort: intPort(80)}},
				IpFamilies: []string{"IPv4"}, IpFamilyPolicy: proto.String("SingleStack"), InternalTrafficPolicy: proto.String("Cluster"),
				ExternalTrafficPolicy: "Cluster", AllocateLoadBalancerNodePorts: proto.Bool(true)},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			svc := svcOf(tc.given)
			if st := validate.Service(svc, nil); st != nil {
				t.Fatalf("refused: %s", st.GetMessage())
			}
			if !proto.Equal(tc.want, svc.Spec) {
				t.Fatalf("spec\n%s\nwant\n%s", prototext.Format(svc.Spec), prototext.Format(tc.want))
			}
		})
	}
}

// TestServiceValidation: each invalid Service is refused with
// kube-apiserver's message (pkg/apis/core/validation, the allocator's
// family checks).
func TestServiceValidation(t *testing.T) {
	port := func(name string, p int32) *corev1.ServicePort { return &corev1.ServicePort{Name: name, Port: p} }
	for _, tc := range []struct {
		name  string
		given *corev1.ServiceSpec
		want  string
	}{
		{"port 0", &corev1.ServiceSpec{Ports: []*corev1.ServicePort{port("", 0)}},
			// the target port defaults to the port, and is as wrong
			`Service "web" is invalid: [spec.ports[0].port: Invalid value: 0: must be between 1 and 65535, inclusive, spec.ports[0].targetPort: Invalid value: 0: must be between 1 and 65535, inclusive]`},
		{"protocol", &corev1.ServiceSpec{Ports: []*corev1.ServicePort{{Port: 80, Protocol: "HTTP"}}},
			`Service "web" is invalid: spec.ports[0].protocol: Unsupported value: "HTTP": supported values: "SCTP", "TCP", "UDP"`},
		{"type", &corev1.ServiceSpec{Type: "Foo", Ports: []*corev1.ServicePort{port("", 80)}},
			`Service "web" is invalid: spec.type: Unsupported value: "Foo": supported values: "ClusterIP", "ExternalName", "LoadBalancer", "NodePort"`},
		{"no ports", &corev1.ServiceSpec{},
			`Service "web" is invalid: spec.ports: Required value`},
		{"unnamed second port", &corev1.ServiceSpec{Ports: []*corev1.ServicePort{port("a", 80), port("", 81)}},
			`Service "web" is invalid: spec.ports[1].name: Required value`},
		{"duplicate port", &corev1.ServiceSpec{Ports: []*corev1.ServicePort{port("a", 80), port("b", 80)}},
			`Service "web" is invalid: spec.ports[1]: Duplicate value: {"Name":"","Protocol":"TCP","AppProtocol":null,"Port":80,"TargetPort":0,"NodePort":0}`},
		{"bad target port name", &corev1.ServiceSpec{Ports: []*corev1.ServicePort{{Port: 80, TargetPort: &corev1.IntOrString{Value: &corev1.IntOrString_StrVal{StrVal: "Web_Port"}}}}},
			`Service "web" is invalid: spec.ports[0].targetPort: Invalid value: "Web_Port": must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)`},
		{"node port on ClusterIP", &corev1.ServiceSpec{Ports: []*corev1.ServicePort{{Port: 80, NodePort: 30080}}},
			"Service \"web\" is invalid: spec.ports[0].nodePort: Forbidden: may not be used when `type` is 'ClusterIP'"},
		{"headless NodePort", &corev1.ServiceSpec{Type: "NodePort", ClusterIp: "None", Selector: map[string]string{"a": "b"}, Ports: []*corev1.ServicePort{port("", 80)}},
			`Service "web" is invalid: spec.clusterIPs[0]: Invalid value: "None": may not be set to 'None' for NodePort services`},
		{"ExternalName without a name", &corev1.ServiceSpec{Type: "ExternalName"},
			`Service "web" is invalid: spec.externalName: Required value`},
		{"ExternalName with a bad name", &corev1.ServiceSpec{Type: "ExternalName", ExternalName: "Foo_Bar"},
			`Service "web" is invalid: spec.externalName: Invalid value: "Foo_Bar": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')`},
		{"dual stack", &corev1.ServiceSpec{IpFamilyPolicy: proto.String("RequireDualStack"), Ports: []*corev1.ServicePort{port("", 80)}},
			`Service "web" is invalid: spec.ipFamilyPolicy: Invalid value: "RequireDualStack": this cluster is not configured for dual-stack services`},
		{"IPv6", &corev1.ServiceSpec{IpFamilies: []string{"IPv6"}, Ports: []*corev1.ServicePort{port("", 80)}},
			`Service "web" is invalid: spec.ipFamilies[0]: Invalid value: "IPv6": not configured on this cluster`},
		{"an IPv6 cluster IP", &corev1.ServiceSpec{ClusterIp: "fd00::10", Ports: []*corev1.ServicePort{port("", 80)}},
			`Service "web" is invalid: spec.clusterIPs[0]: Invalid value: ["fd00::10"]: IPv6 is not configured on this cluster`},
		{"two cluster IPs, single stack", &corev1.ServiceSpec{ClusterIp: "10.96.0.10", ClusterIps: []string{"10.96.0.10", "fd00::10"}, Ports: []*corev1.ServicePort{port("", 80)}},
			`Service "web" is invalid: [spec.ipFamilyPolicy: Invalid value: "SingleStack": must be 'RequireDualStack' or 'PreferDualStack' when multiple cluster IPs are specified, spec.clusterIPs[1]: Invalid value: ["10.96.0.10","fd00::10"]: IPv6 is not configured on this cluster]`},
		{"clusterIPs disagree", &corev1.ServiceSpec{ClusterIp: "10.96.0.10", ClusterIps: []string{"10.96.0.11"}, Ports: []*corev1.ServicePort{port("", 80)}},
			"Service \"web\" is invalid: spec.clusterIPs: Invalid value: [\"10.96.0.11\"]: first value must match `clusterIP`"},
		{"not an IP", &corev1.ServiceSpec{ClusterIp: "ten", Ports: []*corev1.ServicePort{port("", 80)}},
			`Service "web" is invalid: spec.clusterIPs[0]: Invalid value: "ten": must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)`},
		{"affinity timeout", &corev1.ServiceSpec{SessionAffinity: "ClientIP", SessionAffinityConfig: &corev1.SessionAffinityConfig{ClientIp: &corev1.ClientIPConfig{TimeoutSeconds: proto.Int32(0)}}, Ports: []*corev1.ServicePort{port("", 80)}},
			`Service "web" is invalid: spec.sessionAffinityConfig.clientIP.timeoutSeconds: Invalid value: 0: must be greater than 0 and less than 86400`},
		{"affinity", &corev1.ServiceSpec{SessionAffinity: "Cookie", Ports: []*corev1.ServicePort{port("", 80)}},
			`Service "web" is invalid: spec.sessionAffinity: Unsupported value: "Cookie": supported values: "ClientIP", "None"`},
		{"external policy on ClusterIP", &corev1.ServiceSpec{ExternalTrafficPolicy: "Local", Ports: []*corev1.ServicePort{port("", 80)}},
			`Service "web" is invalid: spec.externalTrafficPolicy: Invalid value: "Local": may only be set for externally-accessible services`},
		{"internal policy", &corev1.ServiceSpec{InternalTrafficPolicy: proto.String("Nearby"), Ports: []*corev1.ServicePort{port("", 80)}},
			`Service "web" is invalid: spec.internalTrafficPolicy: Unsupported value: "Nearby": supported values: "Cluster", "Local"`},
		{"selector", &corev1.ServiceSpec{Selector: map[string]string{"app": "a b"}, Ports: []*corev1.ServicePort{port("", 80)}},
			`Service "web" is invalid: spec.selector: Invalid value: "a b": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')`},
		{"two errors", &corev1.ServiceSpec{Ports: []*corev1.ServicePort{{Port: 70000, Protocol: "HTTP", TargetPort: intPort(80)}}},
			`Service "web" is invalid: [spec.ports[0].port: Invalid value: 70000: must be between 1 and 65535, inclusive, spec.ports[0].protocol: Unsupported value: "HTTP": supported values: "SCTP", "TCP", "UDP"]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := validate.Service(svcOf(tc.given), nil)
			if st.GetCode() != 422 || st.GetReason() != "Invalid" || st.GetMessage() != tc.want {
				t.Fatalf("got %d %s %q\nwant 422 Invalid %q", st.GetCode(), st.GetReason(), st.GetMessage(), tc.want)
			}
		})
	}
}

// TestServiceUpdate: an update keeps what the server allocated when the
// client leaves it out, drops what the old type needed when the client
// left it as it was, and refuses a changed clusterIP as kube-apiserver
// does.
func TestServiceUpdate(t *testing.T) {
	stored := func() *corev1.Service {
		s := svcOf(&corev1.ServiceSpec{Type: "NodePort", Selector: map[string]string{"app": "web"},
			Ports: []*corev1.ServicePort{{Name: "http", Port: 80}}})
		if st := validate.Service(s, nil); st != nil {
			t.Fatal(st.GetMessage())
		}
		s.Spec.ClusterIp, s.Spec.ClusterIps = "10.96.0.10", []string{"10.96.0.10"} // as allocated
		s.Spec.Ports[0].NodePort = 30080
		return s
	}
	t.Run("re-applied manifest keeps the allocations", func(t *testing.T) {
		next := svcOf(&corev1.ServiceSpec{Type: "NodePort", Selector: map[string]string{"app": "web"}, Ports: []*corev1.ServicePort{{Name: "http", Port: 80}}})
		if st := validate.Service(next, stored()); st != nil {
			t.Fatal(st.GetMessage())
		}
		if next.Spec.ClusterIp != "10.96.0.10" || next.Spec.Ports[0].NodePort != 30080 || next.Spec.GetIpFamilyPolicy() != "SingleStack" {
			t.Fatalf("spec %v", next.Spec)
		}
	})
	t.Run("to ExternalName drops the cluster IP, families, node ports and policy", func(t *testing.T) {
		next := proto.Clone(stored()).(*corev1.Service)
		next.Spec.Type, next.Spec.ExternalName = "ExternalName", "db.example.com"
		if st := validate.Service(next, stored()); st != nil {
			t.Fatal(st.GetMessage())
		}
		s := next.Spec
		if s.ClusterIp != "" || s.ClusterIps != nil || s.IpFamilies != nil || s.IpFamilyPolicy != nil || s.Ports[0].NodePort != 0 || s.ExternalTrafficPolicy != "" {
			t.Fatalf("spec %v", s)
		}
	})
	t.Run("a changed cluster IP", func(t *testing.T) {
		next := proto.Clone(stored()).(*corev1.Service)
		next.Spec.ClusterIp, next.Spec.ClusterIps = "10.96.0.11", []string{"10.96.0.11"}
		st := validate.Service(next, stored())
		want := `Service "web" is invalid: spec.clusterIPs[0]: Invalid value: ["10.96.0.11"]: may not change once set`
		if st.GetMessage() != want {
			t.Fatalf("got %q\nwant %q", st.GetMessage(), want)
		}
	})
	t.Run("to ClusterIP drops the node ports and the external policy", func(t *testing.T) {
		next := proto.Clone(stored()).(*corev1.Service)
		next.Spec.Type = "ClusterIP"
		if st := validate.Service(next, stored()); st != nil {
			t.Fatal(st.GetMessage())
		}
		if next.Spec.Ports[0].NodePort != 0 || next.Spec.ExternalTrafficPolicy != "" {
			t.Fatalf("spec %v", next.Spec)
		}
	})
}

// TestEndpointsValidation: a user's Endpoints are validated as
// kube-apiserver's ValidateEndpoints does; a port's protocol defaults to
// TCP.
func TestEndpointsValidation(t *testing.T) {
	eps := func(sub *corev1.EndpointSubset) *corev1.Endpoints {
		return &corev1.Endpoints{Metadata: &corev1.ObjectMeta{Namespace: "default", Name: "custom"}, Subsets: []*corev1.EndpointSubset{sub}}
	}
	ok := eps(&corev1.EndpointSubset{Addresses: []*corev1.EndpointAddress{{Ip: "10.1.2.3", Hostname: "db-0"}},
		Ports: []*corev1.EndpointsPort{{Port: 80}}})
	if st := validate.Object(ok); st != nil {
		t.Fatal(st.GetMessage())
	}
	if p := ok.Subsets[0].Ports[0].GetProtocol(); p != "TCP" {
		t.Fatalf("protocol %q, want TCP by default", p)
	}
	for _, tc := range []struct {
		name string
		sub  *corev1.EndpointSubset
		want string
	}{
		{"loopback", &corev1.EndpointSubset{Addresses: []*corev1.EndpointAddress{{Ip: "127.0.0.1"}}},
			`Endpoints "custom" is invalid: subsets[0].addresses[0].ip: Invalid value: "127.0.0.1": may not be in the loopback range (127.0.0.0/8, ::1/128)`},
		{"link-local", &corev1.EndpointSubset{NotReadyAddresses: []*corev1.EndpointAddress{{Ip: "169.254.169.254"}}},
			`Endpoints "custom" is invalid: subsets[0].notReadyAddresses[0].ip: Invalid value: "169.254.169.254": may not be in the link-local range (169.254.0.0/16, fe80::/10)`},
		{"no address", &corev1.EndpointSubset{Ports: []*corev1.EndpointsPort{{Port: 80}}},
			"Endpoints \"custom\" is invalid: subsets[0]: Required value: must specify `addresses` or `notReadyAddresses`"},
		{"two unnamed ports", &corev1.EndpointSubset{Addresses: []*corev1.EndpointAddress{{Ip: "10.1.2.3"}}, Ports: []*corev1.EndpointsPort{{Name: "a", Port: 80}, {Port: 81}}},
			`Endpoints "custom" is invalid: subsets[0].ports[1].name: Required value`},
		{"protocol", &corev1.EndpointSubset{Addresses: []*corev1.EndpointAddress{{Ip: "10.1.2.3"}}, Ports: []*corev1.EndpointsPort{{Port: 80, Protocol: "HTTP"}}},
			`Endpoints "custom" is invalid: subsets[0].ports[0].protocol: Unsupported value: "HTTP": supported values: "SCTP", "TCP", "UDP"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := validate.Object(eps(tc.sub))
			if st.GetCode() != 422 || st.GetMessage() != tc.want {
				t.Fatalf("got %d %q\nwant 422 %q", st.GetCode(), st.GetMessage(), tc.want)
			}
		})
	}
}
