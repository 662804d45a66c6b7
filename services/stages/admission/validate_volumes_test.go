package admission

import (
	"slices"
	"strings"
	"testing"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/eventsv1"
)

func dfield(path, fp string) *corev1.DownwardAPIVolumeFile {
	return &corev1.DownwardAPIVolumeFile{Path: path, FieldRef: &corev1.ObjectFieldSelector{FieldPath: fp}}
}

func dres(path, ctr, r, div string) *corev1.DownwardAPIVolumeFile {
	return &corev1.DownwardAPIVolumeFile{Path: path, ResourceFieldRef: &corev1.ResourceFieldSelector{ContainerName: ctr, Resource: r, Divisor: div}}
}

func i32(v int32) *int32 { return &v }

func i64(v int64) *int64 { return &v }

// The downwardAPI, projected, configMap and secret volumes' items are
// checked at admission as kube-apiserver checks them: each bad item is
// refused 422, the cause naming the item.
func TestValidateFileVolumeItems(t *testing.T) {
	downward := func(items ...*corev1.DownwardAPIVolumeFile) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			p.Spec.Volumes = []*corev1.Volume{{Name: "podinfo", DownwardApi: &corev1.DownwardAPIVolumeSource{Items: items}}}
		}
	}
	projected := func(src ...*corev1.VolumeProjection) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			p.Spec.Volumes = []*corev1.Volume{{Name: "all", Projected: &corev1.ProjectedVolumeSource{Sources: src}}}
		}
	}
	const d = "spec.volumes[0].downwardAPI.items"
	const s = "spec.volumes[0].projected.sources"
	tests := []struct {
		name  string
		given func(*corev1.Pod)
		want  []string // "CauseType field" of every cause, in order
	}{
		{"downwardAPI valid", downward(dfield("name", "metadata.name"), dfield("app", "metadata.labels['app']"),
			dres("cpu", "app", "limits.cpu", "1m"), dres("mem", "app", "requests.memory", "1Mi")), nil},
		{"downwardAPI absolute path", downward(dfield("ok", "metadata.name"), dfield("/etc/x", "metadata.name")), []string{"FieldValueInvalid " + d + "[1].path"}},
		{"downwardAPI dot-dot", downward(dfield("a/../b", "metadata.name")), []string{"FieldValueInvalid " + d + "[0].path"}},
		{"downwardAPI ..data", downward(dfield("..data", "metadata.name")), []string{"FieldValueInvalid " + d + "[0].path"}},
		{"downwardAPI empty path", downward(dfield("", "metadata.name")), []string{"FieldValueRequired " + d + "[0].path"}},
		{"downwardAPI status field", downward(dfield("ip", "status.podIP")), []string{"FieldValueNotSupported " + d + "[0].fieldRef.fieldPath"}},
		{"downwardAPI unknown field", downward(dfield("x", "metadata.bogus")), []string{"FieldValueInvalid " + d + "[0].fieldRef.fieldPath"}},
		{"downwardAPI subscript of name", downward(dfield("x", "metadata.name['a']")), []string{"FieldValueInvalid " + d + "[0].fieldRef.fieldPath"}},
		{"downwardAPI bad label key", downward(dfield("x", "metadata.labels['a b']")), []string{"FieldValueInvalid " + d + "[0].fieldRef"}},
		{"downwardAPI neither", downward(&corev1.DownwardAPIVolumeFile{Path: "x"}), []string{"FieldValueRequired " + d + "[0]"}},
		{"downwardAPI both", downward(&corev1.DownwardAPIVolumeFile{Path: "x", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"},
			ResourceFieldRef: &corev1.ResourceFieldSelector{ContainerName: "app", Resource: "limits.cpu"}}), []string{"FieldValueInvalid " + d + "[0]"}},
		{"downwardAPI no container", downward(dres("cpu", "", "limits.cpu", "")), []string{"FieldValueRequired " + d + "[0].resourceFieldRef.containerName"}},
		{"downwardAPI unknown resource", downward(dres("gpu", "app", "limits.gpu", "")), []string{"FieldValueNotSupported " + d + "[0].resourceFieldRef.resource"}},
		{"downwardAPI cpu divisor", downward(dres("cpu", "app", "limits.cpu", "1Mi")), []string{"FieldValueInvalid " + d + "[0].resourceFieldRef.divisor"}},
		{"downwardAPI memory divisor", downward(dres("mem", "app", "limits.memory", "3")), []string{"FieldValueInvalid " + d + "[0].resourceFieldRef.divisor"}},
		{"downwardAPI divisor 0 (unset)", downward(dres("cpu", "app", "limits.cpu", "0"), dres("mem", "app", "requests.memory", "0")), nil},
		{"downwardAPI modes", func(p *corev1.Pod) {
			f := dfield("x", "metadata.name")
			f.Mode = i32(0o1000)
			downward(f)(p)
			p.Spec.Volumes[0].DownwardApi.DefaultMode = i32(-1)
		}, []string{"FieldValueInvalid spec.volumes[0].downwardAPI.defaultMode", "FieldValueInvalid " + d + "[0].mode"}},
		{"projected valid", projected(
			&corev1.VolumeProjection{ConfigMap: &corev1.ConfigMapProjection{Name: "cm", Items: []*corev1.KeyToPath{{Key: "k", Path: "a"}}}},
			&corev1.VolumeProjection{Secret: &corev1.SecretProjection{Name: "s"}},
			&corev1.VolumeProjection{DownwardApi: &corev1.DownwardAPIProjection{Items: []*corev1.DownwardAPIVolumeFile{dfield("name", "metadata.name")}}}), nil},
		{"projected duplicate path", projected(
			&corev1.VolumeProjection{ConfigMap: &corev1.ConfigMapProjection{Name: "cm", Items: []*corev1.KeyToPath{{Key: "k", Path: "a"}}}},
			&corev1.VolumeProjection{DownwardApi: &corev1.DownwardAPIProjection{Items: []*corev1.DownwardAPIVolumeFile{dfield("a", "metadata.name")}}}),
			[]string{"FieldValueInvalid spec.volumes[0].projected"}},
		{"projected two kinds in one source", projected(&corev1.VolumeProjection{ConfigMap: &corev1.ConfigMapProjection{Name: "cm"}, Secret: &corev1.SecretProjection{Name: "s"}}),
			[]string{"FieldValueForbidden " + s + "[0]"}},
		{"projected bad items", projected(
			&corev1.VolumeProjection{Secret: &corev1.SecretProjection{Items: []*corev1.KeyToPath{{Key: "", Path: "../x", Mode: i32(0o1000)}}}},
			&corev1.VolumeProjection{DownwardApi: &corev1.DownwardAPIProjection{Items: []*corev1.DownwardAPIVolumeFile{dfield("ip", "status.hostIP")}}}),
			[]string{"FieldValueRequired " + s + "[0].secret.name", "FieldValueRequired " + s + "[0].secret.items[0].key",
				"FieldValueInvalid " + s + "[0].secret.items[0].path", "FieldValueInvalid " + s + "[0].secret.items[0].mode",
				"FieldValueNotSupported " + s + "[1].downwardAPI.items[0].fieldRef.fieldPath"}},
		{"projected serviceAccountToken valid", projected(
			&corev1.VolumeProjection{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token"}},
			&corev1.VolumeProjection{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "vault/token", Audience: "vault", ExpirationSeconds: i64(600)}}), nil},
		{"projected serviceAccountToken bad", projected(
			&corev1.VolumeProjection{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "", ExpirationSeconds: i64(599)}},
			&corev1.VolumeProjection{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "../t", ExpirationSeconds: i64(1<<32 + 1)}},
			&corev1.VolumeProjection{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "t"}, Secret: &corev1.SecretProjection{Name: "s"}},
			&corev1.VolumeProjection{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "long", Audience: strings.Repeat("a", 1025)}}),
			[]string{"FieldValueInvalid " + s + "[0].serviceAccountToken.expirationSeconds", "FieldValueRequired " + s + "[0].serviceAccountToken.path",
				"FieldValueInvalid " + s + "[1].serviceAccountToken.expirationSeconds", "FieldValueInvalid " + s + "[1].serviceAccountToken.path",
				"FieldValueForbidden " + s + "[2]", "FieldValueTooLong " + s + "[3].serviceAccountToken.audience"}},
		{"projected defaultMode", func(p *corev1.Pod) {
			projected(&corev1.VolumeProjection{Secret: &corev1.SecretProjection{Name: "s"}})(p)
			p.Spec.Volumes[0].Projected.DefaultMode = i32(0o2000)
		}, []string{"FieldValueInvalid spec.volumes[0].projected.defaultMode"}},
		{"configMap and secret items", func(p *corev1.Pod) {
			p.Spec.Volumes = []*corev1.Volume{
				{Name: "c", ConfigMap: &corev1.ConfigMapVolumeSource{Name: "cm", DefaultMode: i32(0o1000), Items: []*corev1.KeyToPath{{Key: "k", Path: "/abs"}}}},
				{Name: "s", Secret: &corev1.SecretVolumeSource{SecretName: "s", Items: []*corev1.KeyToPath{{Key: "k", Path: ""}}}},
			}
		}, []string{"FieldValueInvalid spec.volumes[0].configMap.defaultMode", "FieldValueInvalid spec.volumes[0].configMap.items[0].path",
			"FieldValueRequired spec.volumes[1].secret.items[0].path"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res := Admit(pod(tc.given), State{})
			if len(tc.want) == 0 {
				if res.Status != nil {
					t.Fatalf("rejected: %s", res.Status.Message)
				}
				return
			}
			if res.Status.GetCode() != 422 || res.Status.GetReason() != eventsv1.ReasonInvalid {
				t.Fatalf("status = %v, want 422 Invalid", res.Status)
			}
			if got := causeFields(res.Status); !slices.Equal(got, tc.want) {
				t.Fatalf("causes\n  %s\nwant\n  %s\nmessage: %s", strings.Join(got, "\n  "), strings.Join(tc.want, "\n  "), res.Status.Message)
			}
		})
	}
	st := Admit(pod(downward(dfield("ok", "metadata.name"), dfield("ip", "status.podIP"))), State{}).Status
	want := `Pod "web" is invalid: spec.volumes[0].downwardAPI.items[1].fieldRef.fieldPath: Unsupported value: "status.podIP": supported values: "metadata.annotations", "metadata.labels", "metadata.name", "metadata.namespace", "metadata.uid"`
	if st.GetMessage() != want {
		t.Errorf("message\n got %s\nwant %s", st.GetMessage(), want)
	}
}

