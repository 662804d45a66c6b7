package nodeagent_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/podflow/podflow/nodeagent"
	"github.com/podflow/podflow/nodeagent/nodeagenttest"
	"github.com/podflow/podflow/nodeagent/sim"
	corev1 "github.com/podflow/podflow/proto/corev1"
	eventsv1 "github.com/podflow/podflow/proto/eventsv1"
	"google.golang.org/protobuf/types/known/timestamppb"
)

func runningReady(st *corev1.PodStatus) bool {
	return st.GetPhase() == "Running" && cond(st, "Ready").GetStatus() == "True"
}

func TestHappyPath(t *testing.T) {
	e := newEnv(t)
	p := newPod("web")
	e.bind(p)
	envs := e.waitReady(p.Metadata.Uid)
	st := lastStatus(envs)
	if !runningReady(st) {
		t.Fatalf("status after PodReady = %v", st)
	}
	inCIDR(t, st.GetPodIp())
	if len(st.GetPodIps()) != 1 || st.GetPodIps()[0].GetIp() != st.GetPodIp() {
		t.Errorf("podIPs = %v, want [%s]", st.GetPodIps(), st.GetPodIp())
	}
	if st.GetHostIp() != "172.16.0.1" || st.GetQosClass() != "BestEffort" || st.GetStartTime() == nil {
		t.Errorf("hostIP %q qosClass %q startTime %v", st.GetHostIp(), st.GetQosClass(), st.GetStartTime())
	}
	for _, typ := range []string{"PodScheduled", "PodReadyToStartContainers", "Initialized", "ContainersReady", "Ready"} {
		if c := cond(st, typ); c.GetStatus() != "True" || c.GetLastTransitionTime() == nil {
			t.Errorf("condition %s = %v, want True with a transition time", typ, c)
		}
	}
	cs := st.GetContainerStatuses()[0]
	if cs.GetState().GetRunning() == nil || !cs.GetReady() || !cs.GetStarted() || cs.GetImageId() == "" ||
		cs.GetContainerId() == "" || cs.GetRestartCount() != 0 {
		t.Errorf("container status = %v", cs)
	}

	checkSeq(t, envs)
	var order []eventsv1.Type
	for _, x := range envs {
		if x.Type() != "PodStatusReport" && x.Type() != "ImagePulling" {
			order = append(order, x.Type())
		}
	}
	want := []eventsv1.Type{"PodSandboxReady", "ImagePulled", "ContainerStarted", "PodRunning", "PodReady"}
	if !slices.Equal(order, want) {
		t.Errorf("events = %v, want %v", order, want)
	}
	if sb := ofType(envs, "PodSandboxReady")[0].GetPodSandboxReady(); sb.GetPodIp() != st.GetPodIp() {
		t.Errorf("PodSandboxReady IP %q, status IP %q", sb.GetPodIp(), st.GetPodIp())
	}
	var reasons []string
	for _, r := range records(envs) {
		reasons = append(reasons, r.GetReason())
	}
	if !slices.Equal(reasons, []string{"Pulling", "Pulled", "Created", "Started"}) {
		t.Errorf("event records = %v", reasons)
	}
	if e.rt.IPAM().InUse() != 1 {
		t.Errorf("IPs in use = %d, want 1", e.rt.IPAM().InUse())
	}
}

func TestEventsOfOneTypeInOneStepAreDistinct(t *testing.T) {
	e := newEnv(t)
	p := newPod("pair", func(p *corev1.Pod) {
		p.Spec.Containers = append(p.Spec.Containers, &corev1.Container{Name: "sidecar", Image: "envoy:1.30"})
	})
	e.bind(p)
	envs := e.waitReady(p.Metadata.Uid)
	checkSeq(t, envs)
	var started []string
	for _, x := range ofType(envs, "ContainerStarted") {
		started = append(started, x.GetContainerStarted().GetContainer())
	}
	if !slices.Equal(started, []string{"app", "sidecar"}) || len(ofType(envs, "ImagePulled")) != 2 {
		t.Errorf("ContainerStarted for %v, %d ImagePulled: an event was deduplicated away", started, len(ofType(envs, "ImagePulled")))
	}
}

func TestInitContainersAndProbes(t *testing.T) {
	e := newEnv(t)
	probe := &corev1.Probe{PeriodSeconds: 1, SuccessThreshold: 2}
	p := newPod("init", func(p *corev1.Pod) {
		p.Spec.InitContainers = []*corev1.Container{{Name: "setup", Image: "busybox:1.36"}, {Name: "migrate", Image: "busybox:1.36"}}
		c := p.Spec.Containers[0]
		c.StartupProbe, c.ReadinessProbe, c.LivenessProbe = probe, probe, probe
		c.Resources = &corev1.ResourceRequirements{
			Limits:   map[string]string{"cpu": "1", "memory": "128Mi"},
			Requests: map[string]string{"cpu": "1000m", "memory": "128Mi"},
		}
	})
	e.bind(p)
	envs := e.waitReady(p.Metadata.Uid)
	st := lastStatus(envs)
	for _, ic := range st.GetInitContainerStatuses() {
		if ic.GetState().GetTerminated().GetReason() != "Completed" {
			t.Errorf("init container %s: %v", ic.GetName(), ic.GetState())
		}
	}
	if st.GetQosClass() != "Burstable" { // the init containers set no limits
		t.Errorf("qosClass = %q, want Burstable", st.GetQosClass())
	}
	var started []string
	for _, x := range ofType(envs, "ContainerStarted") {
		started = append(started, x.GetContainerStarted().GetContainer())
	}
	if !slices.Equal(started, []string{"setup", "migrate", "app"}) {
		t.Errorf("start order = %v", started)
	}
	// Before the startup and readiness probes passed the pod was Running but
	// not Ready.
	sawUnready := false
	for _, x := range envs {
		if s := x.GetPodStatusReport().GetStatus(); s.GetPhase() == "Running" && cond(s, "Ready").GetStatus() == "False" {
			sawUnready = true
		}
	}
	if !sawUnready {
		t.Error("pod was Ready as soon as it ran, before its probes passed")
	}
}

