package nodeagent

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"time"

	corev1 "github.com/podflow/podflow/proto/corev1"
	eventsv1 "github.com/podflow/podflow/proto/eventsv1"
	"github.com/podflow/podflow/proto/podrules"
	"github.com/podflow/podflow/proto/vt"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// A worker owns one pod, as kubelet's pod workers do
// (pkg/kubelet/pod_workers.go), but without a goroutine of its own: its
// Pool runs one step of it at a time (step) when an event arrives (a
// container exit, a pod update, a delete) or its timer fires, so a node
// agent holding thousands of idle pods holds no goroutine for them. It
// moves the pod through three states, each with its step:
//
//	            newWorker, the first step (adopting what an earlier agent left)
//	               │
//	               ▼
//	 ┌──────▶  syncing  ─── syncPod: sandbox, volumes, image pulls, init
//	 │            │         containers and sidecars in order, app
//	 │            │         containers, postStart hooks, probes,
//	 └────────────┤         restarts by restartPolicy (CrashLoopBackOff,
//	a container   │         ImagePullBackOff, retried FailedMount and
//	exit, a timer │         FailedCreatePodSandBox; a SysctlForbidden
//	              │         sandbox rejects the pod, Failed, as kubelet's
//	              │         admission; past spec.activeDeadlineSeconds
//	              │         it is killed, Failed DeadlineExceeded; an
//	              │         emptyDir above its sizeLimit evicts it, Failed
//	              │         Evicted, checked every EvictionPeriod). A pod
//	              │         that finished (Succeeded or Failed, nothing to
//	              │         restart) stays here with its sandbox released,
//	              │         until deleted. A pod update (update, see
//	              │         podUpdate) of a container's image restarts
//	              │         that container with it (restartChanged); one
//	              │         of its labels or annotations, and every
//	              │         SyncPeriod, re-resolve the configMap, secret
//	              │         and downwardAPI volumes; those whose files
//	              │         changed are mounted again (refreshVolumes);
//	              │         one with new ephemeral containers starts them.
//	              │
//	              │ a delete (queueDelete, with its grace)
//	              ▼
//	         terminating ── syncTerminatingPod: Killing, preStop hooks,
//	              │         SIGTERM to the running app containers in
//	              │         parallel, then the sidecars last first, kill
//	              │         after grace, PodKilled. Nothing starts again.
//	              ▼
//	         terminated ─── syncTerminatedPod: stop and remove the sandbox
//	              │         (IP, volumes, cgroups), the last status report,
//	              │         the agent forgets the pod (a tombstone), then
//	              ▼         PodDeleted.
//	            gone: the worker is finished.
//
// A pending delete wins over further syncing. After every step the worker
// flushes its reporter (the pod's status and events). When the agent
// stops, the worker stops in whatever state: the pod keeps running in the
// runtime and the next agent adopts it, or finishes its termination.
//
// Everything below sched is touched only by the worker's steps, one at a
// time (the pool's mutex orders one step before the next); the agent
// reads rep.Reported.
type worker struct {
	d     *workerDeps
	pod   *corev1.Pod
	uid   string
	names podNames // the pod's container names, read by Agent.ReadLog
	gen   uint64   // the agent's start count at this worker's start (ListMark)

	// mail is what the agent hands the worker for its next step: a
	// pending delete and the store's latest pod. A mutex and three fields,
	// not two buffered channels: those cost ~300 bytes a pod.
	mail  sync.Mutex
	grace *time.Duration // guarded by mail: a pending delete (queueDelete)
	next  *podUpdate     // guarded by mail: the store's latest pod (update)
	sched schedState     // guarded by the pool's mutex

	// The flags and small enums sit together: Go lays fields out in
	// order, and each alone between pointers takes 8 bytes.
	begun bool // the first step ran
	state workState
	qos   qosClass
	// policy is the pod's restartPolicy.
	policy restartPolicy
	// mounted: the volumes are; remount asks for their re-sync at once
	// (the labels or annotations changed).
	mounted, remount bool
	// initialized: every init container has completed (a sidecar: has
	// started) once; from then on a restarting sidecar holds nothing up.
	initialized bool

	timer Timer // kicks the worker when syncPod wants to run again

	rep *reporter
	rec *recovered // what an earlier agent left, until adopted
	// prior is the status the pod came with (the scheduler's, an earlier
	// agent's): its startTime and conditions, read until taken over
	// (forgetPrior).
	prior     *corev1.PodStatus
	startTime time.Time
	// conds are the pod's conditions as last set (setCond); nil until
	// the first status.
	conds *podConds

	sandbox *Sandbox
	exits   <-chan ContainerExit
	// sandboxRetry and mountRetry are nil until their setup first fails
	// (retry).
	sandboxRetry, mountRetry *retry
	// volSums is, per configMap, secret or downwardAPI volume, a digest
	// of the files last mounted; volSync is when they are next re-synced.
	volSums volDigests
	volSync time.Time
	// tokens are the projected serviceAccountTokens the worker holds, one
	// per expiration and audience (satoken.go): a pod has one or two, so
	// a slice, not a map (a map of one entry costs ~500 bytes a pod).
	tokens []podToken
	// usageCheck is when the emptyDir sizeLimits are next checked
	// (checkEmptyDirs).
	usageCheck  time.Time
	inits, apps []*ctr
	ephs        []*ctr // ephemeral containers, started once (ephemeral.go)
	failed      *ctr   // the container whose exit made the pod Failed
	// rejected: the node failed the pod as a whole — refused as kubelet's
	// admission refuses one (SysctlForbidden), or past its active deadline
	// (DeadlineExceeded): Failed with that reason, never retried.
	rejected *podFailure
}

