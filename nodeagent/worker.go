package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	corev1 "github.com/podflow/podflow/proto/corev1"
	eventsv1 "github.com/podflow/podflow/proto/eventsv1"
	"github.com/podflow/podflow/proto/podrules"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// worker owns one pod. Everything below deleteCh and done is touched only by
// the worker's goroutine (run); the agent reads reported.
type worker struct {
	a   *Agent
	pod *corev1.Pod
	uid string

	deleteCh chan time.Duration // capacity 1: a pending delete and its grace
	done     chan struct{}      // closed when run returns
	reported atomic.Pointer[corev1.PodStatus]

	rec       *recovered
	seq       int64
	qos       string
	startTime time.Time
	policy    string

	sandbox        *Sandbox
	exits          <-chan ContainerExit
	sandboxBackoff time.Duration
	sandboxRetryAt time.Time
	mounted        bool
	mountBackoff   time.Duration
	mountRetryAt   time.Time
	inits, apps    []*ctr
	failed         *ctr // the container whose exit made the pod Failed
	deleting       bool

	conds      map[string]*corev1.PodCondition
	lastStatus *corev1.PodStatus
	wasRunning bool
	wasReady   bool
	finalSent  bool
	notReady   bool // a PodNotReady is queued in events

	records []*eventsv1.EventRecord
	events  []*eventsv1.Envelope // payload only; ids assigned at flush
	outbox  []*eventsv1.Envelope // built, not yet acknowledged
}

// ctr is one container of the pod and its current instance.
type ctr struct {
	spec        *corev1.Container
	init        bool
	id          ContainerID
	imageID     string
	state       *corev1.ContainerState
	lastTerm    *corev1.ContainerStateTerminated
	restarts    int32
	everStarted bool
	startedAt   time.Time
	ready       bool
	started     bool
	done        bool // init: succeeded; app: terminated for good
	killed      bool // stopped by the agent after a probe failure

	crashBackoff time.Duration
	restartAt    time.Time
	inBackoff    bool // waiting state already says why it is not started
	pullBackoff  time.Duration
	pullRetryAt  time.Time
	pullFlipAt   time.Time

	probes []*probeState
}

type probeState struct {
	kind       ProbeKind
	spec       *corev1.Probe
	next       time.Time
	succ, fail int32
	failing    bool // failure threshold crossed, not yet recovered
}

func (c *ctr) running() bool { return c.state.GetRunning() != nil }

func newWorker(a *Agent, pod *corev1.Pod, rec *recovered) *worker {
	w := &worker{
		a: a, pod: pod, uid: pod.GetMetadata().GetUid(),
		deleteCh: make(chan time.Duration, 1),
		done:     make(chan struct{}),
		rec:      rec,
		qos:      podrules.QOSClass(pod),
		policy:   pod.GetSpec().GetRestartPolicy(),
		conds:    map[string]*corev1.PodCondition{},
	}
	if w.policy == "" {
		w.policy = "Always"
	}
	for _, c := range pod.GetSpec().GetInitContainers() {
		w.inits = append(w.inits, &ctr{spec: c, init: true})
	}
	for _, c := range pod.GetSpec().GetContainers() {
		w.apps = append(w.apps, &ctr{spec: c})
	}
	return w
}

// run drives the pod until the agent stops or the pod is deleted.
func (w *worker) run(ctx context.Context) {
	defer close(w.done)
	w.startTime = w.now()
	if st := w.pod.GetStatus().GetStartTime(); st != nil {
		w.startTime = st.AsTime()
	}
	w.adopt()
	timer := w.a.clock.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		select { // a pending delete wins over further progress
		case grace := <-w.deleteCh:
			w.terminate(ctx, grace)
			return
		default:
		}
		wake := w.sync(ctx)
		wake = earliest(wake, w.flush(ctx))
		timer.Stop()
		if !wake.IsZero() {
			timer.Reset(max(wake.Sub(w.now()), 0))
		}
		select {
		case <-ctx.Done():
			return
		case grace := <-w.deleteCh:
			w.terminate(ctx, grace)
			return
		case ex := <-w.exits:
			w.onExit(ex)
		case <-timer.C():
		}
	}
}

