package nodeagent_test

import (
	"testing"

	"github.com/podflow/podflow/nodeagent/sim"
	corev1 "github.com/podflow/podflow/proto/corev1"
	eventsv1 "github.com/podflow/podflow/proto/eventsv1"
)

// TestEmptyDirSizeLimitEvicts: a running pod whose disk-backed emptyDir
// grows above its sizeLimit is evicted as kubelet's eviction manager
// evicts it: a Warning Evicted Event, its container killed (SIGTERM) and
// not restarted, Failed with reason Evicted and kubelet's message (also in
// a DisruptionTarget condition, reason TerminationByKubelet), one
// final PodFailed, its sandbox released. Usage at the limit is no
// eviction (TestEmptyDirOverLimit).
func TestEmptyDirSizeLimitEvicts(t *testing.T) {
	const msg = `Usage of EmptyDir volume "cache" exceeds the limit "1Mi". `
	e := newEnv(t)
	p := newPod("evict", func(p *corev1.Pod) {
		p.Spec.Volumes = []*corev1.Volume{{Name: "cache", EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: "1Mi"}}}
	})
	e.bind(p)
	e.waitStatus(p.Metadata.Uid, "Running", runningReady)
	if err := e.rt.SetVolumeUsage(p.Metadata.Uid, "cache", 1<<20+4096); err != nil {
		t.Fatal(err)
	}
	envs := e.waitEnvs(p.Metadata.Uid, "final PodFailed", func(envs []*eventsv1.Envelope) bool { return finalFailure(envs) != nil })
	st := lastStatus(envs)
	if st.GetPhase() != "Failed" || st.GetReason() != "Evicted" || st.GetMessage() != msg {
		t.Errorf("status phase %q reason %q message %q, want Failed Evicted %q", st.GetPhase(), st.GetReason(), st.GetMessage(), msg)
	}
	if f := finalFailure(envs); f.GetReason() != "Evicted" {
		t.Errorf("final PodFailed = %v, want reason Evicted", f)
	}
	if c := cond(st, "DisruptionTarget"); c.GetStatus() != "True" || c.GetReason() != "TerminationByKubelet" || c.GetMessage() != msg {
		t.Errorf("DisruptionTarget = %v, want True TerminationByKubelet %q", c, msg)
	}
	if !hasRecord(envs, "Warning", "Evicted", msg) {
		t.Errorf("records = %v, want a Warning Evicted Event %q", records(envs), msg)
	}
	cs := lastStatus(envs).GetContainerStatuses()[0]
	if term := cs.GetState().GetTerminated(); term.GetExitCode() != sim.ExitCodeSIGTERM {
		t.Errorf("container state = %v, want terminated by SIGTERM", cs.GetState())
	}
	if n := len(ofType(e.pub.Pod(p.Metadata.Uid), "ContainerStarted")); n != 1 {
		t.Errorf("%d ContainerStarted, want 1 (no restart after the eviction)", n)
	}
	if e.rt.Pods() != 0 {
		t.Errorf("%d sandboxes after the eviction", e.rt.Pods())
	}
}