// workState is where a worker's pod is in its life; see worker.
type workState uint8

const (
	syncing     workState = iota // syncPod: converging on the spec
	terminating                  // syncTerminatingPod: stopping the containers
	terminated                   // syncTerminatedPod: releasing the rest, last report
)

// workerDeps is what a pod worker uses of its node: built once by the
// agent and shared, read-only, by all its workers.
type workerDeps struct {
	ctx   context.Context // the agent's: ends when it stops
	pool  *Pool           // runs the workers' steps
	steps *steps          // the agent's workers queued or running
	// finish makes the agent forget a worker whose pod is gone.
	finish  func(w *worker)
	cfg     Config
	rt      Runtime
	volumes volumeSource
	// allocatable is the node's allocatable quantity of a resource, the
	// limit the downward API reports for a container that sets none.
	allocatable func(name string) (string, bool)
	pub         Publisher
	clock       Clock
	log         *slog.Logger
	// retire makes the agent forget w and keep a tombstone of its pod, so
	// that a redelivered bind or delete is a no-op. It is called once the
	// pod is torn down, before its PodDeleted is published.
	retire func(w *worker)
	// ports is the host ports of the pods the node admitted (hostports.go).
	ports *hostPorts
}

// ctr is one container of the pod and its current instance.
type ctr struct {
	spec     *corev1.Container
	id       ContainerID
	imageID  string
	runImage string // the image the current instance was started with
	state    *corev1.ContainerState
	lastTerm *corev1.ContainerStateTerminated
	restarts int32

	// The flags sit together (see worker).
	init        bool
	sidecar     bool // an init container with restartPolicy Always (KEP-753)
	everStarted bool
	ready       bool
	started     bool
	done        bool // init: succeeded; app: terminated for good
	killed      bool // stopped by the agent after a probe failure
	ephemeral   bool // an ephemeral container: started once, never restarted
	inBackoff   bool // waiting state already says why it is not started

	startedAt time.Time
	target    string // ephemeral: the container whose PID namespace it joins

	// crash is the CrashLoopBackOff (when the container may start again),
	// pull the ImagePullBackOff (when the image may be pulled again): nil
	// until the first failure (retry).
	crash, pull *retry
	// configRetry: after a CreateContainerConfigError, when to make the
	// container's configuration again. No instance was created, so there
	// is no crash back-off: kubelet's pod worker syncs again after its
	// backOffPeriod (CrashLoopBackOff.Initial, 10s), and at once on a pod
	// update (onMeta resets it).
	configRetry time.Time

	probes []*probeState
}

func (c *ctr) running() bool { return c.state.GetRunning() != nil }

// newWorker returns the worker of pod, the agent's own copy of it
// (workerCopy): it takes the pod's status out of it (prior).
func newWorker(d *workerDeps, pod *corev1.Pod, rec *recovered) *worker {
	w := &worker{
		d: d, pod: pod, uid: pod.GetMetadata().GetUid(), names: namesOf(pod),
		rep:    newReporter(d, pod),
		rec:    rec,
		qos:    qosOf(podrules.QOSClass(pod)),
		policy: policyOf(pod.GetSpec().GetRestartPolicy()),
		prior:  pod.GetStatus(),
	}
	pod.Status = nil // the worker's own copy: what is read of it is in prior
	for _, c := range pod.GetSpec().GetInitContainers() {
		w.inits = append(w.inits, w.newCtr(c, true))
	}
	for _, c := range pod.GetSpec().GetContainers() {
		w.apps = append(w.apps, w.newCtr(c, false))
	}
	w.onEphemeral(pod.GetSpec().GetEphemeralContainers())
	return w
}

// podUpdate is what a pod update (a redelivered bind, a reconcile) brings
// the worker of a running pod: of what may change on a pod, its metadata
// (the labels and annotations: onMeta), its containers' images (the one
// container field an update may change: onImages), its ephemeral
// containers (added by kubectl debug: onEphemeral) and its
// activeDeadlineSeconds (set or lowered: onDeadline).
type podUpdate struct {
	md       *corev1.ObjectMeta
	images   podImages
	ephs     []*corev1.EphemeralContainer
	deadline *int64
}

// update hands the worker the store's current pod and reports whether
// it queued an update for the worker's next step. An update the worker
// has not taken yet is replaced, but for its ephemeral containers when
// pod has none: the list only grows, and an update without it (a stale
// read) keeps the one pending. With none pending, a pod that changes
// nothing onUpdate takes (changes) is not queued, as kubelet's pod config
// hands its pod workers no update of a pod whose spec, labels and
// annotations are unchanged: a reconcile hands every pod of the node
// over every minute, most of them only their status changed.
func (w *worker) update(pod *corev1.Pod) bool {
	w.mail.Lock()
	defer w.mail.Unlock()
	if w.next == nil && !w.changes(pod) {
		return false
	}
	u := &podUpdate{md: vt.Clone(pod.GetMetadata()), images: imagesOf(pod), ephs: pod.GetSpec().GetEphemeralContainers(),
		deadline: pod.GetSpec().ActiveDeadlineSeconds}
	if w.next != nil && len(u.ephs) == 0 {
		u.ephs = w.next.ephs
	}
	w.next = u
	return true
}

