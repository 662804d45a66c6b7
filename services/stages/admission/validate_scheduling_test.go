package admission

import (
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/podflow/podflow/proto/corev1"
)

func TestValidateSchedulingFields(t *testing.T) {
	spread := func(mut func(*corev1.TopologySpreadConstraint)) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			c := &corev1.TopologySpreadConstraint{MaxSkew: 1, TopologyKey: "zone", WhenUnsatisfiable: "DoNotSchedule",
				LabelSelector: &corev1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}}
			mut(c)
			p.Spec.TopologySpreadConstraints = append(p.Spec.TopologySpreadConstraints, c)
		}
	}
	antiTerm := func(term *corev1.PodAffinityTerm) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			p.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
				RequiredDuringSchedulingIgnoredDuringExecution: []*corev1.PodAffinityTerm{term}}}
		}
	}
	const tsc = "spec.topologySpreadConstraints[0]."
	tests := []struct {
		name  string
		given func(*corev1.Pod)
		want  []string
	}{
		{"valid spread", spread(func(*corev1.TopologySpreadConstraint) {}), nil},
		{"maxSkew 0", spread(func(c *corev1.TopologySpreadConstraint) { c.MaxSkew = 0 }), []string{"FieldValueInvalid " + tsc + "maxSkew"}},
		{"topologyKey missing", spread(func(c *corev1.TopologySpreadConstraint) { c.TopologyKey = "" }), []string{"FieldValueRequired " + tsc + "topologyKey"}},
		{"whenUnsatisfiable unsupported", spread(func(c *corev1.TopologySpreadConstraint) { c.WhenUnsatisfiable = "Never" }), []string{"FieldValueNotSupported " + tsc + "whenUnsatisfiable"}},
		{"whenUnsatisfiable missing", spread(func(c *corev1.TopologySpreadConstraint) { c.WhenUnsatisfiable = "" }), []string{"FieldValueRequired " + tsc + "whenUnsatisfiable"}},
		{"minDomains with ScheduleAnyway", spread(func(c *corev1.TopologySpreadConstraint) {
			c.WhenUnsatisfiable, c.MinDomains = "ScheduleAnyway", proto.Int32(2)
		}), []string{"FieldValueInvalid " + tsc + "minDomains"}},
		{"minDomains 0", spread(func(c *corev1.TopologySpreadConstraint) { c.MinDomains = proto.Int32(0) }), []string{"FieldValueInvalid " + tsc + "minDomains"}},
		{"policies", spread(func(c *corev1.TopologySpreadConstraint) {
			c.NodeAffinityPolicy, c.NodeTaintsPolicy = proto.String("Honor"), proto.String("Sometimes")
		}), []string{"FieldValueNotSupported " + tsc + "nodeTaintsPolicy"}},
		{"bad selector", spread(func(c *corev1.TopologySpreadConstraint) {
			c.LabelSelector.MatchExpressions = []*corev1.LabelSelectorRequirement{
				{Key: "app", Operator: "In"}, {Key: "tier", Operator: "Exists", Values: []string{"x"}}, {Key: "n", Operator: "Gt", Values: []string{"1"}}}
		}), []string{
			"FieldValueRequired " + tsc + "labelSelector.matchExpressions[0].values",
			"FieldValueForbidden " + tsc + "labelSelector.matchExpressions[1].values",
			"FieldValueNotSupported " + tsc + "labelSelector.matchExpressions[2].operator",
		}},
		{"duplicate pair", func(p *corev1.Pod) {
			spread(func(*corev1.TopologySpreadConstraint) {})(p)
			spread(func(*corev1.TopologySpreadConstraint) {})(p)
		}, []string{"FieldValueDuplicate spec.topologySpreadConstraints[1]"}},
		{"gates", func(p *corev1.Pod) {
			p.Spec.SchedulingGates = []*corev1.PodSchedulingGate{{Name: "example.com/a"}, {Name: "example.com/a"}, {Name: "not valid"}}
		}, []string{"FieldValueDuplicate spec.schedulingGates[1].name", "FieldValueInvalid spec.schedulingGates[2].name"}},
		{"valid anti-affinity", antiTerm(&corev1.PodAffinityTerm{TopologyKey: "kubernetes.io/hostname",
			LabelSelector: &corev1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}}), nil},
		{"anti-affinity without topologyKey", antiTerm(&corev1.PodAffinityTerm{Namespaces: []string{"Bad_NS"}}), []string{
			"FieldValueInvalid spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].namespaces[0]",
			"FieldValueRequired spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].topologyKey",
		}},
		{"preferred weight", func(p *corev1.Pod) {
			p.Spec.Affinity = &corev1.Affinity{PodAffinity: &corev1.PodAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []*corev1.WeightedPodAffinityTerm{
				{Weight: 101, PodAffinityTerm: &corev1.PodAffinityTerm{TopologyKey: "zone"}}}}}
		}, []string{"FieldValueInvalid spec.affinity.podAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].weight"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res := Admit(pod(tc.given), State{})
			got := causeFields(res.Status)
			if len(tc.want) == 0 {
				if res.Status != nil {
					t.Fatalf("rejected: %s", res.Status.Message)
				}
				return
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("causes\n  %s\nwant\n  %s\nmessage: %s", strings.Join(got, "\n  "), strings.Join(tc.want, "\n  "), res.Status.Message)
			}
		})
	}
}
