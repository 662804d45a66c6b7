package admission

import (
	"slices"
	"strings"
	"testing"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/eventsv1"
)

func TestLimitRangeMinMax(t *testing.T) {
	bounds := func(min, max map[string]string) State {
		return State{LimitRanges: []*corev1.LimitRange{{
			Metadata: &corev1.ObjectMeta{Name: "bounds", Namespace: "default"},
			Spec:     &corev1.LimitRangeSpec{Limits: []*corev1.LimitRangeItem{{Type: "Container", Min: min, Max: max}}},
		}}}
	}
	res := func(req, lim map[string]string) func(*corev1.Pod) {
		return func(p *corev1.Pod) { app(p).Resources = &corev1.ResourceRequirements{Requests: req, Limits: lim} }
	}
	m := func(kv ...string) map[string]string {
		out := map[string]string{}
		for i := 0; i < len(kv); i += 2 {
			out[kv[i]] = kv[i+1]
		}
		return out
	}
	tests := []struct {
		name   string
		given  func(*corev1.Pod)
		state  State
		want   string   // message after `pods "web" is forbidden: `
		fields []string // nil = admitted
	}{
		{"within bounds", res(m("cpu", "500m"), m("cpu", "1")), bounds(m("cpu", "100m"), m("cpu", "2")), "", nil},
		{"defaults from max fill the limit", res(nil, nil), bounds(nil, m("cpu", "2")), "", nil},
		{"limit above max", res(m("cpu", "1"), m("cpu", "4")), bounds(nil, m("cpu", "2")),
			"maximum cpu usage per Container is 2, but limit is 4", []string{"spec.containers[0].resources.limits[cpu]"}},
		{"request below min", res(m("memory", "32Mi"), nil), bounds(m("memory", "64Mi"), nil),
			"minimum memory usage per Container is 64Mi, but request is 32Mi", []string{"spec.containers[0].resources.requests[memory]"}},
		{"several breaches", res(m("cpu", "10m", "memory", "1Gi"), m("cpu", "10m", "memory", "1Gi")), bounds(m("cpu", "100m"), m("memory", "512Mi")),
			"[minimum cpu usage per Container is 100m, but request is 10m, maximum memory usage per Container is 512Mi, but limit is 1Gi]",
			[]string{"spec.containers[0].resources.requests[cpu]", "spec.containers[0].resources.limits[memory]"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := Admit(pod(tc.given), tc.state)
			if tc.fields == nil {
				if !r.Allowed() {
					t.Fatalf("rejected: %s", r.Status.Message)
				}
				return
			}
			if r.Status.GetCode() != 403 || r.Status.GetReason() != eventsv1.ReasonForbidden {
				t.Fatalf("status = %v, want 403 Forbidden", r.Status)
			}
			if want := `pods "web" is forbidden: ` + tc.want; r.Status.Message != want {
				t.Fatalf("message\n got %s\nwant %s", r.Status.Message, want)
			}
			var fields []string
			for _, c := range r.Status.Causes {
				fields = append(fields, c.Field)
			}
			if !slices.Equal(fields, tc.fields) {
				t.Fatalf("fields %s, want %s", strings.Join(fields, " "), strings.Join(tc.fields, " "))
			}
		})
	}
}
