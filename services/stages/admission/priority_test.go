package admission

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/podflow/podflow/proto/corev1"
)

func TestResolvePriority(t *testing.T) {
	class := func(name string, value int32, def bool) *corev1.PriorityClass {
		return &corev1.PriorityClass{Metadata: &corev1.ObjectMeta{Name: name}, Value: value, GlobalDefault: def}
	}
	classes := []*corev1.PriorityClass{class("high", 1000, false), class("low", 10, true), class("lower", 5, true)}
	tests := []struct {
		name      string
		className string
		priority  *int32
		classes   []*corev1.PriorityClass
		wantName  string
		want      *int32 // nil: unset
		wantErr   string
	}{
		{name: "no class, no default", classes: classes[:1], want: nil},
		{name: "no class: the highest global default", classes: classes, wantName: "low", want: proto.Int32(10)},
		{name: "named class", className: "high", classes: classes, wantName: "high", want: proto.Int32(1000)},
		{name: "built-in cluster critical", className: "system-cluster-critical", wantName: "system-cluster-critical", want: proto.Int32(2000000000)},
		{name: "built-in node critical", className: "system-node-critical", wantName: "system-node-critical", want: proto.Int32(2000001000)},
		{name: "unknown class", className: "nope", classes: classes, wantErr: `pods "web" is forbidden: no PriorityClass with name nope was found`},
		{name: "matching spec.priority", className: "high", priority: proto.Int32(1000), classes: classes, wantName: "high", want: proto.Int32(1000)},
		{name: "conflicting spec.priority", className: "high", priority: proto.Int32(7), classes: classes,
			wantErr: `pods "web" is forbidden: the integer value of priority (7) must not be provided in pod spec; priority admission controller computed 1000 from the given PriorityClass name`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res := Admit(pod(func(p *corev1.Pod) { p.Spec.PriorityClassName, p.Spec.Priority = tc.className, tc.priority }), State{PriorityClasses: tc.classes})
			if tc.wantErr != "" {
				if res.Status.GetCode() != 403 || res.Status.GetMessage() != tc.wantErr {
					t.Fatalf("status = %v, want 403 %q", res.Status, tc.wantErr)
				}
				return
			}
			if res.Status != nil {
				t.Fatalf("rejected: %s", res.Status.GetMessage())
			}
			spec := res.Pod.GetSpec()
			if spec.GetPriorityClassName() != tc.wantName || (spec.Priority == nil) != (tc.want == nil) || (tc.want != nil && spec.GetPriority() != *tc.want) {
				t.Errorf("priorityClassName %q priority %v, want %q %v", spec.GetPriorityClassName(), spec.Priority, tc.wantName, tc.want)
			}
			again := Admit(res.Pod, State{PriorityClasses: tc.classes})
			if again.Status != nil || len(again.Mutations) != 0 || !proto.Equal(again.Pod, res.Pod) {
				t.Errorf("second admission changed the pod: %v", again.Mutations)
			}
		})
	}
}

// TestResolvePreemptionPolicy: spec.preemptionPolicy comes from the
// PriorityClass (PreemptLowerPriority when it sets none); a pod that
// names another is refused, as Kubernetes' Priority admission plugin.
func TestResolvePreemptionPolicy(t *testing.T) {
	never := &corev1.PriorityClass{Metadata: &corev1.ObjectMeta{Name: "batch"}, Value: 100, PreemptionPolicy: proto.String("Never")}
	plain := &corev1.PriorityClass{Metadata: &corev1.ObjectMeta{Name: "high"}, Value: 1000}
	classes := []*corev1.PriorityClass{never, plain}
	tests := []struct {
		name, class string
		given       *string
		want        string
		wantErr     string
	}{
		{name: "class says Never", class: "batch", want: "Never"},
		{name: "class sets none", class: "high", want: "PreemptLowerPriority"},
		{name: "built-in class", class: "system-node-critical", want: "PreemptLowerPriority"},
		{name: "matching", class: "batch", given: proto.String("Never"), want: "Never"},
		{name: "conflicting", class: "high", given: proto.String("Never"),
			wantErr: `pods "web" is forbidden: the string value of PreemptionPolicy (Never) must not be provided in pod spec; priority admission controller computed PreemptLowerPriority from the given PriorityClass name`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res := Admit(pod(func(p *corev1.Pod) { p.Spec.PriorityClassName, p.Spec.PreemptionPolicy = tc.class, tc.given }), State{PriorityClasses: classes})
			if tc.wantErr != "" {
				if res.Status.GetCode() != 403 || res.Status.GetMessage() != tc.wantErr {
					t.Fatalf("status = %v, want 403 %q", res.Status, tc.wantErr)
				}
				return
			}
			if res.Status != nil {
				t.Fatalf("rejected: %s", res.Status.GetMessage())
			}
			if got := res.Pod.GetSpec().GetPreemptionPolicy(); got != tc.want {
				t.Errorf("preemptionPolicy = %q, want %q", got, tc.want)
			}
		})
	}
}
