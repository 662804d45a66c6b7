package controller_test

import (
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	podutil "k8s.io/kubernetes/pkg/api/v1/pod"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/controller"
)

// TestLabelMatcher: a LabelMatcher says what its selector's Matches says,
// for matchLabels selectors (its fast path), expressions, an empty
// selector (everything), labels.Nothing and none at all (nothing).
func TestLabelMatcher(t *testing.T) {
	sel := func(ls *metav1.LabelSelector) labels.Selector {
		s, err := metav1.LabelSelectorAsSelector(ls)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	selectors := map[string]labels.Selector{
		"matchLabels":     sel(&metav1.LabelSelector{MatchLabels: map[string]string{"app": "web", "tier": "front"}}),
		"emptyValue":      sel(&metav1.LabelSelector{MatchLabels: map[string]string{"app": ""}}),
		"in":              sel(&metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "app", Operator: metav1.LabelSelectorOpIn, Values: []string{"web", "api"}}}}),
		"notIn":           sel(&metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "app", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"web"}}}}),
		"exists":          sel(&metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "tier", Operator: metav1.LabelSelectorOpExists}}}),
		"labelsAndExpr":   sel(&metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}, MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "tier", Operator: metav1.LabelSelectorOpDoesNotExist}}}),
		"empty":           sel(&metav1.LabelSelector{}),
		"nothing":         sel(nil),
		"templateLabels":  labels.Set{"app": "web", "pod-template-hash": "abc"}.AsSelectorPreValidated(),
		"noTemplateLabel": labels.Set{}.AsSelectorPreValidated(),
	}
	sets := []map[string]string{
		nil,
		{},
		{"app": "web"},
		{"app": ""},
		{"app": "api"},
		{"app": "web", "tier": "front"},
		{"app": "web", "tier": "back"},
		{"app": "web", "tier": "front", "pod-template-hash": "abc"},
		{"app": "web", "pod-template-hash": "abd"},
	}
	for name, s := range selectors {
		m := controller.NewLabelMatcher(s)
		if m.Usable() != !s.Empty() {
			t.Errorf("%s: Usable %v, the selector is empty: %v", name, m.Usable(), s.Empty())
		}
		for _, ls := range sets {
			if got, want := m.Matches(ls), s.Matches(labels.Set(ls)); got != want {
				t.Errorf("%s: Matches(%v) = %v, the selector says %v", name, ls, got, want)
			}
		}
	}
	var none controller.LabelMatcher
	if none.Matches(map[string]string{"app": "web"}) || none.Usable() || controller.NewLabelMatcher(nil).Matches(nil) {
		t.Error("a matcher of no selector matches")
	}
}

// TestPodReadyAvailable: PodReady and PodAvailable on a stored pod say
// what kube's podutil.IsPodReady and IsPodAvailable say on its KubePod.
func TestPodReadyAvailable(t *testing.T) {
	now := time.Now()
	cond := func(typ, status string, ago time.Duration) *corev1.PodCondition {
		c := &corev1.PodCondition{Type: typ, Status: status}
		if ago >= 0 {
			c.LastTransitionTime = timestamppb.New(now.Add(-ago))
		}
		return c
	}
	conditions := [][]*corev1.PodCondition{
		nil,
		{cond("PodScheduled", "True", time.Minute)},
		{cond("Ready", "False", time.Minute)},
		{cond("Ready", "True", time.Minute)},
		{cond("Ready", "True", 3*time.Second)},
		{cond("Ready", "True", 5*time.Second)},
		{cond("Ready", "True", -1)}, // no transition time
		{cond("ContainersReady", "True", time.Minute), cond("Ready", "Unknown", time.Minute)},
		{cond("Ready", "False", time.Minute), cond("Ready", "True", time.Minute)}, // the first counts
	}
	for i, cs := range conditions {
		p := &corev1.Pod{Metadata: &corev1.ObjectMeta{Name: fmt.Sprint("p", i)}, Status: &corev1.PodStatus{Phase: "Running", Conditions: cs}}
		kp := controller.KubePod(p)
		if got, want := controller.PodReady(p), podutil.IsPodReady(kp); got != want {
			t.Errorf("conditions %d: PodReady %v, kube says %v", i, got, want)
		}
		for _, minReady := range []int32{0, 5, 30} {
			if got, want := controller.PodAvailable(p, minReady, now), podutil.IsPodAvailable(kp, minReady, metav1.NewTime(now)); got != want {
				t.Errorf("conditions %d, minReadySeconds %d: PodAvailable %v, kube says %v", i, minReady, got, want)
			}
		}
	}
	if controller.PodReady(&corev1.Pod{}) || controller.PodAvailable(&corev1.Pod{}, 0, now) {
		t.Error("a pod without status is ready")
	}
}
