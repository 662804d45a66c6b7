package endpoints

import (
	"fmt"
	"maps"
	"strings"
	"testing"

	"google.golang.org/protobuf/types/known/timestamppb"
	corev1k "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apiserver/pkg/util/proxy"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/manifest"
)

func svc(sel map[string]string, ports ...*corev1.ServicePort) *corev1.Service {
	return &corev1.Service{
		Metadata: &corev1.ObjectMeta{Name: "web", Namespace: "default", Uid: "svc-uid"},
		Spec:     &corev1.ServiceSpec{Selector: sel, Ports: ports},
	}
}

func pod(name, ip string, labels map[string]string, ready bool, port *corev1.ContainerPort) *corev1.Pod {
	st := "False"
	if ready {
		st = "True"
	}
	p := &corev1.Pod{
		Metadata: &corev1.ObjectMeta{Name: name, Namespace: "default", Uid: name + "-uid", Labels: labels},
		Spec:     &corev1.PodSpec{NodeName: "n1", Containers: []*corev1.Container{{Name: "c"}}},
		Status: &corev1.PodStatus{Phase: "Running", PodIp: ip, Conditions: []*corev1.PodCondition{
			{Type: "Ready", Status: st},
		}},
	}
	if port != nil {
		p.Spec.Containers[0].Ports = []*corev1.ContainerPort{port}
	}
	return p
}

func addrs(sls ...*corev1.EndpointSlice) []string {
	var out []string
	for _, s := range sls {
		for _, e := range s.Endpoints {
			out = append(out, e.Addresses...)
		}
	}
	return out
}

// only is the one slice of sls.
func only(t *testing.T, sls []*corev1.EndpointSlice) *corev1.EndpointSlice {
	t.Helper()
	if len(sls) != 1 {
		t.Fatalf("%d slices, want 1: %v", len(sls), sls)
	}
	return sls[0]
}

func TestDesired(t *testing.T) {
	app := map[string]string{"app": "web"}
	other := map[string]string{"app": "db"}
	http := &corev1.ContainerPort{Name: "http", ContainerPort: 8080}
	named := &corev1.ServicePort{Port: 80, TargetPort: &corev1.IntOrString{Value: &corev1.IntOrString_StrVal{StrVal: "http"}}}
	numbered := &corev1.ServicePort{Port: 80, TargetPort: &corev1.IntOrString{Value: &corev1.IntOrString_IntVal{IntVal: 9090}}}
	terminating := pod("t", "10.0.0.9", app, true, http)
	terminating.Metadata.DeletionTimestamp = timestamppb.Now()

	tests := []struct {
		name      string
		svc       *corev1.Service
		pods      []*corev1.Pod
		wantAddrs []string
		wantPort  int32
	}{
		{"ready and matching pods, sorted", svc(app, named), []*corev1.Pod{
			pod("b", "10.0.0.3", app, true, http), pod("a", "10.0.0.2", app, true, http),
		}, []string{"10.0.0.2", "10.0.0.3"}, 8080},
		{"running but not ready is absent", svc(app, named), []*corev1.Pod{
			pod("a", "10.0.0.2", app, false, http), pod("b", "10.0.0.3", app, true, http),
		}, []string{"10.0.0.3"}, 8080},
		{"labels not matching are absent", svc(app, numbered), []*corev1.Pod{
			pod("a", "10.0.0.2", other, true, nil), pod("b", "10.0.0.3", app, true, nil),
		}, []string{"10.0.0.3"}, 9090},
		// FindPort: the port is left out of the endpoint, not the pod.
		{"named port not exposed", svc(app, named), []*corev1.Pod{pod("a", "10.0.0.2", app, true, nil)}, []string{"10.0.0.2"}, 0},
		{"terminating pod is absent", svc(app, named), []*corev1.Pod{terminating}, nil, 0},
		// No endpoint: one slice without ports (kube's placeholder).
		{"no selector selects nothing", svc(nil, numbered), []*corev1.Pod{pod("a", "10.0.0.2", app, true, nil)}, nil, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := only(t, Desired(tt.svc, tt.pods))
			if got.GetMetadata().GetName() != "web" {
				t.Fatalf("slice %q, want web", got.GetMetadata().GetName())
			}
			if a := addrs(got); len(a) != len(tt.wantAddrs) {
				t.Fatalf("addresses %v, want %v", a, tt.wantAddrs)
			} else {
				for i := range a {
					if a[i] != tt.wantAddrs[i] {
						t.Fatalf("addresses %v, want %v", a, tt.wantAddrs)
					}
				}
			}
			var port int32
			if len(got.Ports) > 0 {
				port = got.Ports[0].GetPort()
			}
			if port != tt.wantPort {
				t.Fatalf("port %d, want %d", port, tt.wantPort)
			}
			if got.Metadata.Labels[LabelServiceName] != "web" {
				t.Fatalf("labels %v", got.Metadata.Labels)
			}
			if !Equal(got, only(t, Desired(tt.svc, tt.pods))) {
				t.Fatal("Desired is not deterministic")
			}
		})
	}
}