// TestTakePodBound: a pod handed over runs as one handed a copy does,
// and its worker holds the pod's own spec (trimmed of the scheduling
// fields); a pod handed to HandlePodBound is copied and left as it was.
func TestTakePodBound(t *testing.T) {
	e := newEnv(t)
	tolerate := func(p *corev1.Pod) {
		p.Spec.Tolerations = []*corev1.Toleration{{Key: "node.kubernetes.io/not-ready", Operator: "Exists", Effect: "NoExecute"}}
	}
	taken, copied := newPod("taken", tolerate), newPod("copied", tolerate)
	spec := taken.Spec
	if err := e.agent.TakePodBound(e.ctx(), taken); err != nil {
		t.Fatal(err)
	}
	e.bind(copied)
	for _, p := range []*corev1.Pod{taken, copied} {
		e.waitStatus(p.Metadata.Uid, "Running and Ready", runningReady)
	}
	if got := nodeagent.WorkerPod(e.agent, "uid-taken"); got.GetSpec() != spec || len(spec.Tolerations) != 0 {
		t.Errorf("the taken pod's worker holds spec %p (tolerations %v), want the pod's own %p without", got.GetSpec(), got.GetSpec().GetTolerations(), spec)
	}
	if got := nodeagent.WorkerPod(e.agent, "uid-copied"); got.GetSpec() == copied.Spec || len(copied.Spec.Tolerations) != 1 {
		t.Errorf("HandlePodBound's pod aliased or changed: tolerations %v", copied.Spec.Tolerations)
	}
}

