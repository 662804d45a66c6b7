package podrules

import (
	"slices"
	"testing"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podflow/podflow/proto/corev1"
)

func TestMarkPodCondition(t *testing.T) {
	st := &corev1.PodStatus{}
	t0, t1 := timestamppb.New(timestamppb.Now().AsTime().Add(-1e9)), timestamppb.Now()
	if !MarkPodCondition(st, "PodScheduled", "False", "Unschedulable", "0/1 nodes are available", t0) {
		t.Fatal("new condition not reported as a change")
	}
	if MarkPodCondition(st, "PodScheduled", "False", "Unschedulable", "0/1 nodes are available", t1) {
		t.Fatal("identical condition reported as a change")
	}
	MarkPodCondition(st, "PodScheduled", "False", "Unschedulable", "0/2 nodes are available", t1)
	if c := PodCondition(st, "PodScheduled"); c.LastTransitionTime.AsTime() != t0.AsTime() {
		t.Fatal("lastTransitionTime moved without a status change")
	}
	MarkPodCondition(st, "PodScheduled", "True", "", "", t1)
	if c := PodCondition(st, "PodScheduled"); c.LastTransitionTime.AsTime() != t1.AsTime() {
		t.Fatal("lastTransitionTime did not move on a status change")
	}
	MarkPodCondition(st, "Ready", "True", "", "", t1)
	if st.Conditions[0].Type != "Ready" {
		t.Fatalf("condition order %v", st.Conditions)
	}
}

func TestSetPodConditionOrder(t *testing.T) {
	tests := []struct {
		name  string
		given []string // types set, in this order
		want  []string
	}{
		{"kubelet order", []string{PodScheduled, PodReady, PodInitialized, ContainersReady, PodReadyToStartContainers},
			[]string{PodReadyToStartContainers, PodInitialized, PodReady, ContainersReady, PodScheduled}},
		{"unknown types stay where they were set", []string{PodScheduled, "DisruptionTarget", PodReady},
			[]string{PodScheduled, "DisruptionTarget", PodReady}},
		{"replacing keeps the place", []string{PodReady, PodScheduled, PodReady}, []string{PodReady, PodScheduled}},
	}
	// Conditions stored out of kubelet's order (PodScheduled first, as the
	// scheduler wrote it before the node reported): a new one moves into
	// place, the others stay where they are.
	stored := func() *corev1.PodStatus {
		st := &corev1.PodStatus{}
		for _, typ := range []string{PodScheduled, PodReadyToStartContainers, PodInitialized, ContainersReady, PodReady} {
			st.Conditions = append(st.Conditions, &corev1.PodCondition{Type: typ, Status: ConditionTrue})
		}
		return st
	}
	for _, tc := range []struct {
		add  string
		want []string
	}{
		{"DisruptionTarget", []string{PodScheduled, PodReadyToStartContainers, PodInitialized, ContainersReady, PodReady, "DisruptionTarget"}},
	} {
		st := stored()
		SetPodCondition(st, &corev1.PodCondition{Type: tc.add, Status: ConditionTrue})
		var got []string
		for _, c := range st.GetConditions() {
			got = append(got, c.GetType())
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("add %s to a stored order: %v, want %v", tc.add, got, tc.want)
		}
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := &corev1.PodStatus{}
			for _, typ := range tc.given {
				SetPodCondition(st, &corev1.PodCondition{Type: typ, Status: ConditionTrue})
			}
			var got []string
			for _, c := range st.GetConditions() {
				got = append(got, c.GetType())
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("order = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestIsPodReadyAndNodeCondition(t *testing.T) {
	pod := func(conds ...*corev1.PodCondition) *corev1.Pod {
		return &corev1.Pod{Status: &corev1.PodStatus{Conditions: conds}}
	}
	tests := []struct {
		name string
		pod  *corev1.Pod
		want bool
	}{
		{"no status", &corev1.Pod{}, false},
		{"ready", pod(&corev1.PodCondition{Type: PodReady, Status: ConditionTrue}), true},
		{"not ready", pod(&corev1.PodCondition{Type: PodReady, Status: ConditionFalse}), false},
		{"only containers ready", pod(&corev1.PodCondition{Type: ContainersReady, Status: ConditionTrue}), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := IsPodReady(tc.pod); got != tc.want {
				t.Errorf("IsPodReady = %v, want %v", got, tc.want)
			}
		})
	}
	n := &corev1.Node{Status: &corev1.NodeStatus{Conditions: []*corev1.NodeCondition{
		{Type: "MemoryPressure", Status: ConditionFalse}, {Type: NodeReady, Status: ConditionTrue}}}}
	if got := NodeCondition(n, NodeReady).GetStatus(); got != ConditionTrue {
		t.Errorf("NodeCondition(Ready) = %q", got)
	}
	if NodeCondition(&corev1.Node{}, NodeReady) != nil || NodeCondition(n, "DiskPressure") != nil {
		t.Error("NodeCondition found a missing condition")
	}
}
