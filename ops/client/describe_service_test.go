package client

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/stages/endpoints"
)

func TestDescribeService(t *testing.T) {
	app := map[string]string{"app": "web"}
	mkPod := func(name, ip string, labels map[string]string, ready string, reason string) *corev1.Pod {
		return &corev1.Pod{Metadata: &corev1.ObjectMeta{Name: name, Namespace: "default", Labels: labels},
			Spec:   &corev1.PodSpec{Containers: []*corev1.Container{{Name: "c"}}},
			Status: &corev1.PodStatus{Phase: "Running", PodIp: ip, Conditions: []*corev1.PodCondition{{Type: "Ready", Status: ready, Reason: reason}}}}
	}
	svc := &corev1.Service{Metadata: &corev1.ObjectMeta{Name: "web", Namespace: "default"},
		Spec: &corev1.ServiceSpec{Selector: app, ClusterIp: "10.96.200.7", ClusterIps: []string{"10.96.200.7"},
			Ports: []*corev1.ServicePort{{Name: "http", Port: 80, TargetPort: &corev1.IntOrString{Value: &corev1.IntOrString_IntVal{IntVal: 8080}}}}}}
	pods := []*corev1.Pod{
		mkPod("web-b", "10.244.1.3", app, "False", "ContainersNotReady"),
		mkPod("web-a", "10.244.1.2", app, "True", ""),
		mkPod("db", "10.244.1.4", map[string]string{"app": "db"}, "True", ""),
	}
	sls := endpoints.Desired(svc, pods)
	var b strings.Builder
	describeService(&b, svc, sls, pods)
	out := b.String()
	for _, want := range []string{
		"IP:               10.96.200.7\n",
		"Port:             http  80/TCP\n",
		"TargetPort:       8080/TCP\n",
		"Endpoints:        10.244.1.2:8080\n",
		"web-a  10.244.1.2  yes       Ready\n",
		"web-b  10.244.1.3  no        not Ready (ContainersNotReady)\n",
		"(1 other pod(s) in the namespace: labels do not match the selector)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("describe lacks %q:\n%s", want, out)
		}
	}
	if strings.Index(out, "web-a") > strings.Index(out, "web-b") {
		t.Errorf("pods not sorted by name:\n%s", out)
	}

	t.Run("no endpoints, not-ready listed", func(t *testing.T) {
		sl := &corev1.EndpointSlice{Endpoints: []*corev1.Endpoint{{Addresses: []string{"10.244.1.3"}, Conditions: &corev1.EndpointConditions{Ready: proto.Bool(false)}}}}
		var b strings.Builder
		describeService(&b, svc, []*corev1.EndpointSlice{sl}, nil)
		for _, want := range []string{"Endpoints:        <none>\n", "Not Ready:        10.244.1.3\n", "<none> selected"} {
			if !strings.Contains(b.String(), want) {
				t.Errorf("describe lacks %q:\n%s", want, b.String())
			}
		}
	})

	// A named targetPort resolved to two numbers: each address with its
	// own slice's port.
	t.Run("a port per slice", func(t *testing.T) {
		named := proto.CloneOf(svc)
		named.Spec.Ports[0].TargetPort = &corev1.IntOrString{Value: &corev1.IntOrString_StrVal{StrVal: "web"}}
		a, b := mkPod("web-a", "10.244.1.2", app, "True", ""), mkPod("web-b", "10.244.1.3", app, "True", "")
		a.Spec.Containers[0].Ports = []*corev1.ContainerPort{{Name: "web", ContainerPort: 8080}}
		b.Spec.Containers[0].Ports = []*corev1.ContainerPort{{Name: "web", ContainerPort: 9090}}
		var out strings.Builder
		describeService(&out, named, endpoints.Desired(named, []*corev1.Pod{a, b}), []*corev1.Pod{a, b})
		if want := "Endpoints:        10.244.1.2:8080,10.244.1.3:9090\n"; !strings.Contains(out.String(), want) {
			t.Errorf("describe lacks %q:\n%s", want, out.String())
		}
	})
}
