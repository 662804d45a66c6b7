package nodeagent

import (
	"context"
	"strings"
	"testing"

	corev1 "github.com/podflow/podflow/proto/corev1"
)

func downwardPod(items ...*corev1.DownwardAPIVolumeFile) *corev1.Pod {
	return &corev1.Pod{
		Metadata: &corev1.ObjectMeta{Name: "web", Namespace: "shop", Uid: "uid-1",
			Labels:      map[string]string{"app": "web", "tier": "front"},
			Annotations: map[string]string{"build": "42"}},
		Spec: &corev1.PodSpec{Containers: []*corev1.Container{{Name: "app",
			Resources: &corev1.ResourceRequirements{
				Limits:   map[string]string{"cpu": "1500m"},
				Requests: map[string]string{"memory": "64Mi"}}}},
			Volumes: []*corev1.Volume{{Name: "podinfo", DownwardApi: &corev1.DownwardAPIVolumeSource{Items: items}}}},
	}
}

func field(path, fp string) *corev1.DownwardAPIVolumeFile {
	return &corev1.DownwardAPIVolumeFile{Path: path, FieldRef: &corev1.ObjectFieldSelector{FieldPath: fp}}
}

func res(path, ctr, r, div string) *corev1.DownwardAPIVolumeFile {
	return &corev1.DownwardAPIVolumeFile{Path: path, ResourceFieldRef: &corev1.ResourceFieldSelector{ContainerName: ctr, Resource: r, Divisor: div}}
}

func downwardWorker(p *corev1.Pod) *worker {
	return &worker{pod: p, d: &workerDeps{allocatable: func(name string) (string, bool) {
		q, ok := map[string]string{"cpu": "4", "memory": "8Gi"}[name]
		return q, ok
	}}}
}

// The files of a downwardAPI volume hold what kubelet's CollectData puts
// there: fieldRef values (maps as sorted k="v" lines, no final newline),
// resourceFieldRef values divided by the divisor and rounded up, unset
// limits defaulting to the node's allocatable.
func TestDownwardAPIVolumeFiles(t *testing.T) {
	p := downwardPod(
		field("name", "metadata.name"), field("namespace", "metadata.namespace"),
		field("uid", "metadata.uid"), field("labels", "metadata.labels"),
		field("annotations", "metadata.annotations"), field("meta/app", "metadata.labels['app']"),
		res("cpu_limit", "app", "limits.cpu", "1m"), res("cpu_cores", "app", "limits.cpu", ""),
		res("mem_request", "app", "requests.memory", "1Mi"), res("mem_limit", "app", "limits.memory", "1Gi"),
		res("cpu_zero", "app", "limits.cpu", "0"), // client-go's unset divisor
	)
	vols, err := downwardWorker(p).resolveVolumes(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"name": "web", "namespace": "shop", "uid": "uid-1",
		"labels":      "app=\"web\"\ntier=\"front\"",
		"annotations": "build=\"42\"", "meta/app": "web",
		"cpu_limit": "1500", "cpu_cores": "2", "mem_request": "64", "mem_limit": "8", "cpu_zero": "2",
	}
	got := vols[0].Files
	if len(got) != len(want) {
		t.Errorf("files %v, want %d of them", got, len(want))
	}
	for k, v := range want {
		if string(got[k]) != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
}

// An item the atomic writer or kubelet would refuse fails the mount with
// FailedMount naming the problem; every bad item is named.
func TestDownwardAPIVolumeRefusesBadItems(t *testing.T) {
	cases := []struct {
		name string
		item *corev1.DownwardAPIVolumeFile
		want string
	}{
		{"absolute path", field("/etc/passwd", "metadata.name"), "must be relative path"},
		{"dot-dot element", field("a/../../b", "metadata.name"), "must not contain '..'"},
		{"dot-dot start", field("..data", "metadata.name"), "must not start with '..'"},
		{"empty path", field("", "metadata.name"), "must not be empty"},
		{"long segment", field(strings.Repeat("x", 256), "metadata.name"), "255 characters"},
		{"non-metadata field", field("ip", "status.podIP"), "unsupported fieldPath: status.podIP"},
		{"unknown field", field("x", "metadata.bogus"), "unsupported fieldPath: metadata.bogus"},
		{"resource without container", res("cpu", "", "limits.cpu", ""), "container  not found"},
		{"unknown container", res("cpu", "nope", "limits.cpu", ""), "container nope not found"},
		{"unknown resource", res("cpu", "app", "limits.gpu", ""), "unsupported container resource"},
		{"neither ref", &corev1.DownwardAPIVolumeFile{Path: "x"}, "neither fieldRef nor resourceFieldRef"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := downwardWorker(downwardPod(field("ok", "metadata.name"), tc.item)).resolveVolumes(context.Background())
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one containing %q", err, tc.want)
			}
			if !strings.Contains(err.Error(), `MountVolume.SetUp failed for volume "podinfo"`) {
				t.Errorf("err = %v, want kubelet's MountVolume.SetUp wording", err)
			}
			if c := CodeOf(err, ""); c != CodeMount {
				t.Errorf("code %v, want CodeMount", c)
			}
		})
	}
	_, err := downwardWorker(downwardPod(field("/a", "metadata.name"), field("b", "status.hostIP"))).resolveVolumes(context.Background())
	if err == nil || !strings.Contains(err.Error(), "relative") || !strings.Contains(err.Error(), "status.hostIP") {
		t.Errorf("err = %v, want both bad items named", err)
	}
}