func TestDuplicateBoundIsNoop(t *testing.T) {
	e := newEnv(t)
	p := newPod("dup")
	e.bind(p)
	e.waitStatus(p.Metadata.Uid, "Running and Ready", runningReady)
	for range 3 {
		if err := e.agent.HandlePodBound(e.ctx(), p); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.agent.Reconcile(e.ctx()); err != nil {
		t.Fatal(err)
	}
	// A later change proves the worker processed everything before it.
	if err := e.agent.HandlePodDelete(e.ctx(), p, 0); err != nil {
		t.Fatal(err)
	}
	envs := e.waitEnvs(p.Metadata.Uid, "PodDeleted", func(envs []*eventsv1.Envelope) bool { return len(ofType(envs, "PodDeleted")) == 1 })
	for _, typ := range []eventsv1.Type{"PodSandboxReady", "ContainerStarted", "PodRunning", "PodReady"} {
		if n := len(ofType(envs, typ)); n != 1 {
			t.Errorf("%s published %d times, want 1", typ, n)
		}
	}
	if err := e.agent.HandlePodBound(e.ctx(), newPod("other", func(p *corev1.Pod) { p.Spec.NodeName = "node-2" })); !errors.Is(err, nodeagent.ErrWrongNode) {
		t.Errorf("bind to another node: err = %v, want ErrWrongNode", err)
	}
}

func TestFailureInjection(t *testing.T) {
	withConfigMap := func(p *corev1.Pod) {
		p.Spec.Volumes = []*corev1.Volume{{Name: "config", ConfigMap: &corev1.ConfigMapVolumeSource{Name: "app-config"}}}
	}
	withReadiness := func(p *corev1.Pod) { p.Spec.Containers[0].ReadinessProbe = &corev1.Probe{PeriodSeconds: 1} }
	withLiveness := func(p *corev1.Pod) { p.Spec.Containers[0].LivenessProbe = &corev1.Probe{PeriodSeconds: 1} }
	tests := []struct {
		name string
		opts []podOpt
		// want holds on the pod's envelopes once it reached the expected state.
		want func(envs []*eventsv1.Envelope) bool
		// check asserts more about the final envelopes.
		check func(t *testing.T, e *env, envs []*eventsv1.Envelope)
	}{{
		name: "image pull fails",
		opts: []podOpt{annotate(sim.AnnotationImagePull, sim.Fail)},
		want: func(envs []*eventsv1.Envelope) bool {
			// ErrImagePull, then ImagePullBackOff, then a retry failing again.
			var seen []string
			for _, x := range envs {
				if r := x.GetPodStatusReport(); r != nil {
					if w := waiting(r.GetStatus()); len(seen) == 0 || seen[len(seen)-1] != w {
						seen = append(seen, w)
					}
				}
			}
			return strings.Contains(strings.Join(seen, ","), "ErrImagePull,ImagePullBackOff,ErrImagePull,ImagePullBackOff")
		},
		check: func(t *testing.T, e *env, envs []*eventsv1.Envelope) {
			if lastStatus(envs).GetPhase() != "Pending" {
				t.Errorf("phase = %q, want Pending", lastStatus(envs).GetPhase())
			}
			failed := ofType(envs, "PodFailed")
			if len(failed) == 0 || failed[0].GetPodFailed().GetReason() != eventsv1.ReasonErrImagePull || failed[0].GetPodFailed().GetContainer() != "app" {
				t.Errorf("PodFailed = %v", failed)
			}
			if !hasRecord(envs, "Warning", "Failed", `Failed to pull image "nginx:1.27"`) || !hasRecord(envs, "Normal", "BackOff", "Back-off pulling image") {
				t.Error("missing Failed / BackOff event records")
			}
		},
	}, {
		name: "sandbox creation fails",
		opts: []podOpt{annotate(sim.AnnotationSandbox, sim.Fail)},
		want: func(envs []*eventsv1.Envelope) bool { return len(ofType(envs, "PodFailed")) >= 3 },
		check: func(t *testing.T, e *env, envs []*eventsv1.Envelope) {
			st := lastStatus(envs)
			if st.GetPhase() != "Pending" || waiting(st) != "ContainerCreating" || cond(st, "PodReadyToStartContainers").GetStatus() != "False" || st.GetPodIp() != "" {
				t.Errorf("status = %v", st)
			}
			if f := ofType(envs, "PodFailed")[0].GetPodFailed(); f.GetReason() != eventsv1.ReasonFailedCreatePodSandBox {
				t.Errorf("PodFailed reason %q", f.GetReason())
			}
			if !hasRecord(envs, "Warning", "FailedCreatePodSandBox", "Failed to create pod sandbox") {
				t.Error("missing FailedCreatePodSandBox record")
			}
			if n := e.rt.IPAM().InUse(); n != 0 {
				t.Errorf("failed sandboxes hold %d IPs", n)
			}
		},
	}, {
		name: "mount fails by annotation",
		opts: []podOpt{annotate(sim.AnnotationMount, sim.Fail)},
		want: func(envs []*eventsv1.Envelope) bool { return len(ofType(envs, "PodFailed")) >= 2 },
		check: func(t *testing.T, e *env, envs []*eventsv1.Envelope) {
			st := lastStatus(envs)
			if st.GetPhase() != "Pending" || waiting(st) != "ContainerCreating" || cond(st, "PodReadyToStartContainers").GetStatus() != "True" {
				t.Errorf("status = %v", st)
			}
			if !hasRecord(envs, "Warning", "FailedMount", "MountVolume.SetUp failed") {
				t.Error("missing FailedMount record")
			}
		},
	}, {
		name: "mount fails on a missing ConfigMap, then heals",
		opts: []podOpt{withConfigMap},
		want: func(envs []*eventsv1.Envelope) bool { return len(ofType(envs, "PodFailed")) >= 2 },
		check: func(t *testing.T, e *env, envs []*eventsv1.Envelope) {
			if !hasRecord(envs, "Warning", "FailedMount", `MountVolume.SetUp failed for volume "config" : configmap "app-config" not found`) {
				t.Errorf("records = %v", records(envs))
			}
			if waiting(lastStatus(envs)) != "ContainerCreating" {
				t.Errorf("waiting = %q", waiting(lastStatus(envs)))
			}
			e.store.PutConfigMap(&corev1.ConfigMap{Metadata: &corev1.ObjectMeta{Namespace: "default", Name: "app-config"}, Data: map[string]string{"k": "v"}})
			e.waitStatus("uid-mount-fails-on-a-missing-ConfigMap,-then-heals", "Running after the ConfigMap appeared", runningReady)
		},
	}, {
		name: "readiness fails",
		opts: []podOpt{annotate(sim.AnnotationReadiness, sim.Fail), withReadiness},
		want: func(envs []*eventsv1.Envelope) bool { return len(ofType(envs, "PodNotReady")) > 0 },
		check: func(t *testing.T, e *env, envs []*eventsv1.Envelope) {
			st := lastStatus(envs)
			for _, typ := range []string{"Ready", "ContainersReady"} {
				if c := cond(st, typ); c.GetStatus() != "False" || c.GetReason() != "ContainersNotReady" || !strings.Contains(c.GetMessage(), "[app]") {
					t.Errorf("%s = %v", typ, c)
				}
			}
			if st.GetPhase() != "Running" || st.GetContainerStatuses()[0].GetReady() || !st.GetContainerStatuses()[0].GetStarted() {
				t.Errorf("status = %v", st)
			}
			if nr := ofType(envs, "PodNotReady")[0].GetPodNotReady(); nr.GetReason() != eventsv1.ReasonUnhealthy || nr.GetContainer() != "app" {
				t.Errorf("PodNotReady = %v", nr)
			}
			if len(ofType(envs, "PodReady")) != 0 || !hasRecord(envs, "Warning", "Unhealthy", "Readiness probe failed") {
				t.Error("pod became Ready or no Unhealthy record")
			}
		},
	}, {
		name: "liveness fails",
		opts: []podOpt{annotate(sim.AnnotationLiveness, sim.Fail), withLiveness},
		want: func(envs []*eventsv1.Envelope) bool {
			st := lastStatus(envs)
			return st != nil && st.GetContainerStatuses()[0].GetRestartCount() >= 2
		},
		check: func(t *testing.T, e *env, envs []*eventsv1.Envelope) {
			if !hasRecord(envs, "Normal", "Killing", "Container app failed liveness probe, will be restarted") || !hasRecord(envs, "Warning", "Unhealthy", "Liveness probe failed") {
				t.Error("missing Killing / Unhealthy records")
			}
			if len(ofType(envs, "ContainerExited")) < 2 {
				t.Error("no ContainerExited for the killed containers")
			}
		},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			p := newPod(strings.ReplaceAll(tc.name, " ", "-"), tc.opts...)
			e.bind(p)
			envs := e.waitEnvs(p.Metadata.Uid, tc.name, tc.want)
			checkSeq(t, envs)
			tc.check(t, e, envs)
		})
	}
}