func (w *worker) now() time.Time { return w.a.clock.Now() }

// adopt takes over the sandbox and containers an earlier agent left.
func (w *worker) adopt() {
	if w.rec == nil {
		return
	}
	sb := w.rec.sandbox.Sandbox
	w.sandbox = &sb
	w.mounted = w.rec.sandbox.VolumesReady
	w.exits = w.a.rt.ContainerExits(w.uid)
	now := w.now()
	for _, info := range w.rec.containers {
		c := w.byName(info.Name, info.Init)
		if c == nil || (c.everStarted && c.startedAt.After(info.StartedAt)) {
			continue
		}
		c.id, c.imageID, c.restarts, c.everStarted = info.ID, info.ImageID, info.RestartCount, true
		c.startedAt = info.StartedAt
		c.state = &corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: timestamppb.New(info.StartedAt)}}
		c.started = true
		c.ready = c.probe(ProbeReadiness) == nil
		c.resetProbes(now, w.a.cfg.SpecSecond)
		if info.Exit != nil && !info.Running {
			w.onExit(*info.Exit)
		}
	}
	w.rec = nil
}

func (w *worker) byName(name string, init bool) *ctr {
	list := w.apps
	if init {
		list = w.inits
	}
	for _, c := range list {
		if c.spec.GetName() == name {
			return c
		}
	}
	return nil
}

// sync performs every action that is due and returns when it wants to run
// again (zero: only on an event).
func (w *worker) sync(ctx context.Context) time.Time {
	now := w.now()
	if w.terminal() {
		if w.sandbox != nil { // like kubelet, free the IP of a finished pod
			if err := w.teardown(ctx); err != nil {
				return now.Add(w.a.cfg.PublishRetry)
			}
		}
		return time.Time{}
	}
	if w.sandbox == nil {
		if now.Before(w.sandboxRetryAt) {
			return w.sandboxRetryAt
		}
		sb, err := w.a.rt.RunPodSandbox(ctx, w.pod)
		if err != nil {
			if ctx.Err() != nil {
				return time.Time{}
			}
			w.sandboxBackoff = w.a.cfg.SetupBackOff.Next(w.sandboxBackoff)
			w.sandboxRetryAt = now.Add(w.sandboxBackoff)
			msg := "Failed to create pod sandbox: " + message(err)
			w.warn(eventsv1.ReasonFailedCreatePodSandBox, msg)
			w.emitFailed(eventsv1.ReasonFailedCreatePodSandBox, msg, "", false)
			return w.sandboxRetryAt
		}
		w.sandbox, w.sandboxBackoff = &sb, 0
		w.exits = w.a.rt.ContainerExits(w.uid)
		w.emit(&eventsv1.Envelope{Payload: &eventsv1.Envelope_PodSandboxReady{PodSandboxReady: &eventsv1.PodSandboxReady{
			SandboxId: sb.ID, PodIp: sb.IP, HostIp: w.a.cfg.HostIP}}})
	}
	if !w.mounted {
		if now.Before(w.mountRetryAt) {
			return w.mountRetryAt
		}
		vols, err := w.resolveVolumes(ctx)
		if err == nil {
			err = w.a.rt.MountVolumes(ctx, w.pod, vols)
		}
		if err != nil {
			if ctx.Err() != nil {
				return time.Time{}
			}
			w.mountBackoff = w.a.cfg.SetupBackOff.Next(w.mountBackoff)
			w.mountRetryAt = now.Add(w.mountBackoff)
			msg := message(err)
			w.warn(eventsv1.ReasonFailedMount, msg)
			w.emitFailed(eventsv1.ReasonFailedMount, msg, "", false)
			return w.mountRetryAt
		}
		w.mounted, w.mountBackoff = true, 0
	}
	for _, c := range w.inits {
		if c.done {
			continue
		}
		if c.running() {
			return time.Time{}
		}
		return w.startContainer(ctx, c, now)
	}
	var wake time.Time
	for _, c := range w.apps {
		if !c.running() && !c.done {
			wake = earliest(wake, w.startContainer(ctx, c, now))
		}
	}
	return earliest(wake, w.runProbes(ctx, now))
}

