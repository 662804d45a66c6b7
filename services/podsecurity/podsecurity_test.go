package podsecurity

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/podflow/podflow/proto/corev1"
)

func pod(mod ...func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{Metadata: &corev1.ObjectMeta{Name: "web", Namespace: "ns"}, Spec: &corev1.PodSpec{
		InitContainers: []*corev1.Container{{Name: "init", Image: "init:1"}},
		Containers:     []*corev1.Container{{Name: "app", Image: "app:1"}},
	}}
	for _, m := range mod {
		m(p)
	}
	return p
}

func TestSignificantUpdate(t *testing.T) {
	old := pod(func(p *corev1.Pod) {
		p.Spec.EphemeralContainers = []*corev1.EphemeralContainer{{Name: "dbg", Image: "busybox"}}
	})
	for _, tc := range []struct {
		name string
		mod  func(*corev1.Pod)
		want bool
	}{
		{"nothing", func(*corev1.Pod) {}, false},
		{"labels", func(p *corev1.Pod) { p.Metadata.Labels = map[string]string{"a": "b"} }, false},
		{"tolerations", func(p *corev1.Pod) { p.Spec.Tolerations = []*corev1.Toleration{{Key: "k"}} }, false},
		{"an image", func(p *corev1.Pod) { p.Spec.Containers[0].Image = "app:2" }, true},
		{"an init image", func(p *corev1.Pod) { p.Spec.InitContainers[0].Image = "init:2" }, true},
		{"a container added", func(p *corev1.Pod) { p.Spec.Containers = append(p.Spec.Containers, &corev1.Container{Name: "x"}) }, true},
		{"an ephemeral container added", func(p *corev1.Pod) {
			p.Spec.EphemeralContainers = append(p.Spec.EphemeralContainers, &corev1.EphemeralContainer{Name: "x", Image: "busybox"})
		}, true},
		{"an ephemeral image", func(p *corev1.Pod) { p.Spec.EphemeralContainers[0].Image = "other" }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			next := proto.CloneOf(old)
			tc.mod(next)
			if got := SignificantUpdate(old, next); got != tc.want {
				t.Fatalf("SignificantUpdate = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestEnforced(t *testing.T) {
	ns := func(labels map[string]string) *corev1.Namespace {
		return &corev1.Namespace{Metadata: &corev1.ObjectMeta{Name: "ns", Labels: labels}}
	}
	for _, tc := range []struct {
		name string
		ns   *corev1.Namespace
		def  Level
		want string
	}{
		{"no namespace, no default", nil, "", "privileged:latest"},
		{"no label: the default", ns(nil), LevelBaseline, "baseline:latest"},
		{"the label wins", ns(map[string]string{LabelEnforce: "privileged"}), LevelRestricted, "privileged:latest"},
		{"a pinned version", ns(map[string]string{LabelEnforce: "baseline", LabelEnforceVersion: "v1.30"}), "", "baseline:v1.30"},
		{"an unknown level fails closed", ns(map[string]string{LabelEnforce: "strict"}), "", "restricted:latest"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Enforced(tc.ns, tc.def); got.String() != tc.want {
				t.Fatalf("Enforced = %s, want %s", got, tc.want)
			}
		})
	}
}

// TestCheckEphemeralContainers: the upstream checks walk ephemeral
// containers too, which podflow's own copy of them once did not.
func TestCheckEphemeralContainers(t *testing.T) {
	p := pod(func(p *corev1.Pod) {
		p.Spec.EphemeralContainers = []*corev1.EphemeralContainer{{Name: "dbg", Image: "busybox",
			SecurityContext: &corev1.SecurityContext{Privileged: proto.Bool(true),
				Capabilities: &corev1.Capabilities{Add: []string{"SYS_ADMIN"}}}}}
	})
	st := Check(p, Latest(LevelBaseline))
	want := `pods "web" is forbidden: violates PodSecurity "baseline:latest": ` +
		`non-default capabilities (container "dbg" must not include "SYS_ADMIN" in securityContext.capabilities.add), ` +
		`privileged (container "dbg" must not set securityContext.privileged=true)`
	if st.GetCode() != 403 || st.GetMessage() != want {
		t.Fatalf("status %v\nwant message %s", st, want)
	}
	if st := Check(p, Latest(LevelPrivileged)); st != nil {
		t.Fatalf("privileged: %v", st)
	}
	if _, err := ParseLevel("strict"); err == nil || !strings.Contains(err.Error(), "privileged, baseline, restricted") {
		t.Fatalf("ParseLevel(strict) = %v", err)
	}
}

// BenchmarkCheck is the cost Pod Security adds to a pod's admission: the
// conversion to the Kubernetes form and upstream's checks.
func BenchmarkCheck(b *testing.B) {
	p := pod(func(p *corev1.Pod) {
		p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{AllowPrivilegeEscalation: proto.Bool(false),
			RunAsNonRoot: proto.Bool(true), Capabilities: &corev1.Capabilities{Drop: []string{"ALL"}},
			SeccompProfile: &corev1.SeccompProfile{Type: "RuntimeDefault"}}
		p.Spec.InitContainers = nil
	})
	for _, level := range []Level{LevelBaseline, LevelRestricted} {
		b.Run(string(level), func(b *testing.B) {
			lv := Latest(level)
			for b.Loop() {
				if st := Check(p, lv); st != nil {
					b.Fatal(st)
				}
			}
		})
	}
}

// TestCSIVolumes: restricted (and so baseline) allows inline csi volumes,
// as upstream's restrictedVolumes check; a hostPath volume beside it is
// still refused, and the refusal names only it.
func TestCSIVolumes(t *testing.T) {
	p := pod(func(p *corev1.Pod) {
		p.Spec.InitContainers = nil
		p.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsNonRoot: proto.Bool(true),
			SeccompProfile: &corev1.SeccompProfile{Type: "RuntimeDefault"}}
		p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{AllowPrivilegeEscalation: proto.Bool(false),
			Capabilities: &corev1.Capabilities{Drop: []string{"ALL"}}}
		p.Spec.Volumes = []*corev1.Volume{{Name: "inline", Csi: &corev1.CSIVolumeSource{Driver: "e2e.example.com",
			NodePublishSecretRef: &corev1.LocalObjectReference{Name: "publish"}}}}
	})
	for _, level := range []Level{LevelBaseline, LevelRestricted} {
		if st := Check(p, Latest(level)); st != nil {
			t.Errorf("%s refused a csi volume: %s", level, st.GetMessage())
		}
	}
	p.Spec.Volumes = append(p.Spec.Volumes, &corev1.Volume{Name: "host", HostPath: &corev1.HostPathVolumeSource{Path: "/etc"}})
	st := Check(p, Latest(LevelRestricted))
	want := `pods "web" is forbidden: violates PodSecurity "restricted:latest": ` +
		`restricted volume types (volume "host" uses restricted volume type "hostPath")`
	if st.GetMessage() != want {
		t.Errorf("message\n got %s\nwant %s", st.GetMessage(), want)
	}
}