// changes reports whether onUpdate would change anything taking pod:
// its labels or annotations (onMeta), a container's image (onImages), an
// ephemeral container not yet known (onEphemeral) or its
// activeDeadlineSeconds (onDeadline). The caller holds mail, under which
// the step applies its updates (applyUpdate).
func (w *worker) changes(pod *corev1.Pod) bool {
	if cur := w.pod.GetMetadata(); cur != nil && !(maps.Equal(cur.GetLabels(), pod.GetMetadata().GetLabels()) &&
		sameAnnotations(cur.GetAnnotations(), pod.GetMetadata().GetAnnotations())) {
		return true
	}
	spec := pod.GetSpec()
	for _, cs := range []struct {
		list []*corev1.Container
		init bool
	}{{spec.GetInitContainers(), true}, {spec.GetContainers(), false}} {
		for _, c := range cs.list {
			if img := c.GetImage(); img != "" {
				if x := w.byName(c.GetName(), cs.init); x != nil && x.spec.GetImage() != img {
					return true
				}
			}
		}
	}
	for _, ec := range spec.GetEphemeralContainers() {
		if w.ephByName(ec.GetName()) == nil {
			return true
		}
	}
	if spec == nil || spec.ActiveDeadlineSeconds == nil {
		return false
	}
	cur := w.pod.GetSpec()
	return cur == nil || cur.ActiveDeadlineSeconds == nil || *cur.ActiveDeadlineSeconds != *spec.ActiveDeadlineSeconds
}

// sameAnnotations reports whether a and b are equal but for
// podrules.AnnotationStatusSeq: the status stage's record of the last
// status report of the node's own it applied, written with every status
// the node reports. A status write is no pod update for kubelet's pod
// config (a reconcile, which reaches the status manager only); taken for
// one, every pod's volumes were mounted again at every reconcile.
func sameAnnotations(a, b map[string]string) bool {
	n := 0
	for k, v := range a {
		if k == podrules.AnnotationStatusSeq {
			continue
		}
		if w, ok := b[k]; !ok || w != v {
			return false
		}
		n++
	}
	_, seq := b[podrules.AnnotationStatusSeq]
	if seq {
		n++
	}
	return n == len(b)
}

// applyUpdate takes the pending update, if any (onUpdate). It holds mail
// while it does, so that update compares a pod with what the worker holds
// before or after an update, never halfway (changes).
func (w *worker) applyUpdate() {
	w.mail.Lock()
	defer w.mail.Unlock()
	if u := w.next; u != nil {
		w.next = nil
		w.onUpdate(*u)
	}
}

// queueDelete queues a delete with its grace and reports whether it was
// queued: while one is pending, a later one is not (its grace is not
// honoured, even a shorter one: Kubernetes only ever shortens it).
func (w *worker) queueDelete(grace time.Duration) bool {
	w.mail.Lock()
	defer w.mail.Unlock()
	if w.grace != nil {
		return false
	}
	w.grace = &grace
	return true
}

// takeDelete returns the pending delete's grace and forgets it (ok
// false: none).
func (w *worker) takeDelete() (grace time.Duration, ok bool) {
	w.mail.Lock()
	defer w.mail.Unlock()
	if w.grace == nil {
		return 0, false
	}
	grace = *w.grace
	w.grace = nil
	return grace, true
}

// onUpdate takes a pod update, each part as kubelet's pod worker does.
func (w *worker) onUpdate(u podUpdate) {
	w.onMeta(u.md)
	w.onImages(u.images)
	w.onEphemeral(u.ephs)
	w.onDeadline(u.deadline)
}

// onDeadline takes the pod's new spec.activeDeadlineSeconds, as kubelet's
// activeDeadlineHandler reads the current pod: the API lets an update set
// it or lower it, and the next sync fails the pod once it has run that
// long (counted from status.startTime). An update without one keeps the
// current one: it may not be removed.
func (w *worker) onDeadline(s *int64) {
	cur := w.pod.GetSpec().ActiveDeadlineSeconds
	if s == nil || (cur != nil && *cur == *s) {
		return
	}
	spec := vt.Clone(w.pod.GetSpec())
	v := *s
	spec.ActiveDeadlineSeconds = &v
	w.pod.Spec = spec
}

func (w *worker) newCtr(spec *corev1.Container, init bool) *ctr {
	return &ctr{spec: spec, init: init, sidecar: init && spec.GetRestartPolicy() == "Always"}
}