func (w *worker) startContainer(ctx context.Context, c *ctr, now time.Time) time.Time {
	name, image := c.spec.GetName(), c.spec.GetImage()
	if now.Before(c.restartAt) {
		if !c.inBackoff {
			c.inBackoff = true
			if t := c.state.GetTerminated(); t != nil {
				c.lastTerm = t
			}
			c.setWaiting(eventsv1.ReasonCrashLoopBackOff, fmt.Sprintf("back-off %s restarting failed container=%s pod=%s",
				c.crashBackoff, name, w.podRef()))
			w.warn(eventsv1.ReasonBackOff, fmt.Sprintf("Back-off restarting failed container %s in pod %s", name, w.podRef()))
			w.emitFailed(eventsv1.ReasonCrashLoopBackOff, c.state.GetWaiting().GetMessage(), name, false)
		}
		return c.restartAt
	}
	if now.Before(c.pullRetryAt) {
		if !now.Before(c.pullFlipAt) && c.state.GetWaiting().GetReason() == eventsv1.ReasonErrImagePull {
			msg := fmt.Sprintf("Back-off pulling image %q", image)
			c.setWaiting(eventsv1.ReasonImagePullBackOff, msg)
			w.normal(eventsv1.ReasonBackOff, msg)
			w.emitFailed(eventsv1.ReasonImagePullBackOff, msg, name, false)
		}
		if now.Before(c.pullFlipAt) {
			return c.pullFlipAt
		}
		return c.pullRetryAt
	}
	policy := podrules.PullPolicy(c.spec)
	began := w.now()
	ref, err := w.a.rt.PullImage(ctx, w.pod, image, policy)
	if err != nil {
		if ctx.Err() != nil {
			return time.Time{}
		}
		reason := string(CodeOf(err, CodeImagePull))
		c.pullBackoff = w.a.cfg.ImagePullBackOff.Next(c.pullBackoff)
		c.pullRetryAt, c.pullFlipAt = now.Add(c.pullBackoff), now.Add(c.pullBackoff/2)
		msg := message(err)
		if reason != eventsv1.ReasonErrImageNeverPull {
			w.normal(eventsv1.ReasonPulling, fmt.Sprintf("Pulling image %q", image))
		}
		w.warn("Failed", fmt.Sprintf("Failed to pull image %q: %s", image, msg))
		w.warn("Failed", "Error: "+reason)
		c.setWaiting(reason, msg)
		w.emitFailed(reason, msg, name, false)
		return c.pullFlipAt
	}
	c.pullBackoff, c.imageID = 0, ref.ID
	if ref.AlreadyPresent {
		w.normal(eventsv1.ReasonPulled, fmt.Sprintf("Container image %q already present on machine", image))
	} else {
		took := w.now().Sub(began)
		w.normal(eventsv1.ReasonPulling, fmt.Sprintf("Pulling image %q", image))
		w.normal(eventsv1.ReasonPulled, fmt.Sprintf("Successfully pulled image %q in %s", image, took))
		w.emit(&eventsv1.Envelope{Payload: &eventsv1.Envelope_ImagePulling{ImagePulling: &eventsv1.ImagePulling{Container: name, Image: image}}})
	}
	w.emit(&eventsv1.Envelope{Payload: &eventsv1.Envelope_ImagePulled{ImagePulled: &eventsv1.ImagePulled{
		Container: name, Image: image, ImageId: ref.ID, SizeBytes: ref.SizeBytes,
		DurationNanos: int64(w.now().Sub(began)), AlreadyPresent: ref.AlreadyPresent}}})

	id, err := w.a.rt.StartContainer(ctx, w.pod, c.spec, *w.sandbox)
	if err != nil {
		if ctx.Err() != nil {
			return time.Time{}
		}
		reason := string(CodeOf(err, CodeRunContainer))
		msg := message(err)
		c.crashBackoff = w.a.cfg.CrashLoopBackOff.Next(c.crashBackoff)
		c.restartAt, c.inBackoff = now.Add(c.crashBackoff), true
		c.setWaiting(reason, msg)
		w.warn("Failed", "Error: "+msg)
		w.emitFailed(reason, msg, name, false)
		return c.restartAt
	}
	if t := c.state.GetTerminated(); t != nil {
		c.lastTerm = t
	}
	if c.everStarted {
		c.restarts++
	}
	started := w.now()
	c.everStarted, c.id, c.startedAt, c.inBackoff, c.killed = true, id, started, false, false
	c.state = &corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: timestamppb.New(started)}}
	c.started = c.probe(ProbeStartup) == nil
	c.ready = c.started && c.probe(ProbeReadiness) == nil
	c.resetProbes(started, w.a.cfg.SpecSecond)
	w.normal(eventsv1.ReasonCreated, "Created container "+name)
	w.normal(eventsv1.ReasonStarted, "Started container "+name)
	w.emit(&eventsv1.Envelope{Payload: &eventsv1.Envelope_ContainerStarted{ContainerStarted: &eventsv1.ContainerStarted{
		Container: name, ContainerId: string(id), RestartCount: c.restarts, Init: c.init}}})
	return started // probes and the next container: sync again at once
}