func backoffs(envs []*eventsv1.Envelope) []string {
	var out []string
	for _, x := range ofType(envs, "PodFailed") {
		if f := x.GetPodFailed(); f.GetReason() == eventsv1.ReasonCrashLoopBackOff {
			out = append(out, strings.Fields(f.GetMessage())[1])
		}
	}
	return out
}

func TestCrashLoop(t *testing.T) {
	tests := []struct {
		policy, code string
		restarts     bool
		phase        string // final phase when not restarting
	}{
		{"Always", "1", true, ""},
		{"Always", "0", true, ""},
		{"OnFailure", "1", true, ""},
		{"OnFailure", "0", false, "Succeeded"},
		{"Never", "1", false, "Failed"},
		{"Never", "0", false, "Succeeded"},
	}
	for _, tc := range tests {
		t.Run(tc.policy+"/exit-"+tc.code, func(t *testing.T) {
			e := newEnv(t)
			p := newPod("crash", restartPolicy(tc.policy), annotate(sim.AnnotationExitAfter, "5ms", sim.AnnotationExitCode, tc.code))
			e.bind(p)
			if tc.restarts {
				envs := e.waitEnvs(p.Metadata.Uid, "five back-offs", func(envs []*eventsv1.Envelope) bool { return len(backoffs(envs)) >= 5 })
				if got, want := backoffs(envs)[:5], []string{"20ms", "40ms", "80ms", "160ms", "160ms"}; !slices.Equal(got, want) {
					t.Errorf("back-offs = %v, want %v (doubling to the cap)", got, want)
				}
				var counts []int32
				for _, x := range ofType(envs, "ContainerStarted") {
					counts = append(counts, x.GetContainerStarted().GetRestartCount())
				}
				if !slices.Equal(counts[:5], []int32{0, 1, 2, 3, 4}) {
					t.Errorf("restart counts = %v", counts)
				}
				var st *corev1.PodStatus
				for _, x := range envs {
					if s := x.GetPodStatusReport().GetStatus(); waiting(s) == "CrashLoopBackOff" {
						st = s
					}
				}
				cs := st.GetContainerStatuses()[0]
				wantReason := map[string]string{"0": "Completed", "1": "Error"}[tc.code]
				if st.GetPhase() != "Running" || cs.GetLastTerminationState().GetTerminated().GetReason() != wantReason || cs.GetReady() {
					t.Errorf("status in back-off = %v", st)
				}
				if !hasRecord(envs, "Warning", "BackOff", "Back-off restarting failed container app") {
					t.Error("missing BackOff record")
				}
				checkSeq(t, envs)
				return
			}
			st := e.waitStatus(p.Metadata.Uid, tc.phase, func(st *corev1.PodStatus) bool { return st.GetPhase() == tc.phase })
			if cs := st.GetContainerStatuses()[0]; cs.GetRestartCount() != 0 || cs.GetState().GetTerminated() == nil {
				t.Errorf("container status = %v", cs)
			}
			if c := cond(st, "Ready"); c.GetStatus() != "False" || c.GetReason() != "PodCompleted" {
				t.Errorf("Ready = %v", c)
			}
			e.waitEnvs(p.Metadata.Uid, "IP released", func([]*eventsv1.Envelope) bool { return e.rt.IPAM().InUse() == 0 })
			// Deleting the pod puts a last event behind everything it reported.
			if err := e.agent.HandlePodDelete(e.ctx(), p, 0); err != nil {
				t.Fatal(err)
			}
			envs := e.waitEnvs(p.Metadata.Uid, "PodDeleted", func(envs []*eventsv1.Envelope) bool { return len(ofType(envs, "PodDeleted")) == 1 })
			if n := len(ofType(envs, "ContainerStarted")); n != 1 {
				t.Errorf("container started %d times", n)
			}
			final := false
			for _, x := range ofType(envs, "PodFailed") {
				final = final || x.GetPodFailed().GetFinal()
			}
			if final != (tc.phase == "Failed") {
				t.Errorf("final PodFailed published = %v for phase %s", final, tc.phase)
			}
			checkSeq(t, envs)
		})
	}
}

func TestCrashLoopBackOffResetsAfterLongRun(t *testing.T) {
	rt, err := sim.New(sim.DefaultConfig(podCIDR))
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	e := &env{t: t, rt: rt, store: nodeagenttest.NewStore(), pub: nodeagenttest.NewPublisher()}
	cfg := fastConfig()
	cfg.CrashLoopBackOff.ResetAfter = 30 * time.Millisecond // every run below lasts longer
	a, err := nodeagent.New(cfg, rt, e.store, e.pub)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Stop()
	if err := a.Start(e.ctx()); err != nil {
		t.Fatal(err)
	}
	e.agent = a
	p := newPod("long-runs", annotate(sim.AnnotationExitAfter, "40ms", sim.AnnotationExitCode, "1"))
	e.bind(p)
	envs := e.waitEnvs(p.Metadata.Uid, "three back-offs", func(envs []*eventsv1.Envelope) bool { return len(backoffs(envs)) >= 3 })
	if got := backoffs(envs)[:3]; !slices.Equal(got, []string{"20ms", "20ms", "20ms"}) {
		t.Errorf("back-offs = %v, want the initial one each time", got)
	}
}