// step is one turn of the worker, run by its Pool: on the first, the
// pod's start time and what an earlier agent left (adopt); then the
// container exits the runtime delivered and the pending pod update; then
// either the pending delete (terminating and terminated, to the end) or
// one syncPod and a flush, with a timer set for when syncPod wants to run
// again. It reports whether the worker is finished: the pod is gone, or
// the agent stopped (the pod keeps running in the runtime and the next
// agent adopts it, or finishes its termination).
func (w *worker) step() (finished bool) {
	ctx := w.d.ctx
	if ctx.Err() != nil {
		w.arm(time.Time{})
		return true
	}
	if !w.begun {
		w.begun = true
		w.startTime = w.now()
		if st := w.prior.GetStartTime(); st != nil {
			w.startTime = st.AsTime()
		}
		w.adopt(ctx)
	}
	w.takeExits(ctx)
	w.applyUpdate()
	if grace, ok := w.takeDelete(); ok { // a pending delete wins over further progress
		w.arm(time.Time{})
		w.terminate(ctx, grace)
		w.d.finish(w)
		return true
	}
	wake := w.syncPod(ctx)
	w.arm(earliest(wake, w.flush(ctx)))
	return ctx.Err() != nil
}

// kick asks the pool for a step of the worker.
func (w *worker) kick() { w.d.pool.kick(w) }

// takeExits handles the container exits the runtime has delivered.
func (w *worker) takeExits(ctx context.Context) {
	for w.exits != nil {
		select {
		case ex := <-w.exits:
			w.onExit(ctx, ex)
		default:
			return
		}
	}
}

// watchExits takes the pod's exit channel from the runtime and has the
// runtime kick the worker on each exit.
func (w *worker) watchExits() {
	w.exits = w.d.rt.ContainerExits(w.uid)
	w.d.rt.NotifyExits(w.uid, w.kick)
}

// arm sets the worker's timer for wake (zero: none). A wake already due
// asks for another step at once.
func (w *worker) arm(wake time.Time) {
	if wake.IsZero() {
		if w.timer != nil {
			w.timer.Stop()
		}
		return
	}
	d := wake.Sub(w.now())
	if d <= 0 {
		if w.timer != nil {
			w.timer.Stop()
		}
		w.kick()
		return
	}
	if w.timer == nil {
		w.timer = w.d.clock.AfterFunc(d, w.kick)
		return
	}
	w.timer.Reset(d)
}

// terminate runs the last two steps in order. Each gives up only when ctx
// ends (the agent stops); the next agent finishes.
func (w *worker) terminate(ctx context.Context, grace time.Duration) {
	if w.syncTerminatingPod(ctx, grace) {
		w.syncTerminatedPod(ctx)
	}
}

func (w *worker) now() time.Time { return w.d.clock.Now() }

// deleting reports whether the pod is past syncing.
func (w *worker) deleting() bool { return w.state != syncing }

// flush reports the pod's current status and what happened since the last
// report; it returns when to retry a failed publish (zero: nothing pending).
func (w *worker) flush(ctx context.Context) time.Time {
	st := w.buildStatus(w.now())
	var final *podFailure
	if st.GetPhase() == "Failed" && !w.deleting() {
		final = w.failure()
	}
	return w.rep.Flush(ctx, st, final)
}

// failure says why the pod failed: its rejection, or the container whose
// exit made it Failed.
func (w *worker) failure() *podFailure {
	if w.rejected != nil {
		return w.rejected
	}
	f := &podFailure{reason: eventsv1.ReasonError}
	if w.failed != nil {
		t := w.failed.state.GetTerminated()
		f.reason, f.container = t.GetReason(), w.failed.spec.GetName()
		f.message = fmt.Sprintf("container %q exited with code %d", f.container, t.GetExitCode())
	}
	return f
}

// adopt takes over the sandbox and containers an earlier agent left.
func (w *worker) adopt(ctx context.Context) {
	if w.rec == nil {
		return
	}
	// A released sandbox (a finished pod's) is not taken: nothing runs in
	// it, and a pod that must run again gets a new one.
	if !w.rec.sandbox.Released {
		w.d.ports.hold(w.uid, w.pod) // admitted by the agent before
		sb := w.rec.sandbox.Sandbox
		w.sandbox = &sb
		w.mounted = w.rec.sandbox.VolumesReady
		w.watchExits()
	}
	now := w.now()
	for _, info := range w.rec.containers {
		c := w.byName(info.Name, info.Init)
		if c == nil || (c.everStarted && c.startedAt.After(info.StartedAt)) {
			continue
		}
		c.id, c.imageID, c.restarts, c.everStarted = info.ID, info.ImageID, info.RestartCount, true
		c.runImage = info.Image // another than the spec's: restarted (restartChanged)
		c.startedAt = info.StartedAt
		c.state = &corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: timestamppb.New(info.StartedAt)}}
		c.started = true
		c.ready = c.probe(ProbeReadiness) == nil
		c.resetProbes(now, w.d.cfg.SpecSecond)
		if info.Exit != nil && !info.Running {
			w.onExit(ctx, *info.Exit)
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
	if !init {
		return w.ephByName(name) // names are unique across all of a pod's containers
	}
	return nil
}

// all returns the init containers, then the app containers, then the
// ephemeral ones.
func (w *worker) all() []*ctr {
	return append(append(w.inits[:len(w.inits):len(w.inits)], w.apps...), w.ephs...)
}

// ------------------------------------------------------------------ syncing

