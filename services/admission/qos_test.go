package admission

import (
	"testing"

	"github.com/podflow/podflow/proto/corev1"
)

func TestQOSClass(t *testing.T) {
	rr := func(req, lim map[string]string) *corev1.Container {
		return &corev1.Container{Name: "c", Resources: &corev1.ResourceRequirements{Requests: req, Limits: lim}}
	}
	m := func(kv ...string) map[string]string {
		out := map[string]string{}
		for i := 0; i < len(kv); i += 2 {
			out[kv[i]] = kv[i+1]
		}
		return out
	}
	tests := []struct {
		name  string
		given []*corev1.Container // containers; init containers in initGiven
		init  []*corev1.Container
		want  string
	}{
		{"no resources", []*corev1.Container{{Name: "c"}}, nil, QOSBestEffort},
		{"only non-compute resources", []*corev1.Container{rr(m("ephemeral-storage", "1Gi"), nil)}, nil, QOSBestEffort},
		{"zero quantities count as unset", []*corev1.Container{rr(m("cpu", "0"), m("memory", "0"))}, nil, QOSBestEffort},
		{"requests only", []*corev1.Container{rr(m("cpu", "100m"), nil)}, nil, QOSBurstable},
		{"limits equal requests", []*corev1.Container{rr(m("cpu", "1", "memory", "1Gi"), m("cpu", "1", "memory", "1Gi"))}, nil, QOSGuaranteed},
		{"equal in other units", []*corev1.Container{rr(m("cpu", "1000m", "memory", "1024Mi"), m("cpu", "1", "memory", "1Gi"))}, nil, QOSGuaranteed},
		{"limits only (requests default later)", []*corev1.Container{rr(nil, m("cpu", "1", "memory", "1Gi"))}, nil, QOSGuaranteed},
		{"cpu limit only", []*corev1.Container{rr(m("cpu", "1"), m("cpu", "1"))}, nil, QOSBurstable},
		{"request below limit", []*corev1.Container{rr(m("cpu", "500m", "memory", "1Gi"), m("cpu", "1", "memory", "1Gi"))}, nil, QOSBurstable},
		{"one guaranteed, one best effort", []*corev1.Container{rr(m("cpu", "1", "memory", "1Gi"), m("cpu", "1", "memory", "1Gi")), {Name: "d"}}, nil, QOSBurstable},
		{"init container counts", []*corev1.Container{rr(m("cpu", "1", "memory", "1Gi"), m("cpu", "1", "memory", "1Gi"))},
			[]*corev1.Container{rr(m("cpu", "100m"), nil)}, QOSBurstable},
		{"both guaranteed", []*corev1.Container{rr(nil, m("cpu", "1", "memory", "1Gi"))},
			[]*corev1.Container{rr(nil, m("cpu", "2", "memory", "2Gi"))}, QOSGuaranteed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := &corev1.Pod{Spec: &corev1.PodSpec{Containers: tc.given, InitContainers: tc.init}}
			if got := QOSClass(p); got != tc.want {
				t.Fatalf("QOSClass = %s, want %s", got, tc.want)
			}
		})
	}
	// After admission defaults requests from limits, the class is the same.
	res := mustAdmit(t, pod(func(p *corev1.Pod) {
		app(p).Resources = &corev1.ResourceRequirements{Limits: map[string]string{"cpu": "1", "memory": "1Gi"}}
	}), State{})
	if res.Pod.Status.QosClass != QOSGuaranteed {
		t.Fatalf("admitted pod qosClass = %s, want Guaranteed", res.Pod.Status.QosClass)
	}
}