func TestDeleteGraceful(t *testing.T) {
	tests := []struct {
		name     string
		opts     []podOpt
		grace    time.Duration
		exitCode int32
	}{
		{"SIGTERM honoured", nil, 10 * time.Second, sim.ExitCodeSIGTERM},
		{"killed after grace", []podOpt{annotate(sim.AnnotationIgnoreSIGTERM, "true")}, 30 * time.Millisecond, sim.ExitCodeSIGKILL},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			p := newPod("del", tc.opts...)
			e.bind(p)
			e.waitStatus(p.Metadata.Uid, "Running and Ready", runningReady)
			if err := e.agent.HandlePodDelete(e.ctx(), p, tc.grace); err != nil {
				t.Fatal(err)
			}
			envs := e.waitEnvs(p.Metadata.Uid, "PodDeleted", func(envs []*eventsv1.Envelope) bool { return len(ofType(envs, "PodDeleted")) > 0 })
			checkSeq(t, envs)
			if envs[len(envs)-1].Type() != "PodDeleted" || envs[len(envs)-1].GetId() != "uid/"+p.Metadata.Uid+"/PodDeleted" {
				t.Errorf("last envelope = %v", envs[len(envs)-1])
			}
			if k := ofType(envs, "PodKilled"); len(k) != 1 || !slices.Equal(k[0].GetPodKilled().GetContainers(), []string{"app"}) {
				t.Errorf("PodKilled = %v", k)
			}
			if !hasRecord(envs, "Normal", "Killing", "Stopping container app") {
				t.Error("missing Killing record")
			}
			st := lastStatus(envs)
			if term := st.GetContainerStatuses()[0].GetState().GetTerminated(); term.GetExitCode() != tc.exitCode {
				t.Errorf("terminated = %v, want exit code %d", term, tc.exitCode)
			}
			if cond(st, "Ready").GetStatus() != "False" || ofType(envs, "PodNotReady") == nil {
				t.Error("pod still Ready after deletion")
			}
			if e.rt.IPAM().InUse() != 0 || e.rt.Pods() != 0 {
				t.Errorf("after delete: %d IPs, %d sandboxes", e.rt.IPAM().InUse(), e.rt.Pods())
			}
			// A redelivered bind or delete changes nothing.
			n := len(e.pub.Envelopes())
			if err := e.agent.HandlePodBound(e.ctx(), p); err != nil {
				t.Fatal(err)
			}
			if err := e.agent.HandlePodDelete(e.ctx(), p, 0); err != nil {
				t.Fatal(err)
			}
			if _, ok := e.agent.PodStatus(p.Metadata.Uid); ok || e.rt.Pods() != 0 || len(e.pub.Envelopes()) != n {
				t.Error("a redelivered event after deletion restarted the pod")
			}
		})
	}
}

// TestTeardownFailureIsReportedAndRetried: a sandbox that cannot be
// removed keeps the pod Terminating with a Warning FailedKillPod per
// attempt, retried under SetupBackOff, until removal succeeds and the pod
// is deleted.
func TestTeardownFailureIsReportedAndRetried(t *testing.T) {
	e := newEnv(t)
	p := newPod("stuck", annotate(sim.AnnotationTeardown, "3"))
	e.bind(p)
	e.waitStatus(p.Metadata.Uid, "Running and Ready", runningReady)
	if err := e.agent.HandlePodDelete(e.ctx(), p, 0); err != nil {
		t.Fatal(err)
	}
	envs := e.waitEnvs(p.Metadata.Uid, "PodDeleted", func(envs []*eventsv1.Envelope) bool { return len(ofType(envs, "PodDeleted")) > 0 })
	checkSeq(t, envs)
	var msgs []string
	for _, r := range records(envs) {
		if r.GetReason() == eventsv1.ReasonFailedKillPod {
			if r.GetType() != "Warning" || !strings.Contains(r.GetMessage(), "device or resource busy") {
				t.Errorf("record %v", r)
			}
			msgs = append(msgs, r.GetMessage())
		}
	}
	if len(msgs) != 3 {
		t.Fatalf("FailedKillPod records = %q, want 3", msgs)
	}
	for i, want := range []string{"retrying in 10ms", "retrying in 20ms", "retrying in 40ms"} {
		if !strings.HasSuffix(msgs[i], want+")") {
			t.Errorf("record %d = %q, want %q", i, msgs[i], want)
		}
	}
	if e.rt.IPAM().InUse() != 0 || e.rt.Pods() != 0 {
		t.Errorf("after delete: %d IPs, %d sandboxes", e.rt.IPAM().InUse(), e.rt.Pods())
	}
}

func TestReconcile(t *testing.T) {
	e := newEnv(t)
	keep, gone, deleting := newPod("keep"), newPod("gone"), newPod("deleting")
	for _, p := range []*corev1.Pod{keep, gone, deleting} {
		e.store.PutPod(p)
	}
	if err := e.agent.Reconcile(e.ctx()); err != nil {
		t.Fatal(err)
	}
	for _, p := range []*corev1.Pod{keep, gone, deleting} {
		e.waitStatus(p.Metadata.Uid, p.Metadata.Name+" running", runningReady)
	}
	e.store.DeletePod(gone.Metadata.Uid)
	deleting.Metadata.DeletionTimestamp = timestamppb.Now()
	grace := int64(0)
	deleting.Metadata.DeletionGracePeriodSeconds = &grace
	e.store.PutPod(deleting)
	if err := e.agent.Reconcile(e.ctx()); err != nil {
		t.Fatal(err)
	}
	for _, p := range []*corev1.Pod{gone, deleting} {
		e.waitEnvs(p.Metadata.Uid, p.Metadata.Name+" deleted", func(envs []*eventsv1.Envelope) bool { return len(ofType(envs, "PodDeleted")) == 1 })
	}
	e.waitEnvs(keep.Metadata.Uid, "one sandbox left", func([]*eventsv1.Envelope) bool { return e.rt.Pods() == 1 })
	if _, ok := e.agent.PodStatus(keep.Metadata.Uid); !ok {
		t.Error("the pod still in the store lost its worker")
	}
}

