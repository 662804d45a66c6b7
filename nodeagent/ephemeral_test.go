package nodeagent_test

import (
	"testing"

	"github.com/podflow/podflow/nodeagent"
	"github.com/podflow/podflow/nodeagent/sim"
	corev1 "github.com/podflow/podflow/proto/corev1"
	eventsv1 "github.com/podflow/podflow/proto/eventsv1"
	"google.golang.org/protobuf/proto"
)

func ephStatus(st *corev1.PodStatus, name string) *corev1.ContainerStatus {
	for _, cs := range st.GetEphemeralContainerStatuses() {
		if cs.GetName() == name {
			return cs
		}
	}
	return nil
}

func starts(envs []*eventsv1.Envelope, name string) []*eventsv1.ContainerStarted {
	var out []*eventsv1.ContainerStarted
	for _, x := range ofType(envs, "ContainerStarted") {
		if s := x.GetContainerStarted(); s.GetContainer() == name {
			out = append(out, s)
		}
	}
	return out
}

// debug adds an ephemeral container to p, as kubectl debug's PATCH of
// pods/ephemeralcontainers does, and hands the update to the agent.
func (e *env) debug(p *corev1.Pod, ec *corev1.EphemeralContainer) *corev1.Pod {
	e.t.Helper()
	p = proto.CloneOf(p)
	p.Spec.EphemeralContainers = append(p.Spec.EphemeralContainers, ec)
	e.bind(p)
	return p
}

// TestEphemeralContainerStartsOnceInTarget: an ephemeral container added
// to a running pod (restartPolicy Always) is pulled and started once,
// in the PID namespace of its target's running instance, with kubelet's
// Events; its exit is reported in ephemeralContainerStatuses and is
// final — no back-off, no restart — while the pod stays Running and Ready.
func TestEphemeralContainerStartsOnceInTarget(t *testing.T) {
	e := newEnv(t)
	p := newPod("debugged", restartPolicy("Always"),
		annotate(sim.AnnotationEphemeralExitAfter, "30ms", sim.AnnotationEphemeralExitCode, "3"))
	e.bind(p)
	uid := p.Metadata.Uid
	e.waitReady(uid)
	p = e.debug(p, &corev1.EphemeralContainer{Name: "debugger", Image: "busybox:1.36", Stdin: true, Tty: true, TargetContainerName: "app"})

	exited := func(name string) func(*corev1.PodStatus) bool {
		return func(st *corev1.PodStatus) bool { return ephStatus(st, name).GetState().GetTerminated() != nil }
	}
	st := e.waitStatus(uid, "debugger terminated", exited("debugger"))
	cs := ephStatus(st, "debugger")
	if term := cs.GetState().GetTerminated(); term.GetExitCode() != 3 || term.GetReason() != "Error" || cs.GetRestartCount() != 0 ||
		cs.GetImage() != "busybox:1.36" || cs.GetImageId() == "" || cs.GetContainerId() == "" {
		t.Errorf("ephemeral status = %v, want terminated exit 3 Error, no restart, image and ids", cs)
	}
	if st.GetPhase() != "Running" || cond(st, "Ready").GetStatus() != "True" || len(st.GetContainerStatuses()) != 1 {
		t.Errorf("pod status = %v, want Running and Ready, one app container status", st)
	}

	// A second one, after the first exited: the worker synced since, and
	// the first is still terminated, started once, never backed off.
	e.debug(p, &corev1.EphemeralContainer{Name: "second", Image: "busybox:1.36"})
	envs := e.waitEnvs(uid, "second terminated", func(envs []*eventsv1.Envelope) bool {
		st := lastStatus(envs)
		return exited("second")(st) && exited("debugger")(st)
	})
	first := starts(envs, "debugger")
	if len(first) != 1 || len(starts(envs, "second")) != 1 {
		t.Fatalf("ContainerStarted debugger %v, second %v: want each once", first, starts(envs, "second"))
	}
	for _, reason := range []string{"Pulling", "Pulled", "Created", "Started"} {
		if !hasRecord(envs, "Normal", reason, "") {
			t.Errorf("records = %v, want Normal %s", records(envs), reason)
		}
	}
	if !hasRecord(envs, "Normal", "Started", "Started container debugger") {
		t.Errorf("records = %v, want Started container debugger", records(envs))
	}
	if hasRecord(envs, "Warning", "BackOff", "debugger") {
		t.Errorf("records = %v: an ephemeral container is never restarted", records(envs))
	}
	app := starts(envs, "app")
	if got := e.rt.EphemeralTarget(nodeagent.ContainerID(first[0].GetContainerId())); got != nodeagent.ContainerID(app[0].GetContainerId()) {
		t.Errorf("debugger joined %q, want app's instance %q", got, app[0].GetContainerId())
	}
	if got := e.rt.EphemeralTarget(nodeagent.ContainerID(starts(envs, "second")[0].GetContainerId())); got != "" {
		t.Errorf("second (no target) joined %q", got)
	}
	checkSeq(t, envs)

	// Deleting the pod ends it as any pod.
	if err := e.agent.HandlePodDelete(e.ctx(), p, -1); err != nil {
		t.Fatal(err)
	}
	e.waitEnvs(uid, "PodDeleted", func(envs []*eventsv1.Envelope) bool { return len(ofType(envs, "PodDeleted")) > 0 })
}

// TestEphemeralContainerWaitsForItsTarget: an ephemeral container whose
// target is not running (an init container that completed) is not
// started: CreateContainerError, retried under the back-off.
func TestEphemeralContainerWaitsForItsTarget(t *testing.T) {
	e := newEnv(t)
	p := newPod("target-done", func(p *corev1.Pod) {
		p.Spec.InitContainers = []*corev1.Container{{Name: "setup", Image: "busybox:1.36"}}
	})
	e.bind(p)
	uid := p.Metadata.Uid
	e.waitReady(uid)
	e.debug(p, &corev1.EphemeralContainer{Name: "debugger", Image: "busybox:1.36", TargetContainerName: "setup"})
	st := e.waitStatus(uid, "debugger waiting", func(st *corev1.PodStatus) bool {
		return ephStatus(st, "debugger").GetState().GetWaiting().GetReason() == "CreateContainerError"
	})
	if msg := ephStatus(st, "debugger").GetState().GetWaiting().GetMessage(); msg != `target container "setup" is not running` {
		t.Errorf("waiting message = %q", msg)
	}
	if envs := e.pub.Pod(uid); len(starts(envs, "debugger")) != 0 {
		t.Errorf("debugger started: %v", starts(envs, "debugger"))
	}
}
