package replicaset

import (
	"slices"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestPodsToDeleteRanking: scaling down deletes as kube ranks: an
// unscheduled pod before a pending one, before one not ready, before a
// ready one; among ready pods, the one on a node crowded with the
// owner's pods first.
func TestPodsToDeleteRanking(t *testing.T) {
	now := metav1.NewTime(time.Now().Add(-time.Hour))
	pod := func(name, node string, phase v1.PodPhase, ready bool) *v1.Pod {
		p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: now}, Spec: v1.PodSpec{NodeName: node}, Status: v1.PodStatus{Phase: phase}}
		st := v1.ConditionFalse
		if ready {
			st = v1.ConditionTrue
		}
		p.Status.Conditions = []v1.PodCondition{{Type: v1.PodReady, Status: st, LastTransitionTime: now}}
		return p
	}
	names := func(ps []*v1.Pod) []string {
		var out []string
		for _, p := range ps {
			out = append(out, p.Name)
		}
		return out
	}
	mk := func() []*v1.Pod {
		return []*v1.Pod{
			pod("ready-alone", "n1", v1.PodRunning, true),
			pod("not-ready", "n2", v1.PodRunning, false),
			pod("ready-crowded", "n3", v1.PodRunning, true),
			pod("unscheduled", "", v1.PodPending, false),
			pod("pending", "n2", v1.PodPending, false),
		}
	}
	related := append(mk(), pod("sibling-1", "n3", v1.PodRunning, true), pod("sibling-2", "n3", v1.PodRunning, true))
	got := names(podsToDelete(mk(), related, 4))
	want := []string{"unscheduled", "pending", "not-ready", "ready-crowded"}
	if !slices.Equal(got, want) {
		t.Errorf("victims %v, want %v", got, want)
	}
}
