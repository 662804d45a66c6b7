package nodeagent

import (
	"context"
	"strings"
	"testing"

	corev1 "github.com/podflow/podflow/proto/corev1"
)

// mapSource is a volumeSource of fixed objects (a unit-test fake).
type mapSource struct {
	cms     map[string]*corev1.ConfigMap
	secrets map[string]*corev1.Secret
}

func (m mapSource) GetConfigMap(_ context.Context, _, name string) (*corev1.ConfigMap, error) {
	if cm, ok := m.cms[name]; ok {
		return cm, nil
	}
	return nil, ErrNotFound
}

func (m mapSource) GetSecret(_ context.Context, _, name string) (*corev1.Secret, error) {
	if s, ok := m.secrets[name]; ok {
		return s, nil
	}
	return nil, ErrNotFound
}

func projectedWorker(src *corev1.ProjectedVolumeSource) *worker {
	p := downwardPod()
	p.Spec.Volumes = []*corev1.Volume{{Name: "all-in-one", Projected: src}}
	w := downwardWorker(p)
	w.d.volumes = mapSource{
		cms: map[string]*corev1.ConfigMap{"app": {Data: map[string]string{"greeting": "hello", "colour": "blue"},
			BinaryData: map[string][]byte{"logo": {0xff, 0x00}}}},
		secrets: map[string]*corev1.Secret{"creds": {Data: map[string][]byte{"user": []byte("admin"), "pass": []byte("s3cret")}}},
	}
	return w
}

func mode(m int32) *int32 { return &m }

