package admission

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/podrules"
)

// typical is a realistic pod and namespace state: two containers with
// ports, probes, env and mounts, a mesh sidecar and its init container (as
// an injector webhook adds them), a LimitRange and a restricted namespace.
func typical() (*corev1.Pod, State) {
	restricted := func() *corev1.SecurityContext {
		return &corev1.SecurityContext{AllowPrivilegeEscalation: proto.Bool(false),
			Capabilities: &corev1.Capabilities{Drop: []string{"ALL"}}}
	}
	p := pod(func(p *corev1.Pod) {
		p.Metadata.Labels = map[string]string{"app": "shop", "tier": "web"}
		p.Spec.Volumes = []*corev1.Volume{
			{Name: "config", ConfigMap: &corev1.ConfigMapVolumeSource{Name: "shop-config"}},
			{Name: "cache", EmptyDir: &corev1.EmptyDirVolumeSource{Medium: "Memory", SizeLimit: "64Mi"}},
			{Name: "mesh-certs", Secret: &corev1.SecretVolumeSource{SecretName: "mesh-certs"}},
		}
		p.Spec.InitContainers = []*corev1.Container{{Name: "proxy-init", Image: "mesh/init:1.9", SecurityContext: restricted(),
			VolumeMounts: []*corev1.VolumeMount{{Name: "mesh-certs", MountPath: "/certs"}}}}
		c := app(p)
		c.Image = "registry.local/shop/web:2.4.1"
		c.Ports = []*corev1.ContainerPort{{Name: "http", ContainerPort: 8080}, {Name: "metrics", ContainerPort: 9090}}
		c.Env = []*corev1.EnvVar{{Name: "MODE", Value: "prod"}, {Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}}
		c.Resources = &corev1.ResourceRequirements{Limits: map[string]string{"memory": "512Mi"}, Requests: map[string]string{"cpu": "250m"}}
		c.VolumeMounts = []*corev1.VolumeMount{{Name: "config", MountPath: "/etc/shop", ReadOnly: true}, {Name: "cache", MountPath: "/cache"}}
		c.ReadinessProbe = &corev1.Probe{HttpGet: &corev1.HTTPGetAction{Path: "/ready", Port: &corev1.IntOrString{Value: &corev1.IntOrString_StrVal{StrVal: "http"}}}}
		c.LivenessProbe = &corev1.Probe{TcpSocket: &corev1.TCPSocketAction{Port: &corev1.IntOrString{Value: &corev1.IntOrString_IntVal{IntVal: 8080}}}, InitialDelaySeconds: 5}
		p.Spec.Containers = append(p.Spec.Containers, &corev1.Container{
			Name: "worker", Image: "registry.local/shop/worker", Args: []string{"--queue=orders"},
			SecurityContext: restricted(),
		}, &corev1.Container{Name: "proxy", Image: "mesh/proxy:1.9", Ports: []*corev1.ContainerPort{{ContainerPort: 15001}}, SecurityContext: restricted()})
		p.Spec.Tolerations = []*corev1.Toleration{{Key: "dedicated", Operator: "Equal", Value: "shop", Effect: "NoSchedule"}}
		p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []*corev1.NodeSelectorTerm{{
				MatchExpressions: []*corev1.NodeSelectorRequirement{{Key: "zone", Operator: "In", Values: []string{"a", "b"}}}}}}}}
	})
	s := State{
		Namespace: nsWithLevel("restricted"),
		LimitRanges: []*corev1.LimitRange{{Metadata: &corev1.ObjectMeta{Name: "defaults", Namespace: "default"},
			Spec: &corev1.LimitRangeSpec{Limits: []*corev1.LimitRangeItem{{Type: "Container",
				Default: map[string]string{"cpu": "1", "memory": "256Mi"}, DefaultRequest: map[string]string{"cpu": "100m", "memory": "128Mi"}}}}}},
	}
	return p, s
}

func TestAdmitTypicalIsIdempotent(t *testing.T) {
	p, s := typical()
	before := proto.Clone(p)
	first := mustAdmit(t, p, s)
	if !proto.Equal(before, p) {
		t.Fatal("Admit modified its input")
	}
	if len(first.Mutations) < 10 {
		t.Fatalf("expected the typical pod to be mutated broadly, got %q", first.Mutations)
	}
	second := mustAdmit(t, first.Pod, s)
	if !proto.Equal(first.Pod, second.Pod) {
		t.Fatalf("Admit(Admit(p)) != Admit(p):\n%v\n%v", first.Pod, second.Pod)
	}
	if len(second.Mutations) != 0 {
		t.Fatalf("second pass mutated: %q", second.Mutations)
	}
	if got := first.Pod.Status.QosClass; got != podrules.QOSBurstable {
		t.Fatalf("qosClass = %s, want Burstable", got)
	}
	// Deterministic: the same input gives the same result.
	again := mustAdmit(t, before.(*corev1.Pod), s)
	if !proto.Equal(again.Pod, first.Pod) || len(again.Mutations) != len(first.Mutations) {
		t.Fatal("Admit is not deterministic")
	}
	for i := range again.Mutations {
		if again.Mutations[i] != first.Mutations[i] {
			t.Fatalf("mutation %d: %q vs %q", i, again.Mutations[i], first.Mutations[i])
		}
	}
}

func BenchmarkAdmit(b *testing.B) {
	p, s := typical()
	b.ReportAllocs()
	for b.Loop() {
		if res := Admit(p, s); !res.Allowed() {
			b.Fatal(res.Status.Message)
		}
	}
}

func BenchmarkAdmitAdmitted(b *testing.B) {
	p, s := typical()
	p = Admit(p, s).Pod
	b.ReportAllocs()
	for b.Loop() {
		if res := Admit(p, s); !res.Allowed() {
			b.Fatal(res.Status.Message)
		}
	}
}
