package nodeagent_test

import (
	"testing"

	"github.com/podflow/podflow/nodeagent/sim"
	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/eventsv1"
)

func hostPortOn(port int32, protocol string) podOpt {
	return func(p *corev1.Pod) {
		p.Spec.Containers[0].Ports = []*corev1.ContainerPort{{ContainerPort: 80, HostPort: port, Protocol: protocol}}
	}
}

// TestHostPortConflictRejected: a pod bound to the node (by spec.nodeName,
// past the scheduler) asking for a host port a running pod holds is
// rejected as kubelet's admission rejects it: a Warning NodePorts, phase
// Failed with reason NodePorts and "Pod was rejected: Predicate NodePorts
// failed: …", a final PodFailed, no sandbox. The same port over UDP runs;
// once the holder is deleted the port is free again.
func TestHostPortConflictRejected(t *testing.T) {
	e := newEnv(t)
	holder := newPod("holder", hostPortOn(21017, "TCP"))
	e.bind(holder)
	e.waitStatus(holder.Metadata.Uid, "the holder Running and Ready", runningReady)

	late := newPod("late", hostPortOn(21017, ""))
	e.bind(late)
	envs := e.waitEnvs(late.Metadata.Uid, "final PodFailed", func(envs []*eventsv1.Envelope) bool {
		for _, x := range ofType(envs, "PodFailed") {
			if x.GetPodFailed().GetFinal() {
				return true
			}
		}
		return false
	})
	const msg = "Predicate NodePorts failed: node(s) didn't have free ports for the requested pod ports"
	if st := lastStatus(envs); st.GetPhase() != "Failed" || st.GetReason() != "NodePorts" || st.GetMessage() != "Pod was rejected: "+msg {
		t.Errorf("status phase %q reason %q message %q", st.GetPhase(), st.GetReason(), st.GetMessage())
	}
	if !hasRecord(envs, "Warning", "NodePorts", msg) {
		t.Errorf("records = %v, want a Warning NodePorts %q", records(envs), msg)
	}
	if n := len(ofType(envs, "PodSandboxReady")); n != 0 {
		t.Errorf("%d PodSandboxReady for the rejected pod, want none", n)
	}

	udp := newPod("udp", hostPortOn(21017, "UDP"))
	e.bind(udp)
	e.waitStatus(udp.Metadata.Uid, "the UDP pod Running and Ready", runningReady)

	if err := e.agent.HandlePodDelete(e.ctx(), holder, 0); err != nil {
		t.Fatal(err)
	}
	e.waitEnvs(holder.Metadata.Uid, "the holder's PodDeleted", func(envs []*eventsv1.Envelope) bool { return len(ofType(envs, "PodDeleted")) == 1 })
	again := newPod("again", hostPortOn(21017, "TCP"))
	e.bind(again)
	e.waitStatus(again.Metadata.Uid, "the port's next pod Running and Ready", runningReady)
}

// TestFinishedPodFreesItsHostPort: a pod that Succeeded or Failed holds
// no host port, as kubelet's admission counts only its active pods
// (filterOutInactivePods): the next pod asking for the port runs beside
// the finished one, which is not deleted.
func TestFinishedPodFreesItsHostPort(t *testing.T) {
	for _, tc := range []struct{ phase, code string }{{"Succeeded", "0"}, {"Failed", "1"}} {
		t.Run(tc.phase, func(t *testing.T) {
			e := newEnv(t)
			done := newPod("done", hostPortOn(21018, "TCP"), restartPolicy("Never"),
				annotate(sim.AnnotationExitAfter, "10ms", sim.AnnotationExitCode, tc.code))
			e.bind(done)
			e.waitStatus(done.Metadata.Uid, tc.phase, func(st *corev1.PodStatus) bool { return st.GetPhase() == tc.phase })
			next := newPod("next", hostPortOn(21018, "TCP"))
			e.bind(next)
			e.waitStatus(next.Metadata.Uid, "the port's next pod Running and Ready", runningReady)
		})
	}
}