// onExit records a container's exit and decides, by restart policy, whether
// it will be restarted (after a CrashLoopBackOff delay) or is done.
func (w *worker) onExit(ex ContainerExit) {
	var c *ctr
	for _, x := range append(w.inits[:len(w.inits):len(w.inits)], w.apps...) {
		if x.id == ex.ID && x.running() {
			c = x
		}
	}
	if c == nil {
		return // an instance already accounted for
	}
	w.recordExit(c, ex)
	failed := ex.ExitCode != 0 || c.killed
	restart := false
	switch {
	case c.init:
		restart = failed && w.policy != "Never"
		if !restart && failed {
			w.failed = c
		}
	case c.killed:
		restart = w.policy != "Never"
	default:
		restart = w.policy == "Always" || (w.policy == "OnFailure" && failed)
	}
	if !restart {
		c.done = true
		return
	}
	ran := ex.FinishedAt.Sub(c.startedAt)
	if b := w.a.cfg.CrashLoopBackOff; b.ResetAfter > 0 && ran >= b.ResetAfter {
		c.crashBackoff = 0
	}
	c.crashBackoff = w.a.cfg.CrashLoopBackOff.Next(c.crashBackoff)
	c.restartAt, c.inBackoff = w.now().Add(c.crashBackoff), false
}

func (w *worker) recordExit(c *ctr, ex ContainerExit) {
	reason := ex.Reason
	if reason == "" {
		reason = eventsv1.ReasonCompleted
		if ex.ExitCode != 0 {
			reason = eventsv1.ReasonError
		}
	}
	if ex.FinishedAt.IsZero() {
		ex.FinishedAt = w.now()
	}
	c.state = &corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
		ExitCode: ex.ExitCode, Signal: ex.Signal, Reason: reason, Message: ex.Message,
		StartedAt: timestamppb.New(c.startedAt), FinishedAt: timestamppb.New(ex.FinishedAt), ContainerId: string(c.id),
	}}
	c.ready, c.started = false, false
	w.emit(&eventsv1.Envelope{Payload: &eventsv1.Envelope_ContainerExited{ContainerExited: &eventsv1.ContainerExited{
		Container: c.spec.GetName(), ContainerId: string(c.id), ExitCode: ex.ExitCode, Reason: reason,
		RestartCount: c.restarts, Init: c.init}}})
}

