package endpoints

import (
	"maps"
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

func addrs(s *corev1.EndpointSlice) []string {
	var out []string
	for _, e := range s.Endpoints {
		out = append(out, e.Addresses...)
	}
	return out
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
		{"named port not exposed", svc(app, named), []*corev1.Pod{pod("a", "10.0.0.2", app, true, nil)}, nil, 0},
		{"terminating pod is absent", svc(app, named), []*corev1.Pod{terminating}, nil, 0},
		{"no selector selects nothing", svc(nil, numbered), []*corev1.Pod{pod("a", "10.0.0.2", app, true, nil)}, nil, 9090},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Desired(tt.svc, tt.pods)
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
			if !Equal(got, Desired(tt.svc, tt.pods)) {
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
	got := Desired(s, []*corev1.Pod{pod("a", "10.0.0.2", map[string]string{"app": "web"}, false, nil)})
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
		{"named port not exposed", svc(app, named), pod("a", "10.0.0.2", app, true, nil), false, `exposes no port named "http"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			endpoint, why := Membership(tt.svc, tt.pod)
			if endpoint != tt.endpoint || why != tt.why {
				t.Errorf("Membership = %v %q, want %v %q", endpoint, why, tt.endpoint, tt.why)
			}
			if in := len(addrs(Desired(tt.svc, []*corev1.Pod{tt.pod}))) == 1; in != endpoint {
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
	sl := Desired(s, []*corev1.Pod{sub, elsewhere, bare})
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
	if _, headless := Desired(s, nil).GetMetadata().GetLabels()[LabelHeadless]; headless {
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
	sl := Desired(svc(app, unnamed), []*corev1.Pod{pod("a", "10.0.0.1", app, true, nil)})
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
