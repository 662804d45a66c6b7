package nodeagent

import (
	"testing"

	corev1 "github.com/podflow/podflow/proto/corev1"
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
