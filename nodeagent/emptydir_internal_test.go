package nodeagent

import (
	"context"
	"errors"
	"testing"

	corev1 "github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/podrules"
)

func memPod(limits ...string) *corev1.Pod {
	p := &corev1.Pod{Spec: &corev1.PodSpec{}}
	for i, l := range limits {
		c := &corev1.Container{Name: string(rune('a' + i))}
		if l != "" {
			c.Resources = &corev1.ResourceRequirements{Limits: map[string]string{"memory": l}}
		}
		p.Spec.Containers = append(p.Spec.Containers, c)
	}
	return p
}

// A memory emptyDir's tmpfs is sized as kubelet's
// calculateEmptyDirMemorySize: the node's allocatable memory, the pod's
// memory limit when every container has one and it is no larger, the
// sizeLimit when set and no larger still.
func TestEmptyDirMemorySize(t *testing.T) {
	const mi = 1 << 20
	alloc := map[string]string{"memory": "1Gi"}
	withInit := memPod("100Mi", "50Mi")
	withInit.Spec.InitContainers = []*corev1.Container{{Name: "init", Resources: &corev1.ResourceRequirements{Limits: map[string]string{"memory": "300Mi"}}}}
	tests := []struct {
		name        string
		pod         *corev1.Pod
		sizeLimit   string
		allocatable map[string]string
		want        int64
	}{
		{"node allocatable", memPod(), "", alloc, 1024 * mi},
		{"a container without a limit: allocatable", memPod("100Mi", ""), "", alloc, 1024 * mi},
		{"pod limit: the containers' sum", memPod("100Mi", "50Mi"), "", alloc, 150 * mi},
		{"pod limit: the largest init container", withInit, "", alloc, 300 * mi},
		{"pod limit above allocatable: allocatable", memPod("2Gi"), "", alloc, 1024 * mi},
		{"sizeLimit below the pod limit", memPod("100Mi"), "16Mi", alloc, 16 * mi},
		{"sizeLimit above the pod limit: the pod limit", memPod("100Mi"), "200Mi", alloc, 100 * mi},
		{"sizeLimit above allocatable: allocatable", memPod(), "2Gi", alloc, 1024 * mi},
		{"nothing known but sizeLimit", memPod(), "8Mi", nil, 8 * mi},
		{"nothing known", memPod(), "", nil, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := emptyDirMemorySize(tc.pod, &corev1.EmptyDirVolumeSource{Medium: "Memory", SizeLimit: tc.sizeLimit}, tc.allocatable[podrules.ResourceMemory]); got != tc.want {
				t.Errorf("size %d, want %d", got, tc.want)
			}
		})
	}
}

// The eviction decision is kubelet's emptyDirLimitEviction: usage strictly
// above a positive sizeLimit evicts, with kubelet's message; at the limit,
// without a limit, or without stats, it does not.
func TestEmptyDirOverLimit(t *testing.T) {
	p := &corev1.Pod{Spec: &corev1.PodSpec{Volumes: []*corev1.Volume{
		{Name: "plain", EmptyDir: &corev1.EmptyDirVolumeSource{}},
		{Name: "cache", EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: "1Mi"}},
		{Name: "zero", EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: "0"}},
		{Name: "config", ConfigMap: &corev1.ConfigMapVolumeSource{Name: "x"}},
	}}}
	usage := func(u map[string]int64) func(string) (int64, error) {
		return func(name string) (int64, error) {
			if n, ok := u[name]; ok {
				return n, nil
			}
			return 0, errors.New("no stats")
		}
	}
	tests := []struct {
		name  string
		usage map[string]int64
		want  string
	}{
		{"below", map[string]int64{"cache": 1<<20 - 1, "plain": 1 << 40, "zero": 1 << 40}, ""},
		{"at the limit", map[string]int64{"cache": 1 << 20}, ""},
		{"no stats", map[string]int64{}, ""},
		{"above", map[string]int64{"cache": 1<<20 + 1}, `Usage of EmptyDir volume "cache" exceeds the limit "1Mi". `},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			msg, limited := emptyDirOverLimit(p, usage(tc.usage))
			if msg != tc.want || !limited {
				t.Errorf("msg %q limited %v, want %q true", msg, limited, tc.want)
			}
		})
	}
	if _, limited := emptyDirOverLimit(&corev1.Pod{Spec: &corev1.PodSpec{Volumes: p.Spec.Volumes[:1]}}, usage(nil)); limited {
		t.Error("a pod without a sizeLimit is limited")
	}
	// A runtime that turns out to measure nothing (a wrapper over one
	// without a VolumeMeter) is not asked again every EvictionPeriod.
	noMeter := func(string) (int64, error) { return 0, ErrNoVolumeMeter }
	if msg, limited := emptyDirOverLimit(p, noMeter); msg != "" || limited {
		t.Errorf("without a meter: msg %q limited %v, want none and not limited", msg, limited)
	}
}

// The tmpfs under a secret, downwardAPI or projected volume is sized as
// kubelet sizes the memory emptyDir it wraps them in (no sizeLimit): the
// pod's memory limit when it has one no larger than the node's
// allocatable memory, else that; configMap and disk emptyDir volumes get
// no tmpfs size.
func TestWrappedVolumeMemorySize(t *testing.T) {
	const mi = 1 << 20
	vols := []*corev1.Volume{
		{Name: "sec", Secret: &corev1.SecretVolumeSource{SecretName: "creds"}},
		{Name: "dapi", DownwardApi: &corev1.DownwardAPIVolumeSource{}},
		{Name: "proj", Projected: &corev1.ProjectedVolumeSource{}},
		{Name: "cm", ConfigMap: &corev1.ConfigMapVolumeSource{Name: "app"}},
		{Name: "disk", EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: "1Mi"}},
	}
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		want int64
	}{
		{"pod memory limit", memPod("100Mi", "28Mi"), 128 * mi},
		{"no pod limit: node allocatable", memPod("100Mi", ""), 8 << 30},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.pod.Spec.Volumes = vols
			w := downwardWorker(tc.pod)
			w.d.volumes = mapSource{cms: map[string]*corev1.ConfigMap{"app": {}}, secrets: map[string]*corev1.Secret{"creds": {}}}
			got, err := w.resolveVolumes(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			for i, want := range []int64{tc.want, tc.want, tc.want, 0, 0} {
				if got[i].MemorySize != want {
					t.Errorf("volume %s: tmpfs size %d, want %d", got[i].Volume.GetName(), got[i].MemorySize, want)
				}
			}
		})
	}
}