// A reconcile whose store list began before a bind must not take the
// freshly bound pod for one deleted from the store (the sim cluster's
// periodic reconcile killed such pods under load).
func TestReconcileIgnoresPodsBoundDuringTheList(t *testing.T) {
	e := newEnv(t)
	mark := e.agent.ListMark()
	listed, err := e.store.ListNodePods(e.ctx(), node)
	if err != nil {
		t.Fatal(err)
	}
	p := newPod("late")
	e.bind(p)
	e.waitReady(p.Metadata.Uid)
	if err := e.agent.ReconcilePods(e.ctx(), mark, listed); err != nil {
		t.Fatal(err)
	}
	// An absence: the kill, when wrongly queued, follows within
	// milliseconds; watch for it for half a second.
	for range 50 {
		if envs := e.pub.Pod(p.Metadata.Uid); len(ofType(envs, "PodKilled")) != 0 {
			t.Fatalf("a list older than the bind killed the pod: %v", envs)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, ok := e.agent.PodStatus(p.Metadata.Uid); !ok || e.rt.Pods() != 1 {
		t.Fatalf("a list older than the bind terminated the pod (worker %v, %d sandboxes)", ok, e.rt.Pods())
	}
	// A list taken after the bind that lacks the pod does terminate it.
	e.store.DeletePod(p.Metadata.Uid)
	if err := e.agent.Reconcile(e.ctx()); err != nil {
		t.Fatal(err)
	}
	e.waitEnvs(p.Metadata.Uid, "PodDeleted", func(envs []*eventsv1.Envelope) bool { return len(ofType(envs, "PodDeleted")) == 1 })
}

func TestRestartAdoptsPodsAndKeepsSeqMonotonic(t *testing.T) {
	e := newEnv(t)
	p := newPod("adopt")
	e.bind(p)
	e.waitReady(p.Metadata.Uid)
	e.agent.Stop()
	if err := e.agent.HandlePodBound(e.ctx(), p); !errors.Is(err, nodeagent.ErrStopped) {
		t.Errorf("bind after Stop: err = %v, want ErrStopped", err)
	}
	if e.rt.Pods() != 1 {
		t.Fatal("stopping the agent stopped the pod")
	}
	e.agent = e.newAgent() // Start adopts the sandbox and reconciles.
	if err := e.agent.HandlePodDelete(e.ctx(), p, 0); err != nil {
		t.Fatal(err)
	}
	envs := e.waitEnvs(p.Metadata.Uid, "PodDeleted", func(envs []*eventsv1.Envelope) bool { return len(ofType(envs, "PodDeleted")) == 1 })
	checkSeq(t, envs)
	if n := len(ofType(envs, "ContainerStarted")); n != 1 {
		t.Errorf("container started %d times across the restart, want 1", n)
	}
	if n := len(ofType(envs, "PodSandboxReady")); n != 1 {
		t.Errorf("sandbox created %d times across the restart, want 1", n)
	}
}

func TestPublishFailuresAreRetried(t *testing.T) {
	e := newEnv(t)
	e.pub.Fail(5)
	p := newPod("retry")
	e.bind(p)
	envs := e.waitEnvs(p.Metadata.Uid, "PodReady", func(envs []*eventsv1.Envelope) bool { return len(ofType(envs, "PodReady")) == 1 })
	checkSeq(t, envs)
	for _, typ := range []eventsv1.Type{"PodSandboxReady", "ImagePulled", "ContainerStarted", "PodRunning"} {
		if len(ofType(envs, typ)) != 1 {
			t.Errorf("%s lost or duplicated after publish failures", typ)
		}
	}
}

func TestRunRegistersAndHeartbeats(t *testing.T) {
	rt, err := sim.New(sim.DefaultConfig(podCIDR))
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	e := &env{t: t, rt: rt}
	e.store, e.pub = nodeagenttest.NewStore(), nodeagenttest.NewPublisher()
	cfg := fastConfig()
	cfg.Labels = map[string]string{"zone": "a"}
	cfg.Taints = []*corev1.Taint{{Key: "dedicated", Value: "sim", Effect: "NoSchedule"}}
	cfg.NodeStatusReportFrequency = cfg.HeartbeatInterval // the status written at every heartbeat
	a, err := nodeagent.New(cfg, rt, e.store, e.pub)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	err = e.pub.Wait(e.ctx(), func(envs []*eventsv1.Envelope) bool {
		return len(ofType(envs, "NodeHeartbeat")) >= 3 && e.store.StatusUpdates(node) >= 3
	})
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("Run returned %v", err)
	}
	n, ok := e.store.Node(node)
	if !ok {
		t.Fatal("node not registered")
	}
	st := n.GetStatus()
	if n.GetSpec().GetPodCidr() != podCIDR || n.GetMetadata().GetLabels()["zone"] != "a" || n.GetMetadata().GetLabels()["kubernetes.io/hostname"] != node ||
		len(n.GetSpec().GetTaints()) != 1 || st.GetCapacity()["pods"] != "110" || st.GetAllocatable()["cpu"] != "8" {
		t.Errorf("node = %v", n)
	}
	ready := false
	for _, c := range st.GetConditions() {
		ready = ready || (c.GetType() == "Ready" && c.GetStatus() == "True")
	}
	if !ready {
		t.Error("node not Ready")
	}
	hb := ofType(e.pub.Envelopes(), "NodeHeartbeat")
	for i, x := range hb {
		if x.GetNodeName() != node || x.GetReplica() != node || (i > 0 && x.GetGeneration() <= hb[i-1].GetGeneration()) {
			t.Errorf("heartbeat %d = %v", i, x)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		mut  func(*nodeagent.Config)
		ok   bool
	}{
		{"default", func(*nodeagent.Config) {}, true},
		{"no node name", func(c *nodeagent.Config) { c.NodeName = "" }, false},
		{"bad cidr", func(c *nodeagent.Config) { c.PodCIDR = "10.244.1.0/33" }, false},
		{"host bits", func(c *nodeagent.Config) { c.PodCIDR = "10.244.1.7/24" }, false},
		{"zero heartbeat", func(c *nodeagent.Config) { c.HeartbeatInterval = 0 }, false},
		{"zero status report frequency", func(c *nodeagent.Config) { c.NodeStatusReportFrequency = 0 }, false},
		{"resync below heartbeat", func(c *nodeagent.Config) { c.ResyncPeriod = time.Second }, false},
		{"backoff max below initial", func(c *nodeagent.Config) { c.CrashLoopBackOff.Max = time.Second }, false},
		{"bad host IP", func(c *nodeagent.Config) { c.HostIP = "host" }, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := nodeagent.DefaultConfig(node, podCIDR)
			tc.mut(&c)
			err := c.Validate()
			if (err == nil) != tc.ok || (err != nil && !errors.Is(err, nodeagent.ErrInvalidConfig)) {
				t.Errorf("Validate() = %v, want ok=%v", err, tc.ok)
			}
		})
	}
}

func TestErrorCodes(t *testing.T) {
	cause := errors.New("connection refused")
	err := fmt.Errorf("pull: %w", nodeagent.Errorf(nodeagent.CodeImagePull, "pull %q: %w", "nginx", cause))
	if !errors.Is(err, nodeagent.ErrImagePull) || errors.Is(err, nodeagent.ErrMount) || !errors.Is(err, cause) {
		t.Errorf("errors.Is by code failed for %v", err)
	}
	if nodeagent.CodeOf(err, "") != nodeagent.CodeImagePull || nodeagent.CodeOf(cause, "x") != "x" {
		t.Error("CodeOf")
	}
}

func TestInitContainerFailure(t *testing.T) {
	withInit := func(p *corev1.Pod) {
		p.Spec.InitContainers = []*corev1.Container{{Name: "setup", Image: "busybox:1.36"}}
	}
	t.Run("Never fails the pod", func(t *testing.T) {
		e := newEnv(t)
		p := newPod("init-never", withInit, restartPolicy("Never"), annotate(sim.AnnotationInitExitCode, "2"))
		e.bind(p)
		envs := e.waitEnvs(p.Metadata.Uid, "final PodFailed", func(envs []*eventsv1.Envelope) bool {
			for _, x := range ofType(envs, "PodFailed") {
				if x.GetPodFailed().GetFinal() {
					return true
				}
			}
			return false
		})
		checkSeq(t, envs)
		st := lastStatus(envs)
		ic := st.GetInitContainerStatuses()[0]
		if st.GetPhase() != "Failed" || ic.GetState().GetTerminated().GetExitCode() != 2 || waiting(st) != "PodInitializing" {
			t.Errorf("status = %v", st)
		}
		if ic.GetReady() || ic.Started == nil || ic.GetStarted() {
			t.Errorf("a failed init container: ready %v, started %v; want neither (set)", ic.GetReady(), ic.Started)
		}
		if f := ofType(envs, "PodFailed")[0].GetPodFailed(); f.GetReason() != "Error" || f.GetContainer() != "setup" {
			t.Errorf("PodFailed = %v", f)
		}
		if c := cond(st, "Initialized"); c.GetStatus() != "False" || c.GetReason() != "ContainersNotInitialized" {
			t.Errorf("Initialized = %v", c)
		}
		if len(ofType(envs, "ContainerStarted")) != 1 {
			t.Error("an app container started after a failed init container")
		}
		e.waitEnvs(p.Metadata.Uid, "IP released", func([]*eventsv1.Envelope) bool { return e.rt.IPAM().InUse() == 0 })
	})
	t.Run("Always loops", func(t *testing.T) {
		e := newEnv(t)
		p := newPod("init-always", withInit, annotate(sim.AnnotationInitExitCode, "1"))
		e.bind(p)
		st := e.waitStatus(p.Metadata.Uid, "init container restarted twice", func(st *corev1.PodStatus) bool {
			ic := st.GetInitContainerStatuses()[0]
			return ic.GetRestartCount() >= 2 && ic.GetState().GetWaiting().GetReason() == "CrashLoopBackOff"
		})
		if st.GetPhase() != "Pending" || waiting(st) != "PodInitializing" || cond(st, "Initialized").GetStatus() != "False" {
			t.Errorf("status = %v", st)
		}
	})
}

// TestCrashLoopKubernetesTimings runs the kubelet's own back-off timings
// (10s doubling to 5m) on a fake clock.
func TestCrashLoopKubernetesTimings(t *testing.T) {
	clock := nodeagenttest.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	e := fakeClockEnv(t, clock, nil)
	p := newPod("k8s-timings", annotate(sim.AnnotationExitAfter, "1s", sim.AnnotationExitCode, "1"))
	e.bind(p)
	want := []string{"10s", "20s", "40s", "1m20s", "2m40s", "5m0s", "5m0s"}
	deadline := time.Now().Add(waitFor)
	for len(backoffs(e.pub.Pod(p.Metadata.Uid))) < len(want) {
		if time.Now().After(deadline) {
			t.Fatalf("back-offs after %s of fake time: %v", clock.Now().Sub(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)), backoffs(e.pub.Pod(p.Metadata.Uid)))
		}
		clock.Advance(time.Second)
		time.Sleep(time.Millisecond)
	}
	if got := backoffs(e.pub.Pod(p.Metadata.Uid))[:len(want)]; !slices.Equal(got, want) {
		t.Errorf("back-offs = %v, want %v", got, want)
	}
}