// csi volumes are accepted and checked as kube-apiserver checks them
// (validateCSIVolumeSource): the driver's name, the nodePublishSecretRef's.
func TestValidateCSIVolumes(t *testing.T) {
	csi := func(src *corev1.CSIVolumeSource) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			p.Spec.Volumes = []*corev1.Volume{{Name: "inline", Csi: src}}
			p.Spec.Containers[0].VolumeMounts = []*corev1.VolumeMount{{Name: "inline", MountPath: "/mnt/inline"}}
		}
	}
	ro, fs := true, "ext4"
	const c = "spec.volumes[0].csi"
	tests := []struct {
		name  string
		given func(*corev1.Pod)
		want  []string
	}{
		{"the conformance test's", csi(&corev1.CSIVolumeSource{Driver: "e2e.example.com"}), nil},
		{"every field", csi(&corev1.CSIVolumeSource{Driver: "Hostpath.CSI.k8s.io", ReadOnly: &ro, FsType: &fs,
			VolumeAttributes: map[string]string{"size": "1Gi"}, NodePublishSecretRef: &corev1.LocalObjectReference{Name: "publish"}}), nil},
		{"no driver", csi(&corev1.CSIVolumeSource{}), []string{"FieldValueRequired " + c + ".driver", "FieldValueInvalid " + c + ".driver"}},
		{"driver not a DNS subdomain", csi(&corev1.CSIVolumeSource{Driver: "e2e_example"}), []string{"FieldValueInvalid " + c + ".driver"}},
		{"driver too long", csi(&corev1.CSIVolumeSource{Driver: strings.Repeat("d", 64)}), []string{"FieldValueTooLong " + c + ".driver"}},
		{"secret ref without a name", csi(&corev1.CSIVolumeSource{Driver: "d.example.com", NodePublishSecretRef: &corev1.LocalObjectReference{}}),
			[]string{"FieldValueRequired " + c + ".nodePublishSecretRef.name"}},
		{"secret ref bad name", csi(&corev1.CSIVolumeSource{Driver: "d.example.com", NodePublishSecretRef: &corev1.LocalObjectReference{Name: "Bad_Name"}}),
			[]string{"FieldValueInvalid " + c + ".name"}},
		{"csi and emptyDir", func(p *corev1.Pod) {
			csi(&corev1.CSIVolumeSource{Driver: "d.example.com"})(p)
			p.Spec.Volumes[0].EmptyDir = &corev1.EmptyDirVolumeSource{}
		}, []string{"FieldValueForbidden " + c}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res := Admit(pod(tc.given), State{})
			if len(tc.want) == 0 {
				if res.Status != nil {
					t.Fatalf("rejected: %s", res.Status.Message)
				}
				return
			}
			if res.Status.GetCode() != 422 || res.Status.GetReason() != eventsv1.ReasonInvalid {
				t.Fatalf("status = %v, want 422 Invalid", res.Status)
			}
			if got := causeFields(res.Status); !slices.Equal(got, tc.want) {
				t.Fatalf("causes\n  %s\nwant\n  %s\nmessage: %s", strings.Join(got, "\n  "), strings.Join(tc.want, "\n  "), res.Status.Message)
			}
		})
	}
	st := Admit(pod(csi(&corev1.CSIVolumeSource{Driver: "e2e_example"})), State{}).Status
	want := `Pod "web" is invalid: spec.volumes[0].csi.driver: Invalid value: "e2e_example": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')`
	if st.GetMessage() != want {
		t.Errorf("message\n got %s\nwant %s", st.GetMessage(), want)
	}
}