// TestPublishNotReadyAddresses: a Service that publishes not-ready
// addresses lists its unready pods as ready (and not serving), as kube's
// podToEndpoint does: DNS and the proxy use them.
func TestPublishNotReadyAddresses(t *testing.T) {
	s := svc(map[string]string{"app": "web"}, &corev1.ServicePort{Port: 80})
	s.Spec.PublishNotReadyAddresses = true
	got := only(t, Desired(s, []*corev1.Pod{pod("a", "10.0.0.2", map[string]string{"app": "web"}, false, nil)}))
	if len(got.Endpoints) != 1 || !got.Endpoints[0].Conditions.GetReady() || got.Endpoints[0].Conditions.GetServing() {
		t.Fatalf("endpoints %v", got.Endpoints)
	}
}

// TestMembership: the reason describe shows for each pod, and that it
// agrees with Desired about who is an endpoint.
func TestMembership(t *testing.T) {
	app := map[string]string{"app": "web"}
	http := &corev1.ContainerPort{Name: "http", ContainerPort: 8080}
	named := &corev1.ServicePort{Port: 80, TargetPort: &corev1.IntOrString{Value: &corev1.IntOrString_StrVal{StrVal: "http"}}}
	terminating := pod("t", "10.0.0.9", app, true, http)
	terminating.Metadata.DeletionTimestamp = timestamppb.Now()
	probed := pod("p", "10.0.0.4", app, false, http)
	probed.Status.Conditions[0].Reason = "ContainersNotReady"
	publish := svc(app, named)
	publish.Spec.PublishNotReadyAddresses = true
	tests := []struct {
		name     string
		svc      *corev1.Service
		pod      *corev1.Pod
		endpoint bool
		why      string
	}{
		{"ready", svc(app, named), pod("a", "10.0.0.2", app, true, http), true, "Ready"},
		{"labels", svc(app, named), pod("a", "10.0.0.2", map[string]string{"app": "db"}, true, http), false, "labels do not match the selector"},
		{"no IP", svc(app, named), pod("a", "", app, false, http), false, "no pod IP yet"},
		{"not ready", svc(app, named), pod("a", "10.0.0.2", app, false, http), false, "not Ready"},
		{"not ready, with the condition's reason", svc(app, named), probed, false, "not Ready (ContainersNotReady)"},
		{"terminating", svc(app, named), terminating, false, "terminating"},
		{"terminating, published", publish, terminating, true, "Terminating"},
		{"not ready, published", publish, pod("a", "10.0.0.2", app, false, http), true, "not Ready (published: publishNotReadyAddresses)"},
		{"named port not exposed", svc(app, named), pod("a", "10.0.0.2", app, true, nil), true, `Ready; exposes no port named "http"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			endpoint, why := Membership(tt.svc, tt.pod)
			if endpoint != tt.endpoint || why != tt.why {
				t.Errorf("Membership = %v %q, want %v %q", endpoint, why, tt.endpoint, tt.why)
			}
			if in := len(addrs(Desired(tt.svc, []*corev1.Pod{tt.pod})...)) == 1; in != endpoint {
				t.Errorf("Desired lists the pod: %v; Membership says %v", in, endpoint)
			}
		})
	}
}

// TestDesiredHostnameAndLabels: an endpoint carries its pod's hostname
// when the pod's subdomain names the Service (kube's ShouldSetHostname),
// and the slice the Service's labels, the headless label of a Service
// without a cluster IP, the Service's name and the EndpointSlice
// controller's manager name.
func TestDesiredHostnameAndLabels(t *testing.T) {
	app := map[string]string{"app": "web"}
	s := svc(app, &corev1.ServicePort{Port: 80})
	s.Metadata.Labels = map[string]string{"tier": "front", LabelManagedBy: "someone-else"}
	s.Spec.ClusterIp = "None"
	sub := pod("a", "10.0.0.1", app, true, nil)
	sub.Spec.Hostname, sub.Spec.Subdomain = "host-a", "web"
	elsewhere := pod("b", "10.0.0.2", app, true, nil)
	elsewhere.Spec.Hostname, elsewhere.Spec.Subdomain = "host-b", "other"
	bare := pod("c", "10.0.0.3", app, true, nil)
	bare.Spec.Hostname = "host-c"
	sl := only(t, Desired(s, []*corev1.Pod{sub, elsewhere, bare}))
	for _, ep := range sl.Endpoints {
		want := ""
		if ep.Addresses[0] == "10.0.0.1" {
			want = "host-a"
		}
		if ep.GetHostname() != want {
			t.Errorf("endpoint %s has hostname %q, want %q", ep.Addresses[0], ep.GetHostname(), want)
		}
	}
	want := map[string]string{"tier": "front", LabelHeadless: "", LabelServiceName: "web", LabelManagedBy: "endpointslice-controller.k8s.io"}
	if got := sl.GetMetadata().GetLabels(); !maps.Equal(got, want) {
		t.Errorf("labels %v, want %v", got, want)
	}
	s.Spec.ClusterIp = "10.96.0.10"
	if _, headless := only(t, Desired(s, nil)).GetMetadata().GetLabels()[LabelHeadless]; headless {
		t.Error("a Service with a cluster IP has the headless label")
	}
}

// TestUnnamedPortResolves: a Service's unnamed port is a slice port named
// "" (not a missing name), as kube's EndpointSlice controller writes it:
// kube-apiserver's resolver for webhooks and aggregated APIs
// (proxy.RandomEndpoint) finds the endpoint through it.
func TestUnnamedPortResolves(t *testing.T) {
	app := map[string]string{"app": "web"}
	unnamed := &corev1.ServicePort{Port: 443, TargetPort: &corev1.IntOrString{Value: &corev1.IntOrString_IntVal{IntVal: 8444}}}
	sl := only(t, Desired(svc(app, unnamed), []*corev1.Pod{pod("a", "10.0.0.1", app, true, nil)}))
	sl.Metadata = &corev1.ObjectMeta{Name: "web", Namespace: "default"}
	k, err := manifest.ToKube(sl)
	if err != nil {
		t.Fatal(err)
	}
	got, err := proxy.RandomEndpoint("web", []*discoveryv1.EndpointSlice{k.(*discoveryv1.EndpointSlice)}, "", corev1k.IPv4Protocol, nil)
	if err != nil || got != "10.0.0.1:8444" {
		t.Fatalf("RandomEndpoint = %q, %v; want 10.0.0.1:8444", got, err)
	}
}

func named(svcPort, target string, port int32) *corev1.ServicePort {
	return &corev1.ServicePort{Name: svcPort, Port: port, Protocol: "TCP",
		TargetPort: &corev1.IntOrString{Value: &corev1.IntOrString_StrVal{StrVal: target}}}
}

// slicePorts is each slice's "name:port" list and addresses.
func slicePorts(sls []*corev1.EndpointSlice) map[string]string {
	out := map[string]string{}
	for _, sl := range sls {
		var ps []string
		for _, p := range sl.Ports {
			ps = append(ps, fmt.Sprintf("%s:%d", p.GetName(), p.GetPort()))
		}
		out[strings.Join(addrs(sl), ",")] = strings.Join(ps, ",")
	}
	return out
}

// TestDesiredGroupsByResolvedPorts: a named targetPort resolves per pod,
// and the endpoints whose ports resolve alike share a slice, as kube's
// EndpointSlice reconciler groups them (the conformance tests "should
// create Endpoints and EndpointSlices for Pods matching a Service" and
// "should serve multiport endpoints from pods"): a pod serving port 3000
// and one serving 3001 under the same name are in two slices, and a pod
// serving only one of a Service's two named ports is an endpoint of that
// port alone. The largest group keeps the Service's name; the Endpoints
// has one subset per group.
func TestDesiredGroupsByResolvedPorts(t *testing.T) {
	app := map[string]string{"app": "web"}
	p1 := pod("pod1", "10.0.0.1", app, true, &corev1.ContainerPort{Name: "example-name", ContainerPort: 3000})
	p2 := pod("pod2", "10.0.0.2", app, true, &corev1.ContainerPort{Name: "example-name", ContainerPort: 3001})
	p2.Spec.Containers[0].Ports = append(p2.Spec.Containers[0].Ports, &corev1.ContainerPort{Name: "other-port", ContainerPort: 3002})
	p3 := pod("pod3", "10.0.0.3", app, true, &corev1.ContainerPort{Name: "example-name", ContainerPort: 3000})

	s := svc(app, named("http", "example-name", 80))
	got := Desired(s, []*corev1.Pod{p1, p2, p3})
	if want := map[string]string{"10.0.0.1,10.0.0.3": "http:3000", "10.0.0.2": "http:3001"}; !maps.Equal(slicePorts(got), want) {
		t.Fatalf("slices %v, want %v", slicePorts(got), want)
	}
	names := map[string]string{}
	for _, sl := range got {
		names[strings.Join(addrs(sl), ",")] = sl.GetMetadata().GetName()
		if sl.GetMetadata().GetLabels()[LabelServiceName] != "web" || !Managed(sl) {
			t.Errorf("slice %s labels %v", sl.GetMetadata().GetName(), sl.GetMetadata().GetLabels())
		}
	}
	if names["10.0.0.1,10.0.0.3"] != "web" || !strings.HasPrefix(names["10.0.0.2"], "web-") {
		t.Errorf("slice names %v: the largest group is web, the other web-<hash>", names)
	}
	again := Desired(s, []*corev1.Pod{p3, p2, p1})
	for i := range got {
		if !Equal(got[i], again[i]) || got[i].GetMetadata().GetName() != again[i].GetMetadata().GetName() {
			t.Fatal("Desired is not deterministic")
		}
	}
	eps := DesiredEndpoints(s, got)
	if len(eps.Subsets) != 2 || len(eps.Subsets[0].Addresses) != 2 || eps.Subsets[0].Ports[0].GetPort() != 3000 ||
		len(eps.Subsets[1].Addresses) != 1 || eps.Subsets[1].Ports[0].GetPort() != 3001 {
		t.Errorf("Endpoints subsets %v", eps.Subsets)
	}

	multi := svc(app, named("portname1", "svc1", 80), named("portname2", "svc2", 81))
	m1 := pod("pod1", "10.0.0.1", app, true, &corev1.ContainerPort{Name: "svc1", ContainerPort: 100})
	m2 := pod("pod2", "10.0.0.2", app, true, &corev1.ContainerPort{Name: "svc2", ContainerPort: 101})
	if got, want := slicePorts(Desired(multi, []*corev1.Pod{m1})), map[string]string{"10.0.0.1": "portname1:100"}; !maps.Equal(got, want) {
		t.Errorf("pod1 alone: slices %v, want %v", got, want)
	}
	if got, want := slicePorts(Desired(multi, []*corev1.Pod{m1, m2})), map[string]string{"10.0.0.1": "portname1:100", "10.0.0.2": "portname2:101"}; !maps.Equal(got, want) {
		t.Errorf("pod1 and pod2: slices %v, want %v", got, want)
	}
	// An endpoint with no port resolved is in a slice, not in the
	// Endpoints (kube's endpoints controller skips the port, then the
	// address has none).
	bare := pod("bare", "10.0.0.9", app, true, nil)
	if eps := DesiredEndpoints(multi, Desired(multi, []*corev1.Pod{bare})); len(eps.Subsets) != 0 {
		t.Errorf("Endpoints of a pod with no port: %v", eps.Subsets)
	}
}

// TestDesiredPlaceholder: a Service with no endpoint has one slice with
// neither endpoints nor ports, and Endpoints without subsets.
func TestDesiredPlaceholder(t *testing.T) {
	s := svc(map[string]string{"app": "web"}, &corev1.ServicePort{Name: "p", Port: 80,
		TargetPort: &corev1.IntOrString{Value: &corev1.IntOrString_IntVal{IntVal: 8080}}})
	sl := only(t, Desired(s, nil))
	if sl.GetMetadata().GetName() != "web" || len(sl.Endpoints) != 0 || len(sl.Ports) != 0 {
		t.Fatalf("placeholder %v", sl)
	}
	if eps := DesiredEndpoints(s, []*corev1.EndpointSlice{sl}); len(eps.Subsets) != 0 {
		t.Fatalf("Endpoints %v", eps.Subsets)
	}
}

// TestSidecarPortResolves: a named targetPort resolves against a
// sidecar's ports (an init container that restarts always), not a plain
// init container's, as kube's FindPort.
func TestSidecarPortResolves(t *testing.T) {
	app := map[string]string{"app": "web"}
	s := svc(app, named("http", "side", 80))
	p := pod("a", "10.0.0.1", app, true, nil)
	p.Spec.InitContainers = []*corev1.Container{{Name: "init", Ports: []*corev1.ContainerPort{{Name: "side", ContainerPort: 7000}}}}
	if got := slicePorts(Desired(s, []*corev1.Pod{p})); got["10.0.0.1"] != "" {
		t.Fatalf("a plain init container's port resolved: %v", got)
	}
	p.Spec.InitContainers[0].RestartPolicy = "Always"
	if got := slicePorts(Desired(s, []*corev1.Pod{p})); got["10.0.0.1"] != "http:7000" {
		t.Fatalf("sidecar port: %v", got)
	}
}
