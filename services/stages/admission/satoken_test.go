package admission

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/podflow/podflow/proto/corev1"
)

func account(name string, automount *bool) *corev1.ServiceAccount {
	return &corev1.ServiceAccount{Metadata: &corev1.ObjectMeta{Name: name, Namespace: "default"}, AutomountServiceAccountToken: automount}
}

// tokenMounts lists, per container (init containers first), whether it
// mounts a kube-api-access- volume at the token path.
func tokenMounts(p *corev1.Pod) []bool {
	var out []bool
	for _, c := range append(append([]*corev1.Container{}, p.Spec.InitContainers...), p.Spec.Containers...) {
		has := false
		for _, vm := range c.VolumeMounts {
			if vm.MountPath == DefaultAPITokenMountPath && strings.HasPrefix(vm.Name, ServiceAccountVolumePrefix) && vm.ReadOnly {
				has = true
			}
		}
		out = append(out, has)
	}
	return out
}

func tokenVolumes(p *corev1.Pod) []*corev1.Volume {
	var out []*corev1.Volume
	for _, v := range p.Spec.Volumes {
		if strings.HasPrefix(v.Name, ServiceAccountVolumePrefix) {
			out = append(out, v)
		}
	}
	return out
}

// The cases of the upstream conformance test "ServiceAccounts should allow
// opting out of API token automount": the pod's choice wins, then the
// account's, else the token is mounted.
func TestServiceAccountTokenAutomount(t *testing.T) {
	yes, no := proto.Bool(true), proto.Bool(false)
	accounts := map[string]*corev1.ServiceAccount{
		"default": account("default", nil), "mount": account("mount", yes), "nomount": account("nomount", no),
	}
	tests := []struct {
		account  string
		pod      *bool
		expected bool
	}{
		{"default", nil, true},
		{"mount", nil, true},
		{"nomount", nil, false},
		{"default", yes, true},
		{"mount", yes, true},
		{"nomount", yes, true},
		{"default", no, false},
		{"mount", no, false},
		{"nomount", no, false},
	}
	for _, tc := range tests {
		name := tc.account + "/pod=" + map[*bool]string{nil: "unset", yes: "true", no: "false"}[tc.pod]
		t.Run(name, func(t *testing.T) {
			p := pod(func(p *corev1.Pod) {
				p.Spec.ServiceAccountName = tc.account
				p.Spec.AutomountServiceAccountToken = tc.pod
			})
			res := mustAdmit(t, p, State{ServiceAccount: accounts[tc.account]})
			vols := tokenVolumes(res.Pod)
			if got := tokenMounts(res.Pod)[0]; got != tc.expected || (len(vols) == 1) != tc.expected {
				t.Fatalf("mounted=%v volumes=%v, expected %v", got, vols, tc.expected)
			}
		})
	}
}

// The volume is kube's TokenVolumeSource, mounted in init and app
// containers alike, with a name that the pod's uid decides.
func TestServiceAccountTokenVolume(t *testing.T) {
	given := pod(func(p *corev1.Pod) {
		p.Metadata.Uid = "8d4c2f9e-1b7a-4c55-9a43-0f0e7a1d2c3b"
		p.Spec.InitContainers = []*corev1.Container{{Name: "init", Image: "registry.local/init:1", SecurityContext: app(p).SecurityContext}}
	})
	res := mustAdmit(t, given, State{ServiceAccount: account("default", nil)})
	vols := tokenVolumes(res.Pod)
	if len(vols) != 1 {
		t.Fatalf("token volumes %v, expected one", vols)
	}
	v := vols[0]
	if len(v.Name) != len(ServiceAccountVolumePrefix)+5 {
		t.Errorf("volume name %q, expected %s plus 5 characters", v.Name, ServiceAccountVolumePrefix)
	}
	if want := TokenVolume(v.Name); !proto.Equal(v, want) {
		t.Errorf("volume\n%v\nexpected\n%v", v, want)
	}
	src := v.Projected.Sources
	if src[0].ServiceAccountToken.GetPath() != "token" || src[0].ServiceAccountToken.GetExpirationSeconds() != 3607 ||
		src[1].ConfigMap.GetName() != "kube-root-ca.crt" || src[1].ConfigMap.Items[0].Key != "ca.crt" ||
		src[2].DownwardApi.Items[0].FieldRef.FieldPath != "metadata.namespace" || src[2].DownwardApi.Items[0].Path != "namespace" ||
		v.Projected.GetDefaultMode() != 0o644 {
		t.Errorf("projected sources %v", v.Projected)
	}
	if got := tokenMounts(res.Pod); len(got) != 2 || !got[0] || !got[1] {
		t.Errorf("mounted per container %v, expected init and app", got)
	}
	again := mustAdmit(t, given, State{ServiceAccount: account("default", nil)})
	if tokenVolumes(again.Pod)[0].Name != v.Name {
		t.Errorf("a second admission named the volume %q, the first %q", tokenVolumes(again.Pod)[0].Name, v.Name)
	}
	other := pod(func(p *corev1.Pod) { p.Metadata.Uid = "0c1d6a52-7f3e-4e8b-b2a9-5d64f1c0e7aa" })
	if n := tokenVolumes(mustAdmit(t, other, State{ServiceAccount: account("default", nil)}).Pod)[0].Name; n == v.Name {
		t.Errorf("two pods' volumes share the name %q", n)
	}
	// Admitting the admitted pod changes nothing.
	twice := mustAdmit(t, res.Pod, State{ServiceAccount: account("default", nil)})
	if !proto.Equal(twice.Pod, res.Pod) || len(twice.Mutations) != 0 {
		t.Errorf("admitting again changed the pod: %v", twice.Mutations)
	}
}

// A container that mounts something of its own at the token path keeps
// it; a pod whose account does not exist gets no token (its node could
// not request one).
func TestServiceAccountTokenLeftAlone(t *testing.T) {
	own := pod(func(p *corev1.Pod) {
		p.Spec.Volumes = []*corev1.Volume{{Name: "mine", EmptyDir: &corev1.EmptyDirVolumeSource{}}}
		app(p).VolumeMounts = []*corev1.VolumeMount{{Name: "mine", MountPath: DefaultAPITokenMountPath}}
	})
	res := mustAdmit(t, own, State{ServiceAccount: account("default", nil)})
	if len(tokenVolumes(res.Pod)) != 0 || len(app(res.Pod).VolumeMounts) != 1 || app(res.Pod).VolumeMounts[0].Name != "mine" {
		t.Errorf("a pod mounting its own token path got %v / %v", res.Pod.Spec.Volumes, app(res.Pod).VolumeMounts)
	}
	for name, sa := range map[string]*corev1.ServiceAccount{
		"no account":          nil,
		"another account":     account("builder", nil),
		"another namespace's": {Metadata: &corev1.ObjectMeta{Name: "default", Namespace: "other"}},
	} {
		res := mustAdmit(t, pod(), State{ServiceAccount: sa})
		if len(tokenVolumes(res.Pod)) != 0 || tokenMounts(res.Pod)[0] {
			t.Errorf("%s: token mounted: %v", name, res.Pod.Spec.Volumes)
		}
	}
}