// syncPod is kubelet's SyncPod: it performs every action that is due to
// bring the pod to its spec and returns when it wants to run again (zero:
// only on an event). A finished pod only has its sandbox released; a pod
// past its active deadline is first killed (see deadlineExceeded), one
// whose emptyDir outgrew its sizeLimit is evicted (checkEmptyDirs).
func (w *worker) syncPod(ctx context.Context) time.Time {
	usage := w.checkEmptyDirs(ctx)
	dl := w.activeDeadline()
	if !dl.IsZero() && !w.terminal() {
		if !w.now().Before(dl) {
			w.deadlineExceeded(ctx)
		} else {
			return earliest(usage, earliest(dl, w.converge(ctx)))
		}
	}
	return earliest(usage, w.converge(ctx))
}

// converge is syncPod's work on a pod within its deadline.
func (w *worker) converge(ctx context.Context) time.Time {
	now := w.now()
	if w.failed != nil || w.allDone() {
		w.stopSidecars(ctx) // sidecars do not keep a finished pod running
	}
	if w.terminal() {
		// A finished pod holds no host port.
		w.d.ports.release(w.uid)
		if w.sandbox != nil { // like kubelet, free the IP of a finished pod
			if err := w.release(ctx); err != nil {
				return now.Add(w.d.cfg.PublishRetry)
			}
		}
		return time.Time{}
	}
	if wake, ok := w.ensureSandbox(ctx, now); !ok {
		return wake
	}
	volWake, ok := w.ensureVolumes(ctx, now)
	if !ok {
		return volWake
	}
	if w.restartChanged(ctx) {
		now = w.now()
	}
	wake, ok := w.syncInits(ctx, now)
	wake = earliest(wake, earliest(volWake, w.syncEphemeral(ctx, now)))
	if ok {
		for _, c := range w.apps {
			if !c.running() && !c.done {
				wake = earliest(wake, w.startContainer(ctx, c, now))
			}
		}
	}
	return earliest(wake, w.runProbes(ctx, now))
}

// activeDeadline is when the pod's spec.activeDeadlineSeconds, counted
// from status.startTime, runs out (zero: it has none), as kubelet's
// activeDeadlineHandler: past it from that instant on (duration >= allowed).
func (w *worker) activeDeadline() time.Time {
	s := w.pod.GetSpec().ActiveDeadlineSeconds
	if s == nil || w.startTime.IsZero() {
		return time.Time{}
	}
	return w.startTime.Add(time.Duration(*s) * w.d.cfg.SpecSecond)
}

// msgDeadlineExceeded is kubelet's message (pkg/kubelet/active_deadline.go).
const msgDeadlineExceeded = "Pod was active on the node longer than the specified deadline"

// deadlineExceeded fails the pod as kubelet's activeDeadlineHandler does
// (ShouldEvict): an Event DeadlineExceeded (Normal, as kubelet records
// it), phase Failed with reason DeadlineExceeded and kubelet's message,
// and every running container stopped as a delete stops them (preStop,
// SIGTERM, SIGKILL after terminationGracePeriodSeconds); nothing restarts,
// the sandbox is released, the pod stays until deleted. The status is
// reported once the containers have stopped, with the final PodFailed.
func (w *worker) deadlineExceeded(ctx context.Context) {
	w.rep.Normal(eventsv1.ReasonDeadlineExceeded, msgDeadlineExceeded)
	w.rejected = &podFailure{reason: eventsv1.ReasonDeadlineExceeded, message: msgDeadlineExceeded}
	w.killing()
	w.stopAll(ctx, gracePeriod(w.pod, &w.d.cfg))
}

// syncInits runs the init containers in order, as kubelet's
// computeInitContainerActions: the next starts once a regular one has
// succeeded or a sidecar has started (its startup probe passed). A sidecar
// that is not running is started again, also after initialization. ok
// means the pod is initialized and its app containers may run.
func (w *worker) syncInits(ctx context.Context, now time.Time) (wake time.Time, ok bool) {
	for _, c := range w.inits {
		switch {
		case c.sidecar:
			if !c.running() && !c.done {
				wake = earliest(wake, w.startContainer(ctx, c, now))
			}
			if !w.initialized && !c.started {
				return wake, false
			}
		case c.done || w.initialized:
		case c.running():
			return wake, false
		default:
			return earliest(wake, w.startContainer(ctx, c, now)), false
		}
	}
	w.initialized = true
	return wake, true
}

// stopSidecars stops the sidecars of a pod whose app containers have
// finished for good (or whose initialization failed), last one first, as
// kubelet does; they are not restarted.
func (w *worker) stopSidecars(ctx context.Context) {
	for i := len(w.inits) - 1; i >= 0; i-- {
		c := w.inits[i]
		if !c.sidecar || c.done {
			continue
		}
		c.done = true
		if !c.running() {
			continue
		}
		w.rep.Normal(eventsv1.ReasonKilling, "Stopping container "+c.spec.GetName())
		w.kill(ctx, []*ctr{c}, gracePeriod(w.pod, &w.d.cfg), func(c *ctr, ex ContainerExit) { w.recordExit(ctx, c, ex) })
	}
}