func (c *ctr) setWaiting(reason, msg string) {
	c.state = &corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: msg}}
	c.ready = false
}

func (c *ctr) probe(kind ProbeKind) *corev1.Probe {
	switch kind {
	case ProbeStartup:
		return c.spec.GetStartupProbe()
	case ProbeLiveness:
		return c.spec.GetLivenessProbe()
	default:
		return c.spec.GetReadinessProbe()
	}
}

func (c *ctr) resetProbes(now time.Time, second time.Duration) {
	c.probes = c.probes[:0]
	for _, k := range []ProbeKind{ProbeStartup, ProbeLiveness, ProbeReadiness} {
		if p := c.probe(k); p != nil {
			c.probes = append(c.probes, &probeState{kind: k, spec: p,
				next: now.Add(time.Duration(p.GetInitialDelaySeconds()) * second)})
		}
	}
}

// runProbes runs the probes that are due and returns when the next is.
func (w *worker) runProbes(ctx context.Context, now time.Time) time.Time {
	var wake time.Time
	sec := w.a.cfg.SpecSecond
	for _, c := range w.apps {
		for _, p := range c.probes {
			if !c.running() || (p.kind == ProbeStartup) == c.started {
				continue
			}
			if now.Before(p.next) {
				wake = earliest(wake, p.next)
				continue
			}
			period := time.Duration(orDefault(p.spec.GetPeriodSeconds(), 10)) * sec
			pctx, cancel := context.WithTimeout(ctx, time.Duration(orDefault(p.spec.GetTimeoutSeconds(), 1))*sec)
			res, err := w.a.rt.Probe(pctx, w.pod, c.spec, c.id, p.kind, p.spec)
			cancel()
			if ctx.Err() != nil {
				return time.Time{}
			}
			if err != nil {
				res = ProbeResult{Message: err.Error()}
			}
			p.next = w.now().Add(period)
			wake = earliest(wake, p.next)
			if res.OK {
				p.fail, p.succ = 0, p.succ+1
				if p.succ >= orDefault(p.spec.GetSuccessThreshold(), 1) {
					p.failing = false
					w.probeSucceeded(c, p, now)
				}
				continue
			}
			p.succ, p.fail = 0, p.fail+1
			w.warn(eventsv1.ReasonUnhealthy, fmt.Sprintf("%s probe failed: %s", p.kind, res.Message))
			if p.fail < orDefault(p.spec.GetFailureThreshold(), 3) {
				continue
			}
			if w.probeFailed(ctx, c, p, res.Message) {
				return now // the container was killed: sync again at once
			}
		}
	}
	return wake
}

func (w *worker) probeSucceeded(c *ctr, p *probeState, now time.Time) {
	switch p.kind {
	case ProbeStartup:
		c.started = true
		c.ready = c.probe(ProbeReadiness) == nil
		for _, q := range c.probes {
			if q.kind != ProbeStartup {
				q.next = now.Add(time.Duration(q.spec.GetInitialDelaySeconds()) * w.a.cfg.SpecSecond)
			}
		}
	case ProbeReadiness:
		c.ready = true
	}
}

// probeFailed acts on a probe that crossed its failure threshold; it reports
// whether it killed the container.
func (w *worker) probeFailed(ctx context.Context, c *ctr, p *probeState, msg string) bool {
	name := c.spec.GetName()
	if p.kind == ProbeReadiness {
		c.ready = false
		if !p.failing {
			p.failing = true
			w.notReady = true
			w.emit(&eventsv1.Envelope{Payload: &eventsv1.Envelope_PodNotReady{PodNotReady: &eventsv1.PodNotReady{
				Reason: eventsv1.ReasonUnhealthy, Message: "Readiness probe failed: " + msg, Container: name}}})
		}
		return false
	}
	kind := "liveness"
	if p.kind == ProbeStartup {
		kind = "startup"
	}
	w.normal(eventsv1.ReasonKilling, fmt.Sprintf("Container %s failed %s probe, will be restarted", name, kind))
	w.emitFailed(eventsv1.ReasonUnhealthy, fmt.Sprintf("%s probe failed: %s", p.kind, msg), name, false)
	grace := w.a.gracePeriod(w.pod)
	if s := p.spec.TerminationGracePeriodSeconds; s != nil {
		grace = time.Duration(*s) * w.a.cfg.SpecSecond
	}
	c.killed = true
	ex, err := w.a.rt.StopContainer(ctx, c.id, grace)
	if err != nil {
		w.a.log.Warn("stop container", "pod", w.podRef(), "container", name, "err", err)
		ex = ContainerExit{ID: c.id, ExitCode: 137, Reason: eventsv1.ReasonError, FinishedAt: w.now()}
	}
	ex.ID = c.id
	w.onExit(ex)
	return true
}

