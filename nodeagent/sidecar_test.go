package nodeagent_test

import (
	"slices"
	"testing"
	"time"

	"github.com/podflow/podflow/nodeagent/sim"
	corev1 "github.com/podflow/podflow/proto/corev1"
	eventsv1 "github.com/podflow/podflow/proto/eventsv1"
)

// sidecars gives the pod init containers setup (regular), proxy (sidecar),
// migrate (regular) and logger (sidecar with a startup probe), in order.
func sidecars(p *corev1.Pod) {
	p.Spec.InitContainers = []*corev1.Container{
		{Name: "setup", Image: "busybox:1.36"},
		{Name: "proxy", Image: "envoy:1.30", RestartPolicy: "Always"},
		{Name: "migrate", Image: "busybox:1.36"},
		{Name: "logger", Image: "fluentbit:3", RestartPolicy: "Always",
			StartupProbe: &corev1.Probe{PeriodSeconds: 1, InitialDelaySeconds: 2}},
	}
}

func initStatus(st *corev1.PodStatus, name string) *corev1.ContainerStatus {
	for _, cs := range st.GetInitContainerStatuses() {
		if cs.GetName() == name {
			return cs
		}
	}
	return nil
}

func startOrder(envs []*eventsv1.Envelope) []string {
	var out []string
	for _, x := range ofType(envs, "ContainerStarted") {
		out = append(out, x.GetContainerStarted().GetContainer())
	}
	return out
}

func TestSidecarsStartInOrderAndLetTheAppRun(t *testing.T) {
	e := newEnv(t)
	p := newPod("sidecars", sidecars)
	e.bind(p)
	envs := e.waitReady(p.Metadata.Uid)
	st := lastStatus(envs)
	if got, want := startOrder(envs), []string{"setup", "proxy", "migrate", "logger", "app"}; !slices.Equal(got, want) {
		t.Errorf("start order = %v, want %v", got, want)
	}
	checks := []struct {
		name string
		ok   bool
	}{
		{"Running", st.GetPhase() == "Running"},
		{"Initialized", cond(st, "Initialized").GetStatus() == "True"},
		{"proxy running, started and ready", initStatus(st, "proxy").GetState().GetRunning() != nil &&
			initStatus(st, "proxy").GetStarted() && initStatus(st, "proxy").GetReady()},
		{"logger started", initStatus(st, "logger").GetStarted()},
		{"regular init containers completed", initStatus(st, "setup").GetState().GetTerminated().GetReason() == "Completed" &&
			initStatus(st, "migrate").GetState().GetTerminated().GetReason() == "Completed"},
		// kubelet's prober manager: a regular init container that
		// succeeded is ready, and not started (not running).
		{"a completed regular init container is ready, not started", initStatus(st, "setup").Started != nil &&
			!initStatus(st, "setup").GetStarted() && initStatus(st, "setup").GetReady() && initStatus(st, "migrate").GetReady()},
	}
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) {
			if !c.ok {
				t.Errorf("status: %v", st)
			}
		})
	}
	// The app started only once logger's startup probe had passed: before
	// that, a report shows logger running, not started, and the pod Pending.
	sawWaiting := false
	for _, x := range envs {
		s := x.GetPodStatusReport().GetStatus()
		if l := initStatus(s, "logger"); l.GetState().GetRunning() != nil && !l.GetStarted() {
			sawWaiting = true
			if s.GetPhase() != "Pending" || cond(s, "Initialized").GetStatus() != "False" || len(s.GetContainerStatuses()) > 0 && s.GetContainerStatuses()[0].GetState().GetRunning() != nil {
				t.Errorf("before logger started: %v", s)
			}
		}
	}
	if !sawWaiting {
		t.Error("no report of logger running before its startup probe passed")
	}
}

func TestSidecarFailingStartupProbeHoldsTheApp(t *testing.T) {
	e := newEnv(t)
	p := newPod("stuck", sidecars, annotate(sim.AnnotationStartup, sim.Fail))
	e.bind(p)
	envs := e.waitEnvs(p.Metadata.Uid, "logger restarted", func(envs []*eventsv1.Envelope) bool {
		n := 0
		for _, x := range ofType(envs, "ContainerStarted") {
			if x.GetContainerStarted().GetContainer() == "logger" {
				n++
			}
		}
		return n >= 2
	})
	if slices.Contains(startOrder(envs), "app") {
		t.Error("the app started although logger never passed its startup probe")
	}
	st := lastStatus(envs)
	if c := cond(st, "Initialized"); st.GetPhase() != "Pending" || c.GetStatus() != "False" || c.GetMessage() != "containers with incomplete status: [logger]" {
		t.Errorf("phase %q, Initialized %v", st.GetPhase(), c)
	}
}