// ensureSandbox creates the pod's sandbox unless it has one; !ok means it
// has none yet and the worker should run again at wake.
func (w *worker) ensureSandbox(ctx context.Context, now time.Time) (wake time.Time, ok bool) {
	if w.sandbox != nil {
		return time.Time{}, true
	}
	if !w.sandboxRetry.Ready(now) {
		return w.sandboxRetry.At(), false
	}
	if !w.d.ports.admit(w.uid, w.pod) { // kubelet's admission: NodePorts
		w.reject(reasonNodePorts, msgNodePorts)
		return time.Time{}, false
	}
	sb, err := w.d.rt.RunPodSandbox(ctx, w.pod)
	if err != nil {
		if ctx.Err() != nil {
			return time.Time{}, false
		}
		if CodeOf(err, CodeSandbox) == CodeSysctlForbidden {
			w.reject(string(CodeSysctlForbidden), message(err))
			return time.Time{}, false
		}
		at := fail(&w.sandboxRetry, &w.d.cfg.SetupBackOff, now)
		msg := "Failed to create pod sandbox: " + message(err)
		w.rep.Warn(eventsv1.ReasonFailedCreatePodSandBox, msg)
		w.rep.Failed(eventsv1.ReasonFailedCreatePodSandBox, msg, "", false)
		return at, false
	}
	w.sandbox = &sb
	w.sandboxRetry = nil
	w.watchExits()
	w.rep.Emit(&eventsv1.Envelope{Payload: &eventsv1.Envelope_PodSandboxReady{PodSandboxReady: &eventsv1.PodSandboxReady{
		SandboxId: sb.ID, PodIp: sb.IP, HostIp: w.d.cfg.HostIP}}})
	return time.Time{}, true
}

// reject fails the pod as kubelet's rejectPod: a Warning Event with the
// admission's reason and message, then phase Failed with that reason and
// "Pod was rejected: <message>"; the final PodFailed follows the report.
func (w *worker) reject(reason, msg string) {
	w.rep.Warn(reason, msg)
	w.rejected = &podFailure{reason: reason, message: "Pod was rejected: " + msg}
}

// ensureVolumes mounts the pod's volumes unless they are, and re-syncs
// them when due (refreshVolumes); !ok means they are not mounted yet. The
// worker should run again at wake.
func (w *worker) ensureVolumes(ctx context.Context, now time.Time) (wake time.Time, ok bool) {
	if w.mounted {
		return w.refreshVolumes(ctx, now), true
	}
	if !w.mountRetry.Ready(now) {
		return w.mountRetry.At(), false
	}
	vols, err := w.resolveVolumes(ctx)
	if err == nil {
		err = w.d.rt.MountVolumes(ctx, w.pod, vols)
	}
	if err != nil {
		if ctx.Err() != nil {
			return time.Time{}, false
		}
		at := fail(&w.mountRetry, &w.d.cfg.SetupBackOff, now)
		msg := message(err)
		w.rep.Warn(eventsv1.ReasonFailedMount, msg)
		w.rep.Failed(eventsv1.ReasonFailedMount, msg, "", false)
		return at, false
	}
	w.mounted = true
	w.mountRetry = nil
	sums, _ := changedVolumes(w.volSums, vols)
	w.volSums = w.volSums.merge(sums)
	return w.nextVolumeSync(now), true
}