// terminate stops the pod: SIGTERM to every running container in parallel,
// kill after grace, sandbox teardown, a last status report, PodDeleted. It
// gives up only when ctx ends (the agent stops); the next agent finishes.
func (w *worker) terminate(ctx context.Context, grace time.Duration) {
	w.deleting = true
	var running []*ctr
	for _, c := range append(w.inits[:len(w.inits):len(w.inits)], w.apps...) {
		if c.running() {
			running = append(running, c)
			w.normal(eventsv1.ReasonKilling, "Stopping container "+c.spec.GetName())
		}
	}
	w.flush(ctx)
	exits := make([]ContainerExit, len(running))
	errs := make([]error, len(running))
	var wg sync.WaitGroup
	for i, c := range running {
		wg.Go(func() { exits[i], errs[i] = w.a.rt.StopContainer(ctx, c.id, grace) })
	}
	wg.Wait()
	if ctx.Err() != nil {
		return
	}
	var names []string
	for i, c := range running {
		if errs[i] != nil {
			w.a.log.Warn("stop container", "pod", w.podRef(), "container", c.spec.GetName(), "err", errs[i])
			exits[i] = ContainerExit{ExitCode: 137, FinishedAt: w.now()}
		}
		exits[i].ID = c.id
		w.recordExit(c, exits[i])
		names = append(names, c.spec.GetName())
	}
	for _, c := range append(w.inits[:len(w.inits):len(w.inits)], w.apps...) {
		c.done = true
	}
	w.emit(&eventsv1.Envelope{Payload: &eventsv1.Envelope_PodKilled{PodKilled: &eventsv1.PodKilled{Containers: names}}})
	for {
		if err := w.teardown(ctx); err == nil {
			break
		}
		if !w.sleep(ctx, w.a.cfg.PublishRetry) {
			return
		}
	}
	w.flush(ctx)
	w.a.retire(w, true) // from here on the pod is gone for the agent
	seq := w.nextSeq()
	del := w.envelope(&eventsv1.Envelope{Payload: &eventsv1.Envelope_PodDeleted{PodDeleted: &eventsv1.PodDeleted{}}}, seq, 0)
	del.Id = fmt.Sprintf("uid/%s/PodDeleted", w.uid) // one per pod, however often asked
	w.outbox = append(w.outbox, del)
	for {
		if wake := w.flush(ctx); wake.IsZero() {
			return
		}
		if !w.sleep(ctx, w.a.cfg.PublishRetry) {
			return
		}
	}
}

func (w *worker) teardown(ctx context.Context) error {
	if err := w.a.rt.StopPodSandbox(ctx, w.uid); err != nil {
		return fmt.Errorf("stop sandbox of pod %q: %w", w.podRef(), err)
	}
	if err := w.a.rt.RemovePodSandbox(ctx, w.uid); err != nil {
		return fmt.Errorf("remove sandbox of pod %q: %w", w.podRef(), err)
	}
	w.sandbox, w.exits, w.rec = nil, nil, nil
	return nil
}

func (w *worker) sleep(ctx context.Context, d time.Duration) bool {
	t := w.a.clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C():
		return true
	}
}