// A sidecar that exits is restarted whatever the pod's restartPolicy; the
// app keeps running.
func TestSidecarRestartedUnderNever(t *testing.T) {
	e := newEnv(t)
	p := newPod("flaky", func(p *corev1.Pod) {
		p.Spec.InitContainers = []*corev1.Container{{Name: "proxy", Image: "envoy:1.30", RestartPolicy: "Always"}}
	}, restartPolicy("Never"), annotate(sim.AnnotationSidecarExitAfter, "30ms"))
	e.bind(p)
	st := e.waitStatus(p.Metadata.Uid, "proxy restarted twice", func(st *corev1.PodStatus) bool {
		return initStatus(st, "proxy").GetRestartCount() >= 2
	})
	if st.GetPhase() != "Running" || st.GetContainerStatuses()[0].GetState().GetRunning() == nil || st.GetContainerStatuses()[0].GetRestartCount() != 0 {
		t.Errorf("the app did not keep running: %v", st)
	}
	if lt := initStatus(st, "proxy").GetLastTerminationState().GetTerminated(); lt.GetExitCode() != 1 {
		t.Errorf("proxy lastState = %v, want exit 1", lt)
	}
}

// Sidecars count for readiness: an unready sidecar makes the pod unready.
func TestSidecarReadiness(t *testing.T) {
	e := newEnv(t)
	p := newPod("unready", func(p *corev1.Pod) {
		p.Spec.InitContainers = []*corev1.Container{{Name: "proxy", Image: "envoy:1.30", RestartPolicy: "Always",
			ReadinessProbe: &corev1.Probe{PeriodSeconds: 1, FailureThreshold: 1}}}
	}, annotate(sim.AnnotationReadiness, sim.Fail))
	e.bind(p)
	st := e.waitStatus(p.Metadata.Uid, "ContainersReady False for proxy", func(st *corev1.PodStatus) bool {
		return cond(st, "ContainersReady").GetMessage() == "containers with unready status: [proxy]"
	})
	if st.GetPhase() != "Running" || cond(st, "Ready").GetStatus() != "False" || !st.GetContainerStatuses()[0].GetReady() {
		t.Errorf("status: %v", st)
	}
}

// Sidecars do not keep a finished pod running: once the app has completed
// for good they are stopped, last one first, and the pod Succeeds.
func TestSidecarsDoNotBlockCompletion(t *testing.T) {
	e, rec := newRecordingEnv(t, func(c *sim.Config) { c.StopDelay = 20 * time.Millisecond })
	p := newPod("job", sidecars, restartPolicy("Never"), annotate(sim.AnnotationExitAfter, "50ms"))
	e.bind(p)
	envs := e.waitEnvs(p.Metadata.Uid, "Succeeded", func(envs []*eventsv1.Envelope) bool {
		return lastStatus(envs).GetPhase() == "Succeeded"
	})
	st := lastStatus(envs)
	for _, name := range []string{"proxy", "logger"} {
		if term := initStatus(st, name).GetState().GetTerminated(); term.GetExitCode() != sim.ExitCodeSIGTERM {
			t.Errorf("%s: %v, want terminated by SIGTERM", name, initStatus(st, name).GetState())
		}
		if !hasRecord(envs, "Normal", "Killing", "Stopping container "+name) {
			t.Errorf("no Killing record for %s", name)
		}
	}
	ids := startedIDs(envs)
	proxy, _ := rec.stopped(ids["proxy"])
	logger, _ := rec.stopped(ids["logger"])
	if !logger.returned.Before(proxy.began) {
		t.Errorf("proxy stopped at %v, before logger (declared after it) had stopped at %v", proxy.began, logger.returned)
	}
}

func startedIDs(envs []*eventsv1.Envelope) map[string]string {
	ids := map[string]string{}
	for _, x := range ofType(envs, "ContainerStarted") {
		ids[x.GetContainerStarted().GetContainer()] = x.GetContainerStarted().GetContainerId()
	}
	return ids
}

// On deletion the app containers stop first, then the sidecars in reverse
// order, each once the ones after it have stopped.
func TestSidecarsStopAfterTheApp(t *testing.T) {
	e, rec := newRecordingEnv(t, func(c *sim.Config) { c.StopDelay = 20 * time.Millisecond })
	p := newPod("ordered", sidecars)
	e.bind(p)
	e.waitReady(p.Metadata.Uid)
	if err := e.agent.HandlePodDelete(e.ctx(), p, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	envs := e.waitEnvs(p.Metadata.Uid, "PodDeleted", func(envs []*eventsv1.Envelope) bool { return len(ofType(envs, "PodDeleted")) > 0 })
	checkSeq(t, envs)
	ids := startedIDs(envs)
	order := []string{"app", "logger", "proxy"}
	for i := 1; i < len(order); i++ {
		before, ok1 := rec.stopped(ids[order[i-1]])
		after, ok2 := rec.stopped(ids[order[i]])
		if !ok1 || !ok2 || after.began.Before(before.returned) {
			t.Errorf("%s stopped (%v) before %s had (%v)", order[i], after.began, order[i-1], before.returned)
		}
	}
	if k := ofType(envs, "PodKilled"); len(k) != 1 || len(k[0].GetPodKilled().GetContainers()) != 3 {
		t.Errorf("PodKilled = %v", k)
	}
	for _, name := range []string{"proxy", "logger"} {
		if term := initStatus(lastStatus(envs), name).GetState().GetTerminated(); term.GetExitCode() != sim.ExitCodeSIGTERM {
			t.Errorf("%s: %v, want SIGTERM within the grace period", name, term)
		}
	}
}
