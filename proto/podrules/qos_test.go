package podrules

import (
	"testing"

	"github.com/podflow/podflow/proto/corev1"
)

func rr(req, lim map[string]string) *corev1.Container {
	return &corev1.Container{Name: "c", Resources: &corev1.ResourceRequirements{Requests: req, Limits: lim}}
}

func m(kv ...string) map[string]string {
	out := map[string]string{}
	for i := 0; i < len(kv); i += 2 {
		out[kv[i]] = kv[i+1]
	}
	return out
}

// TestQOSClass pins pkg/apis/core/v1/helper/qos ComputePodQOS (the cases
// of the admission stage's and nodeagent's former copies).
func TestQOSClass(t *testing.T) {
	both := m("cpu", "1", "memory", "1Gi")
	tests := []struct {
		name  string
		given []*corev1.Container // containers
		init  []*corev1.Container
		want  string
	}{
		{"no resources", []*corev1.Container{{Name: "c"}}, nil, QOSBestEffort},
		{"only non-compute resources", []*corev1.Container{rr(m("ephemeral-storage", "1Gi"), nil)}, nil, QOSBestEffort},
		{"zero quantities count as unset", []*corev1.Container{rr(m("cpu", "0"), m("memory", "0"))}, nil, QOSBestEffort},
		{"unparseable quantities are ignored", []*corev1.Container{rr(m("cpu", "lots"), nil)}, nil, QOSBestEffort},
		{"requests only", []*corev1.Container{rr(m("cpu", "100m"), nil)}, nil, QOSBurstable},
		{"requests of both only", []*corev1.Container{rr(both, nil)}, nil, QOSBurstable},
		{"limits equal requests", []*corev1.Container{rr(both, both)}, nil, QOSGuaranteed},
		{"equal in other units", []*corev1.Container{rr(m("cpu", "1000m", "memory", "1024Mi"), both)}, nil, QOSGuaranteed},
		{"limits only (requests default later)", []*corev1.Container{rr(nil, both)}, nil, QOSGuaranteed},
		{"cpu limit only", []*corev1.Container{rr(m("cpu", "1"), m("cpu", "1"))}, nil, QOSBurstable},
		{"cpu limit only, no request", []*corev1.Container{rr(nil, m("cpu", "1"))}, nil, QOSBurstable},
		{"request below limit", []*corev1.Container{rr(m("cpu", "500m", "memory", "1Gi"), both)}, nil, QOSBurstable},
		{"cpu request below limits", []*corev1.Container{rr(m("cpu", "500m"), both)}, nil, QOSBurstable},
		{"one guaranteed, one best effort", []*corev1.Container{rr(both, both), {Name: "d"}}, nil, QOSBurstable},
		{"init container counts", []*corev1.Container{rr(both, both)}, []*corev1.Container{rr(m("cpu", "100m"), nil)}, QOSBurstable},
		{"both guaranteed", []*corev1.Container{rr(nil, both)}, []*corev1.Container{rr(nil, m("cpu", "2", "memory", "2Gi"))}, QOSGuaranteed},
		{"extended resources do not count", []*corev1.Container{rr(m("nvidia.com/gpu", "1"), m("nvidia.com/gpu", "1"))}, nil, QOSBestEffort},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := &corev1.Pod{Spec: &corev1.PodSpec{Containers: tc.given, InitContainers: tc.init}}
			if got := QOSClass(p); got != tc.want {
				t.Fatalf("QOSClass = %s, want %s", got, tc.want)
			}
		})
	}
}

// TestQOSClassZeroRequest is the regression test of the divergence between
// the former copies: a container whose only request is cpu "0" was
// BestEffort to admission and the cgroup plan but reported Burstable by the
// node agent. Kubernetes ignores zero quantities: BestEffort.
func TestQOSClassZeroRequest(t *testing.T) {
	for _, given := range []map[string]string{m("cpu", "0"), m("cpu", "0m"), m("memory", "0"), m("cpu", "0", "memory", "0Mi")} {
		p := &corev1.Pod{Spec: &corev1.PodSpec{Containers: []*corev1.Container{rr(given, nil)}}}
		if got := QOSClass(p); got != QOSBestEffort {
			t.Errorf("QOSClass(requests %v) = %s, want BestEffort", given, got)
		}
	}
}
