package podrules

import (
	"testing"

	"github.com/podflow/podflow/proto/corev1"
)

// TestPodLimits pins kubelet's ResourceConfigForPod pod-level limits, the
// one rule the node agent's memory emptyDir size and its pod cgroup read.
func TestPodLimits(t *testing.T) {
	const mi = 1 << 20
	lim := func(cpu, mem string) *corev1.Container { return rr(nil, m("cpu", cpu, "memory", mem)) }
	tests := []struct {
		name        string
		init, given []*corev1.Container
		want        Resources
	}{
		{"one container", nil, []*corev1.Container{lim("500m", "128Mi")}, Resources{MilliCPU: 500, Memory: 128 * mi}},
		{"the app containers' sum", nil, []*corev1.Container{lim("500m", "128Mi"), lim("250m", "64Mi")}, Resources{MilliCPU: 750, Memory: 192 * mi}},
		{"the largest init container when larger", []*corev1.Container{lim("2", "1Gi"), lim("100m", "32Mi")},
			[]*corev1.Container{lim("500m", "256Mi"), lim("500m", "2Gi")}, Resources{MilliCPU: 2000, Memory: 2304 * mi}},
		{"the largest init container", []*corev1.Container{lim("100m", "300Mi")}, []*corev1.Container{lim("1", "100Mi"), lim("1", "50Mi")},
			Resources{MilliCPU: 2000, Memory: 300 * mi}},
		{"a container without a memory limit: no memory limit", nil, []*corev1.Container{lim("1", "100Mi"), rr(nil, m("cpu", "1"))},
			Resources{MilliCPU: 2000}},
		{"an init container without limits: none", []*corev1.Container{{Name: "init"}}, []*corev1.Container{lim("1", "100Mi")}, Resources{}},
		{"requests are not limits", nil, []*corev1.Container{rr(m("cpu", "1", "memory", "1Gi"), nil)}, Resources{}},
		{"no app container: none", []*corev1.Container{lim("1", "1Gi")}, nil, Resources{}},
		{"zero, negative and unparseable count as unset", nil,
			[]*corev1.Container{lim("0", "100Mi"), lim("1", "-1Mi"), lim("lots", "1Gi")}, Resources{}},
		{"only these two resources", nil, []*corev1.Container{rr(nil, m("cpu", "1", "memory", "1Gi", "ephemeral-storage", "1Gi"))},
			Resources{MilliCPU: 1000, Memory: 1 << 30}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := &corev1.Pod{Spec: &corev1.PodSpec{InitContainers: tc.init, Containers: tc.given}}
			if got := PodLimits(p); got != tc.want {
				t.Errorf("PodLimits = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestQuantityValueAndMilli(t *testing.T) {
	tests := []struct {
		given       string
		value, mill int64
	}{
		{"", 0, 0},
		{"lots", 0, 0},
		{"0", 0, 0},
		{"-1", 0, 0},
		{"1Ki", 1024, 1024000},
		{"250m", 1, 250}, // a value rounds up
		{"2", 2, 2000},
	}
	for _, tc := range tests {
		if v, mv := QuantityValue(tc.given), QuantityMilli(tc.given); v != tc.value || mv != tc.mill {
			t.Errorf("%q: QuantityValue %d QuantityMilli %d, want %d and %d", tc.given, v, mv, tc.value, tc.mill)
		}
	}
}