// A projected volume is kubelet's collectData: every source's files in one
// payload, each with its item's mode or the volume's defaultMode (0644
// when unset); a source without items projects every key.
func TestProjectedVolumeFiles(t *testing.T) {
	w := projectedWorker(&corev1.ProjectedVolumeSource{DefaultMode: mode(0o440), Sources: []*corev1.VolumeProjection{
		{ConfigMap: &corev1.ConfigMapProjection{Name: "app"}},
		{Secret: &corev1.SecretProjection{Name: "creds", Items: []*corev1.KeyToPath{
			{Key: "user", Path: "creds/user", Mode: mode(0o400)}}}},
		{DownwardApi: &corev1.DownwardAPIProjection{Items: []*corev1.DownwardAPIVolumeFile{
			{Path: "meta/labels", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels"}, Mode: mode(0o600)},
			{Path: "meta/name", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}}},
	}})
	vols, err := w.resolveVolumes(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]struct {
		data string
		mode uint32
	}{
		"greeting": {"hello", 0o440}, "colour": {"blue", 0o440}, "logo": {"\xff\x00", 0o440},
		"creds/user":  {"admin", 0o400},
		"meta/labels": {"app=\"web\"\ntier=\"front\"", 0o600}, "meta/name": {"web", 0o440},
	}
	got := vols[0]
	if len(got.Files) != len(want) || len(got.Modes) != len(want) {
		t.Errorf("files %v modes %v, want %d of each", got.Files, got.Modes, len(want))
	}
	for p, f := range want {
		if string(got.Files[p]) != f.data || got.Modes[p] != f.mode {
			t.Errorf("%s = %q mode %o, want %q mode %o", p, got.Files[p], got.Modes[p], f.data, f.mode)
		}
	}

	w = projectedWorker(&corev1.ProjectedVolumeSource{Sources: []*corev1.VolumeProjection{
		{ConfigMap: &corev1.ConfigMapProjection{Name: "app", Items: []*corev1.KeyToPath{{Key: "colour", Path: "c"}}}}}})
	vols, err = w.resolveVolumes(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(vols[0].Files) != 1 || string(vols[0].Files["c"]) != "blue" || vols[0].Modes["c"] != DefaultProjectedMode {
		t.Errorf("files %v modes %v, want only c=blue at 0644", vols[0].Files, vols[0].Modes)
	}
}

// A missing ConfigMap or Secret, or a key the items name that it lacks,
// fails the mount with kubelet's words unless the source is optional;
// each failing source is named.
func TestProjectedVolumeMissingSources(t *testing.T) {
	yes := true
	cases := []struct {
		name string
		src  *corev1.VolumeProjection
		want string // "" : mounts
	}{
		{"missing configmap", &corev1.VolumeProjection{ConfigMap: &corev1.ConfigMapProjection{Name: "nope"}}, `configmap "nope" not found`},
		{"missing secret", &corev1.VolumeProjection{Secret: &corev1.SecretProjection{Name: "nope"}}, `secret "nope" not found`},
		{"missing configmap key", &corev1.VolumeProjection{ConfigMap: &corev1.ConfigMapProjection{Name: "app",
			Items: []*corev1.KeyToPath{{Key: "size", Path: "s"}}}}, "configmap references non-existent config key: size"},
		{"missing secret key", &corev1.VolumeProjection{Secret: &corev1.SecretProjection{Name: "creds",
			Items: []*corev1.KeyToPath{{Key: "token", Path: "t"}}}}, "references non-existent secret key: token"},
		{"bad downward item", &corev1.VolumeProjection{DownwardApi: &corev1.DownwardAPIProjection{Items: []*corev1.DownwardAPIVolumeFile{
			{Path: "ip", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}}}}, "unsupported fieldPath: status.podIP"},
		{"optional missing configmap", &corev1.VolumeProjection{ConfigMap: &corev1.ConfigMapProjection{Name: "nope", Optional: &yes}}, ""},
		{"optional missing secret", &corev1.VolumeProjection{Secret: &corev1.SecretProjection{Name: "nope", Optional: &yes}}, ""},
		{"optional missing key", &corev1.VolumeProjection{Secret: &corev1.SecretProjection{Name: "creds", Optional: &yes,
			Items: []*corev1.KeyToPath{{Key: "token", Path: "t"}, {Key: "user", Path: "u"}}}}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := projectedWorker(&corev1.ProjectedVolumeSource{Sources: []*corev1.VolumeProjection{tc.src}})
			_, err := w.resolveVolumes(context.Background())
			if tc.want == "" {
				if err != nil {
					t.Fatalf("err = %v, want the volume mounted", err)
				}
				return
			}
			want := `MountVolume.SetUp failed for volume "all-in-one" : ` + tc.want
			if err == nil || message(err) != want {
				t.Fatalf("err = %v, want %q", err, want)
			}
			if c := CodeOf(err, ""); c != CodeMount {
				t.Errorf("code %v, want CodeMount", c)
			}
		})
	}
	w := projectedWorker(&corev1.ProjectedVolumeSource{Sources: []*corev1.VolumeProjection{
		{ConfigMap: &corev1.ConfigMapProjection{Name: "a"}}, {Secret: &corev1.SecretProjection{Name: "b"}}}})
	_, err := w.resolveVolumes(context.Background())
	if want := `[configmap "a" not found, secret "b" not found]`; err == nil || !strings.HasSuffix(err.Error(), want) {
		t.Errorf("err = %v, want both sources named as kubelet's aggregate: %s", err, want)
	}
}

// A configMap or secret volume whose items name a key the object lacks
// fails the mount with kubelet's words (its MakePayload) unless the
// volume is optional, as upstream's "Should fail non-optional pod
// creation due to the key in the configMap object does not exist"
// expects; the keys it has are projected at their paths.
func TestVolumeItemsMissingKey(t *testing.T) {
	yes := true
	cases := []struct {
		name string
		vol  *corev1.Volume
		want string // "": mounts
	}{
		{"configmap key", &corev1.Volume{Name: "v", ConfigMap: &corev1.ConfigMapVolumeSource{Name: "app",
			Items: []*corev1.KeyToPath{{Key: "colour", Path: "c"}, {Key: "size", Path: "s"}}}}, "configmap references non-existent config key: size"},
		{"secret key", &corev1.Volume{Name: "v", Secret: &corev1.SecretVolumeSource{SecretName: "creds",
			Items: []*corev1.KeyToPath{{Key: "token", Path: "t"}}}}, "references non-existent secret key: token"},
		{"optional configmap key", &corev1.Volume{Name: "v", ConfigMap: &corev1.ConfigMapVolumeSource{Name: "app", Optional: &yes,
			Items: []*corev1.KeyToPath{{Key: "colour", Path: "c"}, {Key: "size", Path: "s"}}}}, ""},
		{"optional secret key", &corev1.Volume{Name: "v", Secret: &corev1.SecretVolumeSource{SecretName: "creds", Optional: &yes,
			Items: []*corev1.KeyToPath{{Key: "user", Path: "u"}, {Key: "token", Path: "t"}}}}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := projectedWorker(nil)
			w.pod.Spec.Volumes = []*corev1.Volume{tc.vol}
			vols, err := w.resolveVolumes(context.Background())
			if tc.want != "" {
				want := `MountVolume.SetUp failed for volume "v" : ` + tc.want
				if err == nil || message(err) != want || CodeOf(err, "") != CodeMount {
					t.Fatalf("err = %v, want %q (CodeMount)", err, want)
				}
				return
			}
			if err != nil {
				t.Fatalf("err = %v, want the volume mounted", err)
			}
			if len(vols[0].Files) != 1 || (string(vols[0].Files["c"]) != "blue" && string(vols[0].Files["u"]) != "admin") {
				t.Errorf("files %v, want only the key the object has", vols[0].Files)
			}
		})
	}
}