// startContainer pulls c's image and starts it, unless a back-off holds it;
// it returns when to sync again.
func (w *worker) startContainer(ctx context.Context, c *ctr, now time.Time) time.Time {
	name, image := c.spec.GetName(), c.spec.GetImage()
	if now.Before(c.configRetry) {
		return c.configRetry
	}
	if !c.crash.Ready(now) {
		if !c.inBackoff {
			c.inBackoff = true
			if t := c.state.GetTerminated(); t != nil {
				c.lastTerm = t
			}
			c.setWaiting(eventsv1.ReasonCrashLoopBackOff, fmt.Sprintf("back-off %s restarting failed container=%s pod=%s",
				c.crash.Delay(), name, podRef(w.pod)))
			w.rep.Warn(eventsv1.ReasonBackOff, fmt.Sprintf("Back-off restarting failed container %s in pod %s", name, podRef(w.pod)))
			w.rep.Failed(eventsv1.ReasonCrashLoopBackOff, c.state.GetWaiting().GetMessage(), name, false)
		}
		return c.crash.At()
	}
	if !c.pull.Ready(now) {
		flip := c.pull.Halfway()
		if !now.Before(flip) && c.state.GetWaiting().GetReason() == eventsv1.ReasonErrImagePull {
			msg := fmt.Sprintf("Back-off pulling image %q", image)
			c.setWaiting(eventsv1.ReasonImagePullBackOff, msg)
			w.rep.Normal(eventsv1.ReasonBackOff, msg)
			w.rep.Failed(eventsv1.ReasonImagePullBackOff, msg, name, false)
		}
		if now.Before(flip) {
			return flip
		}
		return c.pull.At()
	}
	policy := podrules.PullPolicy(c.spec)
	began := w.now()
	ref, err := w.pullImage(ctx, image, policy)
	if err != nil {
		if ctx.Err() != nil {
			return time.Time{}
		}
		reason := string(CodeOf(err, CodeImagePull))
		fail(&c.pull, &w.d.cfg.ImagePullBackOff, now)
		msg := message(err)
		if reason != eventsv1.ReasonErrImageNeverPull {
			w.rep.Normal(eventsv1.ReasonPulling, fmt.Sprintf("Pulling image %q", image))
		}
		w.rep.Warn("Failed", fmt.Sprintf("Failed to pull image %q: %s", image, msg))
		w.rep.Warn("Failed", "Error: "+reason)
		c.setWaiting(reason, msg)
		w.rep.Failed(reason, msg, name, false)
		return c.pull.Halfway()
	}
	c.pull = nil
	c.imageID = ref.ID
	if ref.AlreadyPresent {
		w.rep.Normal(eventsv1.ReasonPulled, fmt.Sprintf("Container image %q already present on machine", image))
	} else {
		took := w.now().Sub(began)
		w.rep.Normal(eventsv1.ReasonPulling, fmt.Sprintf("Pulling image %q", image))
		w.rep.Normal(eventsv1.ReasonPulled, fmt.Sprintf("Successfully pulled image %q in %s", image, took))
		w.rep.Emit(&eventsv1.Envelope{Payload: &eventsv1.Envelope_ImagePulling{ImagePulling: &eventsv1.ImagePulling{Container: name, Image: image}}})
	}
	w.rep.Emit(&eventsv1.Envelope{Payload: &eventsv1.Envelope_ImagePulled{ImagePulled: &eventsv1.ImagePulled{
		Container: name, Image: image, ImageId: ref.ID, SizeBytes: ref.SizeBytes,
		DurationNanos: int64(w.now().Sub(began)), AlreadyPresent: ref.AlreadyPresent}}})

	// As kubelet, the environment is made once the image is there; a
	// source it cannot read is a CreateContainerConfigError.
	cfg, err := w.containerConfig(ctx, c.spec)
	var id ContainerID
	if err == nil {
		id, err = w.runContainer(ctx, c, cfg)
	}
	if err != nil {
		if ctx.Err() != nil {
			return time.Time{}
		}
		reason := string(CodeOf(err, CodeRunContainer))
		msg := message(err)
		var at time.Time
		if CodeOf(err, CodeRunContainer) == CodeCreateContainerConfig {
			c.configRetry = now.Add(w.d.cfg.CrashLoopBackOff.Initial)
			at = c.configRetry
		} else {
			at = fail(&c.crash, &w.d.cfg.CrashLoopBackOff, now)
		}
		c.inBackoff = true
		c.setWaiting(reason, msg)
		w.rep.Warn("Failed", "Error: "+msg)
		w.rep.Failed(reason, msg, name, false)
		return at
	}
	if t := c.state.GetTerminated(); t != nil {
		c.lastTerm = t
	}
	if c.everStarted {
		c.restarts++
	}
	started := w.now()
	c.everStarted, c.id, c.startedAt, c.inBackoff, c.killed = true, id, started, false, false
	c.runImage = image
	c.state = &corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: timestamppb.New(started)}}
	c.started = c.probe(ProbeStartup) == nil
	c.ready = c.started && c.probe(ProbeReadiness) == nil
	c.resetProbes(started, w.d.cfg.SpecSecond)
	w.rep.Normal(eventsv1.ReasonCreated, "Created container "+name)
	w.rep.Normal(eventsv1.ReasonStarted, "Started container "+name)
	w.rep.Emit(&eventsv1.Envelope{Payload: &eventsv1.Envelope_ContainerStarted{ContainerStarted: &eventsv1.ContainerStarted{
		Container: name, ContainerId: string(id), RestartCount: c.restarts, Init: c.init}}})
	w.postStart(ctx, c)
	return w.now() // probes and the next container: sync again at once
}

// onExit records a container's exit and decides, by restart policy, whether
// it will be restarted (after a CrashLoopBackOff delay) or is done.
func (w *worker) onExit(ctx context.Context, ex ContainerExit) {
	var c *ctr
	for _, x := range w.all() {
		if x.id == ex.ID && x.running() {
			c = x
		}
	}
	if c == nil {
		return // an instance already accounted for
	}
	w.recordExit(ctx, c, ex)
	failed := ex.ExitCode != 0 || c.killed
	restart := false
	switch {
	case c.ephemeral: // never restarted
	case c.sidecar: // restarted whatever the pod's restartPolicy
		restart = !c.done
	case c.init:
		restart = failed && w.policy != policyNever
		if !restart && failed {
			w.failed = c
		}
	case c.killed:
		restart = w.policy != policyNever
	default:
		restart = w.policy == policyAlways || (w.policy == policyOnFailure && failed)
	}
	if !restart {
		c.done = true
		return
	}
	c.crash.Forgive(ex.FinishedAt.Sub(c.startedAt))
	fail(&c.crash, &w.d.cfg.CrashLoopBackOff, w.now())
	c.inBackoff = false
}

func (w *worker) recordExit(ctx context.Context, c *ctr, ex ContainerExit) {
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
		ExitCode: ex.ExitCode, Signal: ex.Signal, Reason: reason, Message: w.terminationMessage(ctx, c, ex),
		StartedAt: timestamppb.New(c.startedAt), FinishedAt: timestamppb.New(ex.FinishedAt), ContainerId: string(c.id),
	}}
	c.ready, c.started = false, false
	w.rep.Emit(&eventsv1.Envelope{Payload: &eventsv1.Envelope_ContainerExited{ContainerExited: &eventsv1.ContainerExited{
		Container: c.spec.GetName(), ContainerId: string(c.id), ExitCode: ex.ExitCode, Reason: reason,
		RestartCount: c.restarts, Init: c.init}}})
}