// TestSysctlForbidden: a pod with a sysctl the node does not allow is
// rejected as kubelet's admission rejects it (rejectPod): a Warning
// SysctlForbidden with the admission's message, phase Failed with reason
// SysctlForbidden and "Pod was rejected: …", a final PodFailed, and no
// retry; a pod with a safe sysctl runs.
func TestSysctlForbidden(t *testing.T) {
	sysctl := func(name string) podOpt {
		return func(p *corev1.Pod) {
			p.Spec.SecurityContext = &corev1.PodSecurityContext{Sysctls: []*corev1.Sysctl{{Name: name, Value: "1"}}}
		}
	}
	t.Run("unsafe sysctl rejected", func(t *testing.T) {
		e := newEnv(t)
		p := newPod("unsafe", sysctl("kernel.msgmax"))
		e.bind(p)
		final := func(envs []*eventsv1.Envelope) bool {
			for _, x := range ofType(envs, "PodFailed") {
				if x.GetPodFailed().GetFinal() {
					return true
				}
			}
			return false
		}
		envs := e.waitEnvs(p.Metadata.Uid, "final PodFailed", final)
		const msg = `forbidden sysctl: "kernel.msgmax" not allowlisted`
		st := lastStatus(envs)
		if st.GetPhase() != "Failed" || st.GetReason() != "SysctlForbidden" || st.GetMessage() != "Pod was rejected: "+msg {
			t.Errorf("status phase %q reason %q message %q", st.GetPhase(), st.GetReason(), st.GetMessage())
		}
		failed := ofType(envs, "PodFailed")
		if len(failed) != 1 || failed[0].GetPodFailed().GetReason() != "SysctlForbidden" || failed[0].GetPodFailed().GetContainer() != "" {
			t.Errorf("PodFailed = %v, want one final SysctlForbidden of the pod", failed)
		}
		if !hasRecord(envs, "Warning", "SysctlForbidden", msg) {
			t.Errorf("records = %v, want a Warning SysctlForbidden %q", records(envs), msg)
		}
		time.Sleep(20 * fastConfig().SetupBackOff.Initial) // a retry would have come by now
		envs = e.pub.Pod(p.Metadata.Uid)
		n := 0
		for _, r := range records(envs) {
			if r.GetType() == "Warning" {
				n++
			}
		}
		if n != 1 || len(ofType(envs, "PodSandboxReady")) != 0 || e.rt.IPAM().InUse() != 0 {
			t.Errorf("%d Warnings, %d PodSandboxReady, %d IPs: want one Warning, no sandbox (no retry)",
				n, len(ofType(envs, "PodSandboxReady")), e.rt.IPAM().InUse())
		}
	})
	t.Run("safe sysctl runs", func(t *testing.T) {
		e := newEnv(t)
		p := newPod("safe", sysctl("net.ipv4.tcp_syncookies"))
		e.bind(p)
		e.waitStatus(p.Metadata.Uid, "Running and Ready", runningReady)
	})
}

