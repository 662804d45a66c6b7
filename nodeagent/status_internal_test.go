package nodeagent

import (
	"testing"
	"time"

	corev1 "github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/podrules"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// TestLastStateNotShared: the containers that never terminated before
// share one empty lastState; a container that did gets its own, and a
// status built after it (of the same pod or another) still shows none.
func TestLastStateNotShared(t *testing.T) {
	restarted := &ctr{spec: &corev1.Container{Name: "restarted"}, restarts: 1,
		lastTerm: &corev1.ContainerStateTerminated{ExitCode: 3, Reason: "Error"}}
	fresh := &ctr{spec: &corev1.Container{Name: "fresh"}}
	w := &worker{apps: []*ctr{restarted, fresh}}
	other := &worker{apps: []*ctr{{spec: &corev1.Container{Name: "other"}}}}
	got := w.containerStatus(restarted, "ContainerCreating").GetLastTerminationState().GetTerminated()
	if got.GetExitCode() != 3 || got.GetReason() != "Error" {
		t.Errorf("restarted container's lastState = %v, want its exit 3", got)
	}
	for _, cs := range []*corev1.ContainerStatus{w.containerStatus(fresh, "ContainerCreating"), other.containerStatus(other.apps[0], "ContainerCreating")} {
		if ls := cs.GetLastTerminationState(); ls == nil || ls.GetTerminated() != nil || ls.GetWaiting() != nil || ls.GetRunning() != nil {
			t.Errorf("%s: lastState = %v, want empty", cs.GetName(), ls)
		}
	}
	if noLastState.GetTerminated() != nil || noLastState.GetWaiting() != nil || noLastState.GetRunning() != nil {
		t.Errorf("the shared empty lastState was modified: %v", noLastState)
	}
}

// TestWorkerTakesOverPriorStatus: the worker's pod holds no status; the
// status the pod came with gives the conditions their lastTransitionTime
// and is dropped once each of its conditions was set again, unless one
// the worker sets only later (DisruptionTarget) is among them.
func TestWorkerTakesOverPriorStatus(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	scheduled := &corev1.PodCondition{Type: "PodScheduled", Status: "True", LastTransitionTime: timestamppb.New(t0)}
	disruption := &corev1.PodCondition{Type: "DisruptionTarget", Status: "True", LastTransitionTime: timestamppb.New(t0)}
	tests := []struct {
		name  string
		conds []*corev1.PodCondition
		kept  bool // the prior status is still held after the first status
	}{
		{"scheduled", []*corev1.PodCondition{scheduled}, false},
		{"a readiness gate's condition the worker never sets", []*corev1.PodCondition{scheduled,
			{Type: "example.com/gate", Status: "True", LastTransitionTime: timestamppb.New(t0)}}, false},
		{"a DisruptionTarget the worker has not set", []*corev1.PodCondition{scheduled, disruption}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pod := copyPod("a")
			pod.Status.Conditions = tc.conds
			w := newWorker(&workerDeps{cfg: DefaultConfig("n1", "10.244.1.0/24")}, workerCopy(pod), nil)
			if w.pod.Status != nil {
				t.Errorf("the worker's pod holds a status: %v", w.pod.Status)
			}
			w.begun = true // as its first step does
			st := w.buildStatus(t0.Add(time.Minute))
			if c := podrules.PodCondition(st, "PodScheduled"); c.GetStatus() != "True" || !c.GetLastTransitionTime().AsTime().Equal(t0) {
				t.Errorf("PodScheduled = %v, want True since %v (the prior status's)", c, t0)
			}
			if c := podrules.PodCondition(st, "Ready"); !c.GetLastTransitionTime().AsTime().Equal(t0.Add(time.Minute)) {
				t.Errorf("Ready = %v, want changed at %v", c, t0.Add(time.Minute))
			}
			if (w.prior != nil) != tc.kept {
				t.Errorf("prior status held: %v, want %v", w.prior != nil, tc.kept)
			}
		})
	}
}

// TestSetCond: a condition's lastTransitionTime moves only when its
// status changes; its reason and message follow every set.
func TestSetCond(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	w := &worker{}
	ltt := func() time.Time { return w.cond("Ready").GetLastTransitionTime().AsTime() }
	if w.cond("Ready") != nil {
		t.Fatal("a condition never set is there")
	}
	w.setCond(t0, "Ready", false, "ContainersNotReady", "containers with unready status: [app]")
	w.setCond(t0.Add(time.Second), "Ready", false, "PodCompleted", "")
	if c := w.cond("Ready"); c.GetStatus() != "False" || c.GetReason() != "PodCompleted" || c.GetMessage() != "" || !ltt().Equal(t0) {
		t.Errorf("after a new reason: %v, want False PodCompleted since %v", c, t0)
	}
	w.setCond(t0.Add(2*time.Second), "Ready", true, "", "")
	w.setCond(t0.Add(3*time.Second), "Ready", true, "", "")
	if c := w.cond("Ready"); c.GetStatus() != "True" || c.GetReason() != "" || !ltt().Equal(t0.Add(2*time.Second)) {
		t.Errorf("after turning True: %v, want True since %v", c, t0.Add(2*time.Second))
	}
	if a, b := w.cond("Ready"), w.cond("Ready"); a == b {
		t.Error("two statuses share a condition")
	}
}