func (c *ctr) setWaiting(reason, msg string) {
	c.state = &corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: msg}}
	c.ready = false
}

// -------------------------------------------------------------- terminating

// syncTerminatingPod is kubelet's SyncTerminatingPod: every running
// container's preStop hook at once; SIGTERM to every container but the
// sidecars as soon as its hook returned, a kill after grace; then the
// sidecars, last one first, each once the ones after it have stopped,
// within what is left of the grace (see hooks.go); every container done,
// PodKilled. It reports false when ctx ended first.
func (w *worker) syncTerminatingPod(ctx context.Context, grace time.Duration) bool {
	w.state = terminating
	names := w.killing()
	w.flush(ctx)
	if !w.stopAll(ctx, grace) {
		return false
	}
	w.rep.Emit(&eventsv1.Envelope{Payload: &eventsv1.Envelope_PodKilled{PodKilled: &eventsv1.PodKilled{Containers: names}}})
	return true
}

// killing records a Killing Event for each running container and returns
// their names.
func (w *worker) killing() []string {
	var names []string
	for _, c := range w.all() {
		if c.running() {
			names = append(names, c.spec.GetName())
			w.rep.Normal(eventsv1.ReasonKilling, "Stopping container "+c.spec.GetName())
		}
	}
	return names
}

// stopAll stops every running container as syncTerminatingPod does and
// marks every container done. It reports false when ctx ended first.
func (w *worker) stopAll(ctx context.Context, grace time.Duration) bool {
	var apps, sidecars []*ctr
	for _, c := range w.all() {
		switch {
		case !c.running():
		case c.sidecar:
			sidecars = append(sidecars, c)
		default:
			apps = append(apps, c)
		}
	}
	deadline := w.now().Add(grace)
	sides := make([]*stopping, len(sidecars))
	for i, c := range sidecars { // their preStop hooks run from the start
		sides[i] = w.startPreStop(ctx, c, grace)
	}
	if !w.kill(ctx, apps, grace, func(c *ctr, ex ContainerExit) { w.recordExit(ctx, c, ex) }) {
		return false
	}
	for i := len(sides) - 1; i >= 0; i-- {
		if !w.finishAll(ctx, sides[i:i+1], deadline, func(c *ctr, ex ContainerExit) { w.recordExit(ctx, c, ex) }) {
			return false
		}
	}
	for _, c := range w.all() {
		c.done = true
	}
	return true
}

// --------------------------------------------------------------- terminated

// syncTerminatedPod is kubelet's SyncTerminatedPod: it tears down the
// sandbox (IP, volumes, cgroups), publishes the last status report, has the
// agent forget the pod, and publishes PodDeleted. A teardown that fails
// (a network namespace that cannot be removed …) is reported as a Warning
// Event FailedKillPod, as kubelet's, and retried under SetupBackOff until
// it succeeds or ctx ends: the pod stays Terminating, never silently.
// Publishing retries every PublishRetry.
func (w *worker) syncTerminatedPod(ctx context.Context) {
	w.state = terminated
	backoff := newRetry(&w.d.cfg.SetupBackOff)
	for {
		err := w.teardown(ctx)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return
		}
		at := backoff.Next(w.now())
		w.rep.Warn(eventsv1.ReasonFailedKillPod, fmt.Sprintf("error killing pod: %s (retrying in %s)", message(err), backoff.Delay()))
		w.flush(ctx)
		if !w.sleep(ctx, at.Sub(w.now())) {
			return
		}
	}
	w.flush(ctx)
	w.d.retire(w) // from here on the pod is gone for the agent
	w.rep.Deleted()
	for {
		if wake := w.flush(ctx); wake.IsZero() {
			return
		}
		if !w.sleep(ctx, w.d.cfg.PublishRetry) {
			return
		}
	}
}

func (w *worker) teardown(ctx context.Context) error {
	if err := w.d.rt.StopPodSandbox(ctx, w.uid); err != nil {
		return fmt.Errorf("stop sandbox of pod %q: %w", podRef(w.pod), err)
	}
	if err := w.d.rt.RemovePodSandbox(ctx, w.uid); err != nil {
		return fmt.Errorf("remove sandbox of pod %q: %w", podRef(w.pod), err)
	}
	w.sandbox, w.exits, w.rec = nil, nil, nil
	return nil
}

// release frees the sandbox of a finished pod: its IP, cgroups and mounts,
// keeping its exited containers' logs until the pod is deleted when the
// runtime can (SandboxReleaser), else removing it whole.
func (w *worker) release(ctx context.Context) error {
	rel, ok := w.d.rt.(SandboxReleaser)
	if !ok {
		return w.teardown(ctx)
	}
	if err := rel.ReleasePodSandbox(ctx, w.uid); err != nil {
		return fmt.Errorf("release sandbox of pod %q: %w", podRef(w.pod), err)
	}
	w.sandbox, w.exits, w.rec = nil, nil, nil
	return nil
}

func (w *worker) sleep(ctx context.Context, d time.Duration) bool {
	t := w.d.clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C():
		return true
	}
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
