package nodeagent_test

import (
	"testing"
	"time"

	"github.com/podflow/podflow/nodeagent/sim"
	corev1 "github.com/podflow/podflow/proto/corev1"
	eventsv1 "github.com/podflow/podflow/proto/eventsv1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// kubelet's words (pkg/kubelet/active_deadline.go).
const deadlineMsg = "Pod was active on the node longer than the specified deadline"

func activeDeadline(s int64) podOpt {
	return func(p *corev1.Pod) { p.Spec.ActiveDeadlineSeconds = &s }
}

func finalFailure(envs []*eventsv1.Envelope) *eventsv1.PodFailed {
	for _, x := range ofType(envs, "PodFailed") {
		if x.GetPodFailed().GetFinal() {
			return x.GetPodFailed()
		}
	}
	return nil
}

// TestActiveDeadlineSeconds: a pod active longer than
// spec.activeDeadlineSeconds (since status.startTime) is killed and goes
// Failed as kubelet's activeDeadlineHandler has it: reason
// DeadlineExceeded, kubelet's message, an Event DeadlineExceeded, its
// containers stopped (SIGTERM, 143) and not restarted, its sandbox and IP
// released, one final PodFailed. (fastConfig: a spec second is 10ms.)
func TestActiveDeadlineSeconds(t *testing.T) {
	failedByDeadline := func(t *testing.T, e *env, p *corev1.Pod) []*eventsv1.Envelope {
		t.Helper()
		envs := e.waitEnvs(p.Metadata.Uid, "final PodFailed", func(envs []*eventsv1.Envelope) bool { return finalFailure(envs) != nil })
		st := lastStatus(envs)
		if st.GetPhase() != "Failed" || st.GetReason() != "DeadlineExceeded" || st.GetMessage() != deadlineMsg {
			t.Errorf("status phase %q reason %q message %q, want Failed DeadlineExceeded %q", st.GetPhase(), st.GetReason(), st.GetMessage(), deadlineMsg)
		}
		if f := finalFailure(envs); f.GetReason() != "DeadlineExceeded" {
			t.Errorf("final PodFailed = %v, want reason DeadlineExceeded", f)
		}
		if !hasRecord(envs, "Normal", "DeadlineExceeded", deadlineMsg) {
			t.Errorf("records = %v, want a DeadlineExceeded Event %q", records(envs), deadlineMsg)
		}
		if cond(st, "Ready").GetStatus() != "False" {
			t.Errorf("Ready = %v, want False", cond(st, "Ready"))
		}
		return envs
	}

	t.Run("running pod killed", func(t *testing.T) {
		e := newEnv(t)
		p := newPod("deadline", activeDeadline(30)) // 300ms
		e.bind(p)
		e.waitStatus(p.Metadata.Uid, "Running", runningReady)
		envs := failedByDeadline(t, e, p)
		cs := lastStatus(envs).GetContainerStatuses()[0]
		if term := cs.GetState().GetTerminated(); term.GetExitCode() != sim.ExitCodeSIGTERM || term.GetReason() != "Error" {
			t.Errorf("container state = %v, want terminated by SIGTERM (143, Error)", cs.GetState())
		}
		if !hasRecord(envs, "Normal", "Killing", "Stopping container app") {
			t.Errorf("records = %v, want Killing app", records(envs))
		}
		// Past the deadline nothing restarts, and the sandbox is gone by
		// the time the Failed status is reported.
		if n := len(ofType(e.pub.Pod(p.Metadata.Uid), "ContainerStarted")); n != 1 {
			t.Errorf("%d ContainerStarted, want 1 (no restart after the deadline)", n)
		}
		if e.rt.Pods() != 0 || e.rt.IPAM().InUse() != 0 {
			t.Errorf("%d sandboxes, %d IPs after the pod failed", e.rt.Pods(), e.rt.IPAM().InUse())
		}
	})

	t.Run("counted from status.startTime", func(t *testing.T) {
		// A pod whose startTime is long past (a restarted agent, a
		// re-bound pod) fails at once, before its containers start.
		e := newEnv(t)
		p := newPod("deadline-old", activeDeadline(3600))
		p.Status = &corev1.PodStatus{StartTime: timestamppb.New(time.Now().Add(-time.Hour))}
		e.bind(p)
		envs := failedByDeadline(t, e, p)
		if n := len(ofType(envs, "ContainerStarted")); n != 0 {
			t.Errorf("%d containers started past the deadline", n)
		}
	})

	t.Run("pending pod", func(t *testing.T) {
		// The deadline runs while the pod waits (here in ImagePullBackOff).
		e := newEnv(t)
		p := newPod("deadline-pull", activeDeadline(20), annotate(sim.AnnotationImagePull, sim.Fail))
		e.bind(p)
		failedByDeadline(t, e, p)
	})

	t.Run("set on a running pod", func(t *testing.T) {
		// The API lets an update set the deadline (conformance: "Pods
		// should allow activeDeadlineSeconds to be updated"); the worker
		// of the running pod takes it.
		e := newEnv(t)
		p := newPod("deadline-updated")
		e.bind(p)
		e.waitStatus(p.Metadata.Uid, "Running", runningReady)
		updated := proto.CloneOf(p)
		activeDeadline(30)(updated)
		e.bind(updated)
		failedByDeadline(t, e, p)
	})

	t.Run("an update without one keeps it", func(t *testing.T) {
		e := newEnv(t)
		p := newPod("deadline-kept", activeDeadline(30))
		e.bind(p)
		e.waitStatus(p.Metadata.Uid, "Running", runningReady)
		stale := proto.CloneOf(p)
		stale.Spec.ActiveDeadlineSeconds = nil
		e.bind(stale)
		failedByDeadline(t, e, p)
	})

	t.Run("pod done before its deadline", func(t *testing.T) {
		e := newEnv(t)
		p := newPod("deadline-done", activeDeadline(1000), restartPolicy("Never"), annotate(sim.AnnotationExitAfter, "10ms"))
		e.bind(p)
		st := e.waitStatus(p.Metadata.Uid, "Succeeded", func(st *corev1.PodStatus) bool { return st.GetPhase() == "Succeeded" })
		if st.GetReason() != "" {
			t.Errorf("reason = %q, want none", st.GetReason())
		}
	})
}