// TestHeartbeatWritesStatusOnChange: as kubelet's tryUpdateNodeStatus,
// the agent computes its node's status at every heartbeat but writes it
// (and publishes a NodeHeartbeat) only when it differs in more than the
// conditions' lastHeartbeatTime from the status last written — here the
// registration's — or when NodeStatusReportFrequency has passed since.
func TestHeartbeatWritesStatusOnChange(t *testing.T) {
	clock := nodeagenttest.NewFakeClock(time.Unix(1_700_000_000, 0))
	e := fakeClockEnv(t, clock, nil)
	cfg := nodeagent.DefaultConfig(node, podCIDR)
	beat := func(n int) {
		t.Helper()
		for range n {
			clock.Advance(cfg.HeartbeatInterval)
			if err := e.agent.Heartbeat(e.ctx()); err != nil {
				t.Fatal(err)
			}
		}
	}
	steps := int(cfg.NodeStatusReportFrequency / cfg.HeartbeatInterval) // 30
	beat(steps - 1)
	if got, hb := e.store.StatusUpdates(node), len(ofType(e.pub.Envelopes(), "NodeHeartbeat")); got != 0 || hb != 0 {
		t.Fatalf("%d unchanged heartbeats: %d status writes, %d NodeHeartbeats; want 0 and 0", steps-1, got, hb)
	}
	beat(1) // NodeStatusReportFrequency since the registration
	if got, hb := e.store.StatusUpdates(node), len(ofType(e.pub.Envelopes(), "NodeHeartbeat")); got != 1 || hb != 1 {
		t.Fatalf("after %s: %d status writes, %d NodeHeartbeats; want 1 and 1", cfg.NodeStatusReportFrequency, got, hb)
	}
	beat(steps - 1)
	if got := e.store.StatusUpdates(node); got != 1 {
		t.Fatalf("%d status writes %s after the report, want 1", got, time.Duration(steps-1)*cfg.HeartbeatInterval)
	}
	beat(1)
	if got := e.store.StatusUpdates(node); got != 2 {
		t.Fatalf("%d status writes after a second %s, want 2", got, cfg.NodeStatusReportFrequency)
	}
}