// resolveVolumes reads the ConfigMaps and Secrets the pod's volumes refer to.
func (w *worker) resolveVolumes(ctx context.Context) ([]VolumeData, error) {
	ns := w.pod.GetMetadata().GetNamespace()
	var out []VolumeData
	for _, v := range w.pod.GetSpec().GetVolumes() {
		vd := VolumeData{Volume: v}
		switch {
		case v.GetConfigMap() != nil:
			src := v.GetConfigMap()
			cm, err := w.a.store.GetConfigMap(ctx, ns, src.GetName())
			switch {
			case errors.Is(err, ErrNotFound) && src.GetOptional():
			case errors.Is(err, ErrNotFound):
				return nil, Errorf(CodeMount, "MountVolume.SetUp failed for volume %q : configmap %q not found", v.GetName(), src.GetName())
			case err != nil:
				return nil, Errorf(CodeMount, "MountVolume.SetUp failed for volume %q : get configmap %q: %w", v.GetName(), src.GetName(), err)
			default:
				data := map[string][]byte{}
				for k, s := range cm.GetData() {
					data[k] = []byte(s)
				}
				maps.Copy(data, cm.GetBinaryData())
				vd.Files = project(data, src.GetItems())
			}
		case v.GetSecret() != nil:
			src := v.GetSecret()
			s, err := w.a.store.GetSecret(ctx, ns, src.GetSecretName())
			switch {
			case errors.Is(err, ErrNotFound) && src.GetOptional():
			case errors.Is(err, ErrNotFound):
				return nil, Errorf(CodeMount, "MountVolume.SetUp failed for volume %q : secret %q not found", v.GetName(), src.GetSecretName())
			case err != nil:
				return nil, Errorf(CodeMount, "MountVolume.SetUp failed for volume %q : get secret %q: %w", v.GetName(), src.GetSecretName(), err)
			default:
				vd.Files = project(s.GetData(), src.GetItems())
			}
		}
		out = append(out, vd)
	}
	return out, nil
}

func project(data map[string][]byte, items []*corev1.KeyToPath) map[string][]byte {
	if len(items) == 0 {
		return data
	}
	out := make(map[string][]byte, len(items))
	for _, it := range items {
		if d, ok := data[it.GetKey()]; ok {
			out[it.GetPath()] = d
		}
	}
	return out
}

// ---------------------------------------------------------------- reporting

func (w *worker) normal(reason, msg string) {
	w.records = append(w.records, &eventsv1.EventRecord{Type: "Normal", Reason: reason, Message: msg})
}

func (w *worker) warn(reason, msg string) {
	w.records = append(w.records, &eventsv1.EventRecord{Type: "Warning", Reason: reason, Message: msg})
}

func (w *worker) emit(env *eventsv1.Envelope) { w.events = append(w.events, env) }

func (w *worker) emitFailed(reason, msg, container string, final bool) {
	w.emit(&eventsv1.Envelope{Payload: &eventsv1.Envelope_PodFailed{PodFailed: &eventsv1.PodFailed{
		Reason: reason, Message: msg, Container: container, Final: final}}})
}

// nextSeq returns the pod's next sequence number. It is at least the wall
// clock in nanoseconds, so a restarted agent continues above its predecessor.
func (w *worker) nextSeq() int64 {
	w.seq = max(w.seq+1, w.now().UnixNano())
	return w.seq
}

// envelope fills env's routing fields. Its id is eventsv1.EventID's
// ("uid/<uid>/<type>/g<seq>/a1"); the n-th (n > 0) event of one type after
// one report gets "/<n>" appended, so that it is not deduplicated away (two
// containers starting in one step, for instance).
func (w *worker) envelope(env *eventsv1.Envelope, seq int64, n int) *eventsv1.Envelope {
	md := w.pod.GetMetadata()
	env.PodUid, env.Namespace, env.PodName = w.uid, md.GetNamespace(), md.GetName()
	env.NodeName, env.Stage, env.Replica = w.a.cfg.NodeName, Stage, w.a.cfg.NodeName
	env.Time, env.Attempt, env.Generation = timestamppb.New(w.now()), 1, seq
	env.Id = eventsv1.EventID(env)
	if n > 0 {
		env.Id += "/" + strconv.Itoa(n)
	}
	return env
}

