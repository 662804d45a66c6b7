package admission

import (
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/manifest"
)

// TestRefusedFieldsOnTheBus: a pod that reaches admission over the bus
// (podflow apply, a proto client, the HTTPS door) with a field the proto
// holds but podflow does not honour is refused 422 naming the field path;
// the same fields at their Kubernetes default, or where podflow honours
// them (hostPort), are admitted.
func TestRefusedFieldsOnTheBus(t *testing.T) {
	tests := []struct {
		name    string
		edit    func(*corev1.Pod)
		refused []string // cause fields; nil = admitted
		message string
	}{
		{"persistentVolumeClaim", func(p *corev1.Pod) {
			p.Spec.Volumes = []*corev1.Volume{{Name: "d", PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "pvc"}}}
		}, []string{"spec.volumes[0].persistentVolumeClaim"}, "spec.volumes[0].persistentVolumeClaim: Forbidden: podflow does not support PersistentVolumeClaims: podflow has no storage provisioner"},
		{"hostPort without hostNetwork (honoured: the node's nftables)", func(p *corev1.Pod) {
			app(p).Ports = []*corev1.ContainerPort{{ContainerPort: 80, HostPort: 8080, Protocol: "TCP", HostIp: "127.0.0.1"}}
		}, nil, ""},
		{"hostPort with hostNetwork", func(p *corev1.Pod) {
			p.Spec.HostNetwork = true
			app(p).Ports = []*corev1.ContainerPort{{ContainerPort: 8080, HostPort: 8080, Protocol: "TCP"}}
		}, nil, ""},
		{"emptyDir sizeLimit (honoured)", func(p *corev1.Pod) {
			p.Spec.Volumes = []*corev1.Volume{{Name: "d", EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: "1Gi"}}}
		}, nil, ""},
		{"automountServiceAccountToken and enableServiceLinks true (honoured)", func(p *corev1.Pod) {
			p.Spec.EnableServiceLinks = proto.Bool(true)
			p.Spec.AutomountServiceAccountToken = proto.Bool(true)
		}, nil, ""},
		{"their false (honoured)", func(p *corev1.Pod) {
			p.Spec.EnableServiceLinks = proto.Bool(false)
			p.Spec.AutomountServiceAccountToken = proto.Bool(false)
			p.Spec.Priority = proto.Int32(0)
		}, nil, ""},
		{"terminationMessagePath other than the default (honoured)", func(p *corev1.Pod) {
			app(p).TerminationMessagePath = "/tmp/msg"
			app(p).TerminationMessagePolicy = "FallbackToLogsOnError"
		}, nil, ""},
		{"terminationMessagePath default", func(p *corev1.Pod) {
			app(p).TerminationMessagePath = "/dev/termination-log"
		}, nil, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res := Admit(pod(tc.edit), State{})
			if tc.refused == nil {
				if !res.Allowed() {
					t.Fatalf("rejected: %s", res.Status.GetMessage())
				}
				return
			}
			st := res.Status
			if st.GetCode() != 422 || st.GetReason() != "Invalid" {
				t.Fatalf("status %v, want 422 Invalid", st)
			}
			var want []string
			for _, f := range tc.refused {
				want = append(want, "FieldValueForbidden "+f)
			}
			if got := causeFields(st); !slices.Equal(got, want) {
				t.Errorf("causes %q, want %q", got, want)
			}
			if !strings.Contains(st.GetMessage(), tc.message) || !strings.HasPrefix(st.GetMessage(), `Pod "web" is invalid: `) {
				t.Errorf("message %q, want it to contain %q", st.GetMessage(), tc.message)
			}
		})
	}
}

// BenchmarkRefusedPodFields is admission's share of the field rule on a
// typical admitted pod.
func BenchmarkRefusedPodFields(b *testing.B) {
	p, s := typical()
	p = Admit(p, s).Pod
	b.ReportAllocs()
	for b.Loop() {
		if errs := manifest.RefusedPodFields(p); len(errs) > 0 {
			b.Fatal(errs)
		}
	}
}
