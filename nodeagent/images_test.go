package nodeagent_test

import (
	"testing"

	"google.golang.org/protobuf/proto"

	corev1 "github.com/podflow/podflow/proto/corev1"
	eventsv1 "github.com/podflow/podflow/proto/eventsv1"
)

func statusOf(st *corev1.PodStatus, name string) *corev1.ContainerStatus {
	for _, cs := range st.GetContainerStatuses() {
		if cs.GetName() == name {
			return cs
		}
	}
	return nil
}

func withImage(p *corev1.Pod, container, image string) *corev1.Pod {
	p = proto.Clone(p).(*corev1.Pod)
	for _, c := range p.Spec.Containers {
		if c.Name == container {
			c.Image = image
		}
	}
	return p
}

// A pod update that changes a running container's image restarts that
// container with the new image as kubelet does (its spec hash changed): a
// Killing Event "Container app definition changed, will be restarted",
// the new image pulled, restartCount 1 and lastState the killed instance
// — under restartPolicy Never too. The other container is not touched.
func TestImageUpdateRestartsThatContainer(t *testing.T) {
	e := newEnv(t)
	p := newPod("update", restartPolicy("Never"), func(p *corev1.Pod) {
		p.Spec.Containers = append(p.Spec.Containers, &corev1.Container{Name: "side", Image: "busybox:1"})
	})
	e.bind(p)
	uid := p.Metadata.Uid
	before := e.waitStatus(uid, "Running and Ready", runningReady)
	side := statusOf(before, "side")

	e.bind(withImage(p, "app", "nginx:1.28"))
	st := e.waitStatus(uid, "app restarted with nginx:1.28", func(st *corev1.PodStatus) bool {
		cs := statusOf(st, "app")
		return runningReady(st) && cs.GetImage() == "nginx:1.28" && cs.GetRestartCount() == 1
	})
	app := statusOf(st, "app")
	if app.GetContainerId() == statusOf(before, "app").GetContainerId() {
		t.Errorf("app still runs instance %s", app.GetContainerId())
	}
	if lt := app.GetLastTerminationState().GetTerminated(); lt == nil || lt.GetContainerId() != statusOf(before, "app").GetContainerId() {
		t.Errorf("app lastState = %v, want the killed instance", app.GetLastTerminationState())
	}
	if got := statusOf(st, "side"); got.GetContainerId() != side.GetContainerId() || got.GetRestartCount() != 0 || got.GetState().GetRunning() == nil {
		t.Errorf("side = %v, want untouched %v", got, side)
	}
	envs := e.pub.Pod(uid)
	for _, want := range []struct{ typ, reason, msg string }{
		{"Normal", eventsv1.ReasonKilling, "Container app definition changed, will be restarted"},
		{"Normal", eventsv1.ReasonPulling, `Pulling image "nginx:1.28"`},
	} {
		if !hasRecord(envs, want.typ, want.reason, want.msg) {
			t.Errorf("no %s %s event %q", want.typ, want.reason, want.msg)
		}
	}
	for _, r := range records(envs) {
		if r.GetReason() == eventsv1.ReasonKilling && r.GetMessage() != "Container app definition changed, will be restarted" {
			t.Errorf("unexpected Killing %q", r.GetMessage())
		}
	}

	// The same update again (a reconcile) restarts nothing; then the
	// sidecar's image changes and only it restarts.
	p = withImage(p, "app", "nginx:1.28")
	e.bind(p)
	if err := e.agent.Reconcile(e.ctx()); err != nil {
		t.Fatal(err)
	}
	e.bind(withImage(p, "side", "busybox:2"))
	st = e.waitStatus(uid, "side restarted with busybox:2", func(st *corev1.PodStatus) bool {
		cs := statusOf(st, "side")
		return runningReady(st) && cs.GetImage() == "busybox:2" && cs.GetRestartCount() == 1
	})
	if got := statusOf(st, "app"); got.GetContainerId() != app.GetContainerId() || got.GetRestartCount() != 1 {
		t.Errorf("app = %v, want untouched %v", got, app)
	}
}

// An image changed while no agent ran (the update came before a restart)
// is applied by the next agent, which adopts the running instance and
// finds it running the old image.
func TestImageUpdateAppliedAfterAgentRestart(t *testing.T) {
	e := newEnv(t)
	p := newPod("readopt")
	e.bind(p)
	uid := p.Metadata.Uid
	e.waitStatus(uid, "Running and Ready", runningReady)
	e.agent.Stop()
	e.store.PutPod(withImage(p, "app", "nginx:1.28"))
	e.agent = e.newAgent()
	if err := e.agent.Reconcile(e.ctx()); err != nil {
		t.Fatal(err)
	}
	e.waitStatus(uid, "app restarted with nginx:1.28", func(st *corev1.PodStatus) bool {
		cs := statusOf(st, "app")
		return runningReady(st) && cs.GetImage() == "nginx:1.28" && cs.GetRestartCount() == 1
	})
	if !hasRecord(e.pub.Pod(uid), "Normal", eventsv1.ReasonKilling, "Container app definition changed, will be restarted") {
		t.Error("no Killing event")
	}
}
