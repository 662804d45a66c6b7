package nodeagent_test

import (
	"testing"
	"time"

	"github.com/podflow/podflow/nodeagent"
	"github.com/podflow/podflow/nodeagent/sim"
	corev1 "github.com/podflow/podflow/proto/corev1"
	eventsv1 "github.com/podflow/podflow/proto/eventsv1"
)

func execHook(cmd ...string) *corev1.LifecycleHandler {
	return &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: cmd}}
}

func sleepHook(s int64) *corev1.LifecycleHandler {
	return &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: s}}
}

func withLifecycle(l *corev1.Lifecycle) podOpt {
	return func(p *corev1.Pod) { p.Spec.Containers[0].Lifecycle = l }
}

func deleted(envs []*eventsv1.Envelope) bool { return len(ofType(envs, "PodDeleted")) > 0 }

func TestPostStartHook(t *testing.T) {
	tcp := &corev1.LifecycleHandler{TcpSocket: &corev1.TCPSocketAction{Port: &corev1.IntOrString{Value: &corev1.IntOrString_IntVal{IntVal: 80}}}}
	httpGet := &corev1.LifecycleHandler{HttpGet: &corev1.HTTPGetAction{Path: "/warm", Port: &corev1.IntOrString{Value: &corev1.IntOrString_IntVal{IntVal: 80}}}}
	cases := []struct {
		name   string
		hook   *corev1.LifecycleHandler
		opts   []podOpt
		fails  bool
		probed bool // the runtime ran it (exec, httpGet)
	}{
		{name: "exec runs in the container", hook: execHook("sh", "-c", "touch /ready"), probed: true},
		{name: "httpGet is sent", hook: httpGet, probed: true},
		{name: "sleep", hook: sleepHook(1)},
		{name: "failing exec kills the container", hook: execHook("false"), opts: []podOpt{annotate(sim.AnnotationPostStart, sim.Fail)}, fails: true, probed: true},
		{name: "failing httpGet kills the container", hook: httpGet, opts: []podOpt{annotate(sim.AnnotationPostStart, sim.Fail)}, fails: true, probed: true},
		{name: "tcpSocket is not a hook handler", hook: tcp, fails: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e, rec := newRecordingEnv(t)
			p := newPod("post", append(tc.opts, withLifecycle(&corev1.Lifecycle{PostStart: tc.hook}))...)
			e.bind(p)
			if !tc.fails {
				envs := e.waitReady(p.Metadata.Uid)
				if hasRecord(envs, "Warning", eventsv1.ReasonFailedPostStartHook, "") {
					t.Error("FailedPostStartHook although the hook succeeded")
				}
				calls := rec.hookCalls()
				if tc.probed && (len(calls) != 1 || calls[0].kind != nodeagent.HookPostStart || string(calls[0].id) != startedIDs(envs)["app"]) {
					t.Errorf("hook calls %v, want one postStart in app", calls)
				}
				return
			}
			envs := e.waitEnvs(p.Metadata.Uid, "restarted after the failed hook", func(envs []*eventsv1.Envelope) bool {
				return len(ofType(envs, "ContainerStarted")) >= 2
			})
			if !hasRecord(envs, "Warning", eventsv1.ReasonFailedPostStartHook, "PostStartHook failed") {
				t.Error("no FailedPostStartHook Event")
			}
			if !hasRecord(envs, "Normal", eventsv1.ReasonKilling, "FailedPostStartHook") {
				t.Error("no Killing Event for the failed hook")
			}
			if ex := ofType(envs, "ContainerExited"); len(ex) == 0 || ex[0].GetContainerExited().GetExitCode() != sim.ExitCodeSIGTERM {
				t.Errorf("ContainerExited = %v, want the container stopped (SIGTERM)", ex)
			}
		})
	}
}