// flush turns what changed into a PodStatusReport followed by the specific
// events, and publishes the outbox in order. It returns when to retry a
// failed publish (zero: nothing pending).
func (w *worker) flush(ctx context.Context) time.Time {
	st := w.buildStatus(w.now())
	w.deriveEvents(st)
	if len(w.records) > 0 || len(w.events) > 0 || !proto.Equal(st, w.lastStatus) {
		seq := w.nextSeq()
		w.outbox = append(w.outbox, w.envelope(&eventsv1.Envelope{Payload: &eventsv1.Envelope_PodStatusReport{
			PodStatusReport: &eventsv1.PodStatusReport{Status: st, Seq: seq, Events: w.records}}}, seq, 0))
		// The events that follow carry the report's seq: a consumer that
		// acts on them waits until the store reflects that report.
		seen := map[eventsv1.Type]int{}
		for _, e := range w.events {
			w.outbox = append(w.outbox, w.envelope(e, seq, seen[e.Type()]))
			seen[e.Type()]++
		}
		w.lastStatus, w.records, w.events, w.notReady = st, nil, nil, false
		w.reported.Store(st)
	}
	for len(w.outbox) > 0 {
		pctx, cancel := w.a.publishContext(ctx)
		err := w.a.pub.Publish(pctx, w.outbox[0])
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return time.Time{}
			}
			w.a.log.Warn("publish", "pod", w.podRef(), "id", w.outbox[0].GetId(), "err", err)
			return w.now().Add(w.a.cfg.PublishRetry)
		}
		w.outbox[0] = nil
		w.outbox = w.outbox[1:]
	}
	return time.Time{}
}

// deriveEvents queues the events that follow from a status transition.
func (w *worker) deriveEvents(st *corev1.PodStatus) {
	if st.GetPhase() == "Running" && !w.wasRunning {
		w.wasRunning = true
		w.emit(&eventsv1.Envelope{Payload: &eventsv1.Envelope_PodRunning{PodRunning: &eventsv1.PodRunning{
			PodIp: st.GetPodIp(), HostIp: st.GetHostIp()}}})
	}
	ready := podrules.PodCondition(st, podrules.PodReady).GetStatus() == podrules.ConditionTrue
	switch {
	case ready && !w.wasReady:
		w.emit(&eventsv1.Envelope{Payload: &eventsv1.Envelope_PodReady{PodReady: &eventsv1.PodReady{}}})
	case !ready && w.wasReady && !w.notReady:
		w.emit(&eventsv1.Envelope{Payload: &eventsv1.Envelope_PodNotReady{PodNotReady: &eventsv1.PodNotReady{
			Reason: eventsv1.ReasonContainersNotReady, Message: podrules.PodCondition(st, podrules.PodReady).GetMessage()}}})
	}
	w.wasReady = ready
	if st.GetPhase() == "Failed" && !w.finalSent && !w.deleting {
		w.finalSent = true
		reason, msg, name := eventsv1.ReasonError, "", ""
		if w.failed != nil {
			t := w.failed.state.GetTerminated()
			reason, name = t.GetReason(), w.failed.spec.GetName()
			msg = fmt.Sprintf("container %q exited with code %d", name, t.GetExitCode())
		}
		w.emitFailed(reason, msg, name, true)
	}
}

func (w *worker) podRef() string {
	md := w.pod.GetMetadata()
	return fmt.Sprintf("%s_%s(%s)", md.GetName(), md.GetNamespace(), w.uid)
}

func earliest(a, b time.Time) time.Time {
	switch {
	case a.IsZero():
		return b
	case b.IsZero() || a.Before(b):
		return a
	}
	return b
}

func orDefault(v, def int32) int32 {
	if v <= 0 {
		return def
	}
	return v
}