// Under restartPolicy Never a container whose postStart fails is not
// restarted: the pod fails.
func TestPostStartHookFailsThePodUnderNever(t *testing.T) {
	e := newEnv(t)
	p := newPod("post-never", restartPolicy("Never"), annotate(sim.AnnotationPostStart, sim.Fail),
		withLifecycle(&corev1.Lifecycle{PostStart: execHook("false")}))
	e.bind(p)
	st := e.waitStatus(p.Metadata.Uid, "Failed", func(st *corev1.PodStatus) bool { return st.GetPhase() == "Failed" })
	if cs := st.GetContainerStatuses()[0]; cs.GetRestartCount() != 0 || cs.GetState().GetTerminated() == nil {
		t.Errorf("container status %v", cs)
	}
}

// A sidecar has not started until its postStart hook returned: the next
// container waits for it.
func TestSidecarPostStartHoldsTheNextContainer(t *testing.T) {
	e, rec := newRecordingEnv(t)
	p := newPod("side-post", func(p *corev1.Pod) {
		p.Spec.InitContainers = []*corev1.Container{{Name: "proxy", Image: "envoy:1.30", RestartPolicy: "Always",
			Lifecycle: &corev1.Lifecycle{PostStart: sleepHook(10)}}} // 100 ms
	})
	e.bind(p)
	e.waitReady(p.Metadata.Uid)
	proxy, app := rec.startTime(p.Metadata.Uid, "proxy"), rec.startTime(p.Metadata.Uid, "app")
	if app.Sub(proxy) < 100*time.Millisecond {
		t.Errorf("app started %v after proxy, before proxy's 100 ms postStart hook returned", app.Sub(proxy))
	}
}

func TestPreStopHook(t *testing.T) {
	cases := []struct {
		name     string
		hook     *corev1.LifecycleHandler
		opts     []podOpt
		grace    time.Duration
		minDelay time.Duration // SIGTERM no earlier than this after the delete
		fails    bool
	}{
		{name: "exec before SIGTERM", hook: execHook("nginx", "-s", "quit"), grace: 10 * time.Second},
		{name: "sleep delays SIGTERM", hook: sleepHook(20), grace: 10 * time.Second, minDelay: 200 * time.Millisecond},
		{name: "sleep past the grace period is cut short", hook: sleepHook(1000), grace: 150 * time.Millisecond, minDelay: 150 * time.Millisecond},
		{name: "a failing hook is reported and the stop goes on", hook: execHook("false"), grace: 10 * time.Second,
			opts: []podOpt{annotate(sim.AnnotationPreStop, sim.Fail)}, fails: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e, rec := newRecordingEnv(t)
			p := newPod("pre", append(tc.opts, withLifecycle(&corev1.Lifecycle{PreStop: tc.hook}))...)
			e.bind(p)
			ready := e.waitReady(p.Metadata.Uid)
			id := startedIDs(ready)["app"]
			began := time.Now()
			if err := e.agent.HandlePodDelete(e.ctx(), p, tc.grace); err != nil {
				t.Fatal(err)
			}
			envs := e.waitEnvs(p.Metadata.Uid, "PodDeleted", deleted)
			took := time.Since(began)
			stop, ok := rec.stopped(id)
			if !ok {
				t.Fatal("the container was never stopped")
			}
			if d := stop.began.Sub(began); d < tc.minDelay {
				t.Errorf("SIGTERM %v after the delete, want at least %v (the hook first)", d, tc.minDelay)
			}
			if tc.hook.GetExec() != nil {
				calls := rec.hookCalls()
				if len(calls) != 1 || calls[0].kind != nodeagent.HookPreStop || !calls[0].at.Before(stop.began) {
					t.Errorf("hook calls %v, want one preStop before the stop at %v", calls, stop.began)
				}
			}
			if tc.grace < time.Second && took > 2*time.Second {
				t.Errorf("deletion took %v with a grace period of %v", took, tc.grace)
			}
			if term := lastStatus(envs).GetContainerStatuses()[0].GetState().GetTerminated(); term.GetExitCode() != sim.ExitCodeSIGTERM {
				t.Errorf("terminated %v, want SIGTERM (kubelet's minimum grace after the hook)", term)
			}
			if got := hasRecord(envs, "Warning", eventsv1.ReasonFailedPreStopHook, "PreStopHook failed"); got != tc.fails {
				t.Errorf("FailedPreStopHook Event: %v, want %v", got, tc.fails)
			}
		})
	}
}
