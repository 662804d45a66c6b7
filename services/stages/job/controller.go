package job

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"
	batch "k8s.io/api/batch/v1"
	v1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	kubecontroller "k8s.io/kubernetes/pkg/controller"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/vt"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/controller"
	"github.com/podflow/podflow/services/events"
	"github.com/podflow/podflow/services/informer"
	"github.com/podflow/podflow/services/manifest"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/pipeline"
	"github.com/podflow/podflow/services/stage"
)

// TrackingFinalizer holds a Job's pod until the controller counted it
// (batch.JobTrackingFinalizer).
const TrackingFinalizer = batch.JobTrackingFinalizer

// Config configures the controller.
type Config struct {
	// Controller configures the replica's Runner (work queue, Leases).
	Controller controller.Config
	// MaxPodsPerSync bounds the pods one sync creates or deletes (kube's
	// MaxPodCreateDeletePerSync, 500); the next sync does the rest.
	MaxPodsPerSync int
	// MaxInFlight bounds the creations in flight at once (default 500).
	MaxInFlight int
	// BackoffBase is the delay before a pod replacing a failed one
	// (default 10s), doubled for each failure since the last success, at
	// most BackoffMax (default 6m), as kube's DefaultJobPodFailureBackOff
	// and MaxJobPodFailureBackOff.
	BackoffBase, BackoffMax time.Duration
}

// DefaultConfig returns the defaults for a replica of the stage.
func DefaultConfig(replica string) Config {
	return Config{Controller: controller.DefaultConfig(pipeline.Job, replica), MaxPodsPerSync: 500, MaxInFlight: 500,
		BackoffBase: 10 * time.Second, BackoffMax: 6 * time.Minute}
}

// Validate checks the Config.
func (c Config) Validate() error {
	if c.MaxPodsPerSync < 1 || c.MaxInFlight < 1 {
		return fmt.Errorf("job: MaxPodsPerSync (%d) and MaxInFlight (%d) must be at least 1", c.MaxPodsPerSync, c.MaxInFlight)
	}
	if c.BackoffBase <= 0 || c.BackoffMax < c.BackoffBase {
		return fmt.Errorf("job: BackoffBase (%s) must be positive and at most BackoffMax (%s)", c.BackoffBase, c.BackoffMax)
	}
	return c.Controller.Validate()
}

// Controller is one replica of the Job controller stage.
type Controller struct {
	env    stage.Env
	cfg    Config
	runner *controller.Runner
	pods   *controller.Pods
	jobs   *informer.Informer[*corev1.Unstructured]
	podInf *informer.Informer[*corev1.Pod]
	// lazy runs podInf only while there is a Job, or a Job's pod that
	// still carries the tracking finalizer (podsWanted).
	lazy   *informer.Lazy
	sweep  atomic.Bool // podInf's first list is to be looked at (podsWanted)
	events *controller.Events
	log    *slog.Logger

	mu      sync.Mutex
	decoded map[string]*decodedJob
	// used is, by Job, the names of the pods this replica has seen owned
	// by it: a replacement pod does not take the name of one that was
	// there before (kube's generateName gives each pod a new name;
	// clients wait for a failed or evicted pod's name to be gone). Only
	// names of pods that existed count, so replicas choose alike unless
	// one saw a pod the other never did (a pod gone before it started).
	used map[string]*usedNames // by Job key
}

type decodedJob struct {
	rev int64
	job *batch.Job
	sel labels.Selector // nil: an invalid selector, which matches nothing
}

var (
	_ stage.Handler    = (*Controller)(nil)
	_ stage.Starter    = (*Controller)(nil)
	_ stage.Reconciler = (*Controller)(nil)
)

var jobKind = objects.Jobs

// New returns a replica of the controller acting with env's identity; req
// carries its pod requests to the api stage (controller.NATSRequester).
func New(env stage.Env, cfg Config, req controller.Requester) (*Controller, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := env.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.Controller.Log == nil {
		cfg.Controller.Log = log
	}
	c := &Controller{env: env, cfg: cfg, pods: controller.NewPods(env, req), log: log, decoded: map[string]*decodedJob{}}
	c.events = &controller.Events{Recorder: &events.Recorder{Store: env.Store, Component: "job-controller", Instance: env.Replica}}
	var err error
	if c.runner, err = controller.New(env.Store, cfg.Controller, c.sync, c.keys); err != nil {
		return nil, err
	}
	if c.jobs, err = informer.NewKind(env.Store, jobKind, "", informer.Handlers[*corev1.Unstructured]{
		OnAdd: func(u *corev1.Unstructured) {
			c.lazy.Poke()
			c.runner.Add(keyOf(u.GetMetadata()))
		},
		OnUpdate: func(_, u *corev1.Unstructured) { c.runner.Add(keyOf(u.GetMetadata())) },
		OnDelete: func(u *corev1.Unstructured) {
			c.lazy.Poke()
			key := keyOf(u.GetMetadata())
			c.mu.Lock()
			delete(c.decoded, key)
			c.mu.Unlock()
			c.runner.Forget(key)
			c.runner.Add(key) // its pods lose their finalizer
		},
	}); err != nil {
		return nil, err
	}
	if c.podInf, err = controller.NewPodInformer(env.Store, jobKind.Name, informer.Handlers[*corev1.Pod]{
		OnAdd:    func(p *corev1.Pod) { c.podChanged(nil, p) },
		OnUpdate: func(old, p *corev1.Pod) { c.podChanged(old, p) },
		OnDelete: func(p *corev1.Pod) { c.podChanged(p, nil) },
	}); err != nil {
		return nil, err
	}
	if err := c.podInf.AddIndex(finalizerIndex, byFinalizer); err != nil {
		return nil, err
	}
	if c.lazy, err = c.runner.LazyPods(c.podInf, c.podsWanted, c.jobs); err != nil {
		return nil, err
	}
	return c, nil
}

// finalizersStored reports whether a stored pod a Job controls carries
// the tracking finalizer. Only such pods are decoded beyond their owner
// references.
func finalizersStored(ctx context.Context, st *objects.Store) (bool, error) {
	kvs, _, err := st.KV().List(ctx, objects.Pods.Prefix(""))
	if err != nil {
		return false, err
	}
	for _, kv := range kvs {
		var p corev1.Pod
		if objects.DecodeMetaOwners(kv, &p) != nil {
			continue
		}
		if ref := controller.ControllerOf(p.GetMetadata()); ref == nil || ref.GetKind() != jobKind.Name {
			continue
		}
		var full corev1.Pod
		if objects.Decode(kv, &full) == nil && hasFinalizer(&full) {
			return true, nil
		}
	}
	return false, nil
}

// podsWanted is the Job controller's want of pods (its Lazy's): while
// there is a Job, or a Job's pod carries the tracking finalizer. With no
// Job left the controller still removes that finalizer (releaseGone), so
// it keeps watching pods until no pod has it. It cannot know which pods
// have it without listing them: once started it lists the pods once
// (finalizersStored) and, if one has it (a Job deleted while no replica
// ran, or before its pods lost the finalizer), the informer runs until
// its first list is in and has been looked at. Once the informer is stopped a Job's pod with the finalizer
// appears only from a creation that was still in the pipeline when the
// last Job went and lands after Config.Controller.PodsIdle; it is seen
// when a Job next exists or the controller starts again.
func (c *Controller) podsWanted() bool {
	if c.jobs.Len() > 0 {
		return true
	}
	if c.sweep.Load() {
		if c.podInf.Revision() == 0 {
			return true // the first list is not in yet
		}
		c.sweep.Store(false)
	}
	return len(c.podInf.IndexValues(finalizerIndex)) > 0
}

func keyOf(md *corev1.ObjectMeta) string { return controller.Key(md.GetNamespace(), md.GetName()) }

// Handle is never called: the stage consumes no events.
func (c *Controller) Handle(context.Context, *bus.Delivery) error {
	return bus.Permanent(errors.New("job: the controller consumes no events"))
}

// Start runs the informers, the Lease and the workers on g; it returns
// once the informers are synced.
func (c *Controller) Start(ctx context.Context, g *errgroup.Group) error {
	var infs informer.Group
	infs.Add(c.jobs, c.lazy)
	if err := c.runner.Start(ctx, g, &infs); err != nil {
		return err
	}
	// One list, no watch, finds the pods a Job gone while no replica ran
	// left with the finalizer; on a failure the informer looks instead.
	// Beside the start, not before it: a replica syncs its Jobs at once.
	g.Go(func() error {
		if held, err := finalizersStored(ctx, c.env.Store); (err != nil && ctx.Err() == nil) || held {
			c.sweep.Store(true)
			c.lazy.Poke()
		}
		return nil
	})
	return nil
}

// Reconcile queues every Job.
func (c *Controller) Reconcile(ctx context.Context) error { return c.runner.Reconcile(ctx) }

// Runner is the replica's Runner (tests read its Members).
func (c *Controller) Runner() *controller.Runner { return c.runner }

// keys are every Job's, and those of the Jobs gone whose pods keep the
// tracking finalizer (kube's orphan queue): a pod's event that named one
// before this replica owned it is not lost.
func (c *Controller) keys() []string {
	var out []string
	for _, u := range c.jobs.List("") {
		out = append(out, keyOf(u.GetMetadata()))
	}
	for _, key := range c.podInf.IndexValues(finalizerIndex) {
		if ns, name, err := controller.SplitKey(key); err == nil {
			if _, ok := c.jobs.Get(ns, name); !ok {
				out = append(out, key)
			}
		}
	}
	return out
}

// finalizerIndex files a pod a Job controls that carries the tracking
// finalizer under its Job's key.
const finalizerIndex = "jobFinalizer"

func byFinalizer(p *corev1.Pod) []string {
	md := p.GetMetadata()
	if ref := controller.ControllerOf(md); ref != nil && ref.GetKind() == jobKind.Name && hasFinalizer(p) {
		return []string{controller.Key(md.GetNamespace(), ref.GetName())}
	}
	return nil
}

// podChanged queues the Jobs a pod change concerns: its controller's
// (before and after; a Job's pod keeps its Job's key even once the Job is
// gone, so that its finalizer is removed), and, for an orphan, every Job
// of its namespace whose selector matches it.
func (c *Controller) podChanged(old, p *corev1.Pod) {
	for _, q := range []*corev1.Pod{old, p} {
		if q == nil {
			continue
		}
		md := q.GetMetadata()
		if ref := controller.ControllerOf(md); ref != nil {
			if ref.GetKind() == jobKind.Name {
				c.runner.Add(controller.Key(md.GetNamespace(), ref.GetName()))
			}
			continue
		}
		if md.GetDeletionTimestamp() != nil {
			continue
		}
		for _, u := range c.jobs.List(md.GetNamespace()) {
			if d := c.decode(u); d != nil && d.sel != nil && d.sel.Matches(labels.Set(md.GetLabels())) {
				c.runner.Add(keyOf(u.GetMetadata()))
			}
		}
	}
}

func (c *Controller) decode(u *corev1.Unstructured) *decodedJob {
	key, rev := keyOf(u.GetMetadata()), objects.Revision(u)
	c.mu.Lock()
	d := c.decoded[key]
	c.mu.Unlock()
	if d != nil && d.rev == rev {
		return d
	}
	k, err := manifest.ToKube(u)
	if err != nil {
		c.log.Warn("undecodable Job", "key", key, "err", err)
		return nil
	}
	j, ok := k.(*batch.Job)
	if !ok {
		c.log.Warn("a stored Job is not one", "key", key, "type", fmt.Sprintf("%T", k))
		return nil
	}
	d = &decodedJob{rev: rev, job: j}
	if sel, err := metav1.LabelSelectorAsSelector(j.Spec.Selector); err == nil && !sel.Empty() {
		d.sel = sel
	}
	c.mu.Lock()
	c.decoded[key] = d
	c.mu.Unlock()
	return d
}

// now is the controller's clock (Config.Controller.Now).
func (c *Controller) now() time.Time {
	if c.cfg.Controller.Now != nil {
		return c.cfg.Controller.Now()
	}
	return time.Now()
}

func hasFinalizer(p *corev1.Pod) bool {
	return slices.Contains(p.GetMetadata().GetFinalizers(), TrackingFinalizer)
}

func terminal(p *corev1.Pod) bool {
	ph := p.GetStatus().GetPhase()
	return ph == string(v1.PodSucceeded) || ph == string(v1.PodFailed)
}

// active is kube's controller.IsPodActive.
func active(p *corev1.Pod) bool { return !terminal(p) && p.GetMetadata().GetDeletionTimestamp() == nil }

// outcome is a pod's end as the Job counts it: succeeded, failed (a
// Failed pod, or one being deleted before it succeeded unless the Job
// replaces only Failed pods, as kube's isPodFailed), or not finished.
func outcome(p *corev1.Pod, job *batch.Job) (succeeded, failed bool) {
	switch ph := p.GetStatus().GetPhase(); {
	case ph == string(v1.PodSucceeded):
		return true, false
	case ph == string(v1.PodFailed):
		return false, true
	case p.GetMetadata().GetDeletionTimestamp() != nil && !onlyReplaceFailedPods(job):
		return false, true
	}
	return false, false
}

// onlyReplaceFailedPods is kube's: podReplacementPolicy Failed (the
// default of a Job with a podFailurePolicy) waits for a terminating pod
// to fail before replacing it.
func onlyReplaceFailedPods(job *batch.Job) bool {
	return job.Spec.PodReplacementPolicy != nil && *job.Spec.PodReplacementPolicy == batch.Failed
}

func hasBackoffLimitPerIndex(job *batch.Job) bool { return job.Spec.BackoffLimitPerIndex != nil }

// kubePods converts pods to kube's once per sync, for the policies' pure
// functions.
type kubePods map[*corev1.Pod]*v1.Pod

func (k kubePods) of(p *corev1.Pod) *v1.Pod {
	kp, ok := k[p]
	if !ok {
		kp = controller.KubePod(p)
		k[p] = kp
	}
	return kp
}

// sync is kube's syncJob for one key.
func (c *Controller) sync(ctx context.Context, key string) error {
	started := time.Now()
	ns, name, err := controller.SplitKey(key)
	if err != nil {
		return nil
	}
	u, ok := c.jobs.Get(ns, name)
	if !ok {
		c.runner.Forget(key)
		c.forgetNames(ns, name)
		return c.releaseGone(ctx, ns, name)
	}
	d := c.decode(u)
	if d == nil {
		return nil
	}
	job := d.job.DeepCopy()
	uid := string(job.UID)
	if job.Status.UncountedTerminatedPods == nil {
		job.Status.UncountedTerminatedPods = &batch.UncountedTerminatedPods{}
	}
	// The pods are read after the informer's revision: they show at
	// least every change up to podRev.
	podRev := c.podInf.Revision()
	needsSync := c.runner.Satisfied(key, podRev)
	finished := finishedCondition(job) != ""

	var pods []*corev1.Pod
	var claimErr error
	for _, p := range c.podInf.List(ns) {
		md := p.GetMetadata()
		if ref := controller.ControllerOf(md); ref != nil && ref.GetUid() != uid {
			continue
		}
		switch controller.ClaimOf(p, uid, d.sel, job.DeletionTimestamp != nil || finished) {
		case controller.Owned:
			pods = append(pods, p)
			c.useName(job, md.GetName())
		case controller.Adopt:
			if !needsSync {
				continue
			}
			if err := c.adopt(ctx, key, job, p, d.sel); err != nil {
				claimErr = errors.Join(claimErr, err)
				continue
			}
			pods = append(pods, p)
		case controller.Release:
			if err := c.release(ctx, key, ns, md.GetName(), uid); err != nil {
				claimErr = errors.Join(claimErr, err)
			}
		}
	}
	if claimErr != nil {
		return claimErr
	}
	if finished {
		// A finished Job only lets its pods go.
		return c.removeFinalizers(ctx, key, pods)
	}
	return c.syncJob(ctx, key, u, job, pods, podRev, needsSync, started)
}

func finishedCondition(job *batch.Job) batch.JobConditionType {
	for _, cond := range job.Status.Conditions {
		if (cond.Type == batch.JobComplete || cond.Type == batch.JobFailed) && cond.Status == v1.ConditionTrue {
			return cond.Type
		}
	}
	return ""
}

// failJobMessage is kube's getFailJobMessage: the message of the first
// failed pod a FailJob rule of the podFailurePolicy matches.
func failJobMessage(job *batch.Job, pods []*corev1.Pod, kp kubePods) *string {
	if job.Spec.PodFailurePolicy == nil {
		return nil
	}
	for _, p := range pods {
		if _, f := outcome(p, job); f {
			if msg, _, _ := matchPodFailurePolicy(job.Spec.PodFailurePolicy, kp.of(p)); msg != nil {
				return msg
			}
		}
	}
	return nil
}

func findCondition(job *batch.Job, t batch.JobConditionType) *batch.JobCondition {
	for i := range job.Status.Conditions {
		if c := &job.Status.Conditions[i]; c.Type == t && c.Status == v1.ConditionTrue {
			return c
		}
	}
	return nil
}

func isIndexed(job *batch.Job) bool {
	return job.Spec.CompletionMode != nil && *job.Spec.CompletionMode == batch.IndexedCompletion
}

func suspended(job *batch.Job) bool { return job.Spec.Suspend != nil && *job.Spec.Suspend }

func (c *Controller) syncJob(ctx context.Context, key string, u *corev1.Unstructured, job *batch.Job, pods []*corev1.Pod, podRev int64, needsSync bool, started time.Time) error {
	now := c.now()
	unc := job.Status.UncountedTerminatedPods
	uncSucc, uncFail := uidSet(unc.Succeeded), uidSet(unc.Failed)

	var activePods []*corev1.Pod
	terminating := int32(0)
	ready := int32(0)
	var newSucc, newFail []*corev1.Pod
	kp := kubePods{}
	fresh := podRev < objects.Revision(u)
	for _, p := range pods {
		if active(p) {
			activePods = append(activePods, p)
			if isReady(p) {
				ready++
			}
		} else if !terminal(p) {
			terminating++
		}
		s, f := outcome(p, job)
		puid := types.UID(p.GetMetadata().GetUid())
		if !(s || f) || !hasFinalizer(p) || uncSucc[puid] || uncFail[puid] {
			continue
		}
		if fresh {
			// The informer may not show this pod's finalizer removed by
			// the write the Job's counters reflect: read it fresh.
			ok, err := c.stillTracked(ctx, p)
			if err != nil {
				return err
			}
			if !ok {
				continue
			}
		}
		if s {
			newSucc = append(newSucc, p)
		} else {
			newFail = append(newFail, p)
		}
	}

	var succeededIndexes indexSet
	succeeded := job.Status.Succeeded + int32(len(newSucc)+len(uncSucc))
	if isIndexed(job) {
		succeededIndexes = parseIndexes(job.Status.CompletedIndexes, int(*job.Spec.Completions))
		for _, p := range pods {
			if p.GetStatus().GetPhase() == string(v1.PodSucceeded) {
				if i, ok := podIndex(p, int(*job.Spec.Completions)); ok {
					succeededIndexes[i] = true
				}
			}
		}
		succeeded = int32(len(succeededIndexes))
	}
	// A failure an Ignore rule of the podFailurePolicy matches is not
	// counted: its pod is let go (step 2) without entering the counters.
	var ignored []*corev1.Pod
	if job.Spec.PodFailurePolicy != nil {
		counted := newFail[:0:0]
		for _, p := range newFail {
			if _, count, _ := matchPodFailurePolicy(job.Spec.PodFailurePolicy, kp.of(p)); count {
				counted = append(counted, p)
			} else {
				ignored = append(ignored, p)
			}
		}
		newFail = counted
	}
	failed := job.Status.Failed + int32(len(newFail)+len(uncFail))

	if job.Status.StartTime == nil && !suspended(job) {
		t := metav1.NewTime(now)
		job.Status.StartTime = &t
	}

	// The end: a condition found before, or reached now, in kube's order.
	var target *batch.JobCondition
	if cond := findCondition(job, batch.JobSuccessCriteriaMet); cond != nil {
		target = cond.DeepCopy()
	} else if cond := findCondition(job, batch.JobFailureTarget); cond != nil {
		target = cond.DeepCopy()
	} else if msg := failJobMessage(job, pods, kp); msg != nil {
		target = newCondition(batch.JobFailureTarget, batch.JobReasonPodFailurePolicy, *msg, now)
	} else if failed > ptrOr(job.Spec.BackoffLimit, 6) || pastBackoffLimitOnFailure(job, pods) {
		target = newCondition(batch.JobFailureTarget, batch.JobReasonBackoffLimitExceeded, "Job has reached the specified backoff limit", now)
	} else if pastDeadline(job, now) {
		target = newCondition(batch.JobFailureTarget, batch.JobReasonDeadlineExceeded, "Job was active longer than specified deadline", now)
	} else if job.Spec.ActiveDeadlineSeconds != nil && !suspended(job) && job.Status.StartTime != nil {
		c.runner.AddAfter(key, job.Status.StartTime.Add(time.Duration(*job.Spec.ActiveDeadlineSeconds)*time.Second).Sub(now))
	}
	var pi *perIndex
	if isIndexed(job) && hasBackoffLimitPerIndex(job) {
		pi = newPerIndex(job, pods, activePods, succeededIndexes, kp)
		total := pi.failed.total()
		if target == nil {
			if job.Spec.MaxFailedIndexes != nil && total > int(*job.Spec.MaxFailedIndexes) {
				target = newCondition(batch.JobFailureTarget, batch.JobReasonMaxFailedIndexesExceeded, "Job has exceeded the specified maximal number of failed indexes", now)
			} else if total > 0 && total+len(succeededIndexes) >= int(*job.Spec.Completions) {
				target = newCondition(batch.JobFailureTarget, batch.JobReasonFailedIndexes, "Job has failed indexes", now)
			}
		}
		failedIndexes := pi.failed.String()
		job.Status.FailedIndexes = &failedIndexes
	}
	if target == nil && isIndexed(job) {
		if msg, met := matchSuccessPolicy(job.Spec.SuccessPolicy, *job.Spec.Completions, succeededIndexes.intervals()); met {
			target = newCondition(batch.JobSuccessCriteriaMet, batch.JobReasonSuccessPolicy, msg, now)
		}
	}
	if pi != nil && target == nil && job.DeletionTimestamp == nil {
		// A failed pod whose index gets a replacement keeps its finalizer
		// until the replacement exists (it carries the index's failure
		// count on): it is counted then.
		newFail = slices.DeleteFunc(newFail, pi.delayed)
		ignored = slices.DeleteFunc(ignored, pi.delayed)
	}

	nActive := int32(len(activePods))
	var manageErr error
	final := false
	if target != nil {
		deleted, err := c.deletePods(ctx, key, &u, job, activePods, podRev)
		manageErr = err
		nActive -= int32(deleted)
		terminating += int32(deleted)
		final = deleted == len(activePods) && needsSync
	} else {
		if needsSync && job.DeletionTimestamp == nil {
			nActive, manageErr = c.manage(ctx, key, &u, job, pods, activePods, podRev, succeeded, succeededIndexes, pi, terminating, now, started)
		} else if !needsSync {
			c.runner.AddAfter(key, time.Second) // in case no pod event comes
		}
		complete := succeeded > 0 && nActive == 0
		if job.Spec.Completions != nil {
			complete = succeeded >= *job.Spec.Completions && nActive == 0
		}
		if complete {
			target = newCondition(batch.JobSuccessCriteriaMet, batch.JobReasonCompletionsReached, "Reached expected number of succeeded pods", now)
			final = true
		} else if needsSync {
			c.suspendCondition(ctx, job, now)
		}
	}
	job.Status.Active = nActive
	job.Status.Ready = &ready
	job.Status.Terminating = &terminating
	if isIndexed(job) {
		job.Status.CompletedIndexes = succeededIndexes.String()
	}
	if err := c.track(ctx, key, u, job, pods, podRev, newSucc, newFail, ignored, target, final && terminating == 0, now); err != nil {
		return fmt.Errorf("tracking status: %w", err)
	}
	return manageErr
}

func (c *Controller) suspendCondition(ctx context.Context, job *batch.Job, now time.Time) {
	want, reason, msg, ev := v1.ConditionFalse, "JobResumed", "Job resumed", "Resumed"
	if suspended(job) {
		want, reason, msg, ev = v1.ConditionTrue, "JobSuspended", "Job suspended", "Suspended"
	}
	for i := range job.Status.Conditions {
		cond := &job.Status.Conditions[i]
		if cond.Type != batch.JobSuspended {
			continue
		}
		if cond.Status == want {
			return
		}
		cond.Status, cond.Reason, cond.Message = want, reason, msg
		cond.LastProbeTime, cond.LastTransitionTime = metav1.NewTime(now), metav1.NewTime(now)
		c.events.Record(ctx, jobKind.APIVersion(), jobKind.Name, job.Namespace, job.Name, string(job.UID), "Normal", ev, msg)
		if want == v1.ConditionFalse {
			t := metav1.NewTime(now) // activeDeadlineSeconds counts from the resumption
			job.Status.StartTime = &t
		}
		return
	}
	if want == v1.ConditionTrue {
		job.Status.Conditions = append(job.Status.Conditions, *newConditionStatus(batch.JobSuspended, v1.ConditionTrue, reason, msg, now))
		c.events.Record(ctx, jobKind.APIVersion(), jobKind.Name, job.Namespace, job.Name, string(job.UID), "Normal", ev, msg)
	}
}

func newCondition(t batch.JobConditionType, reason, msg string, now time.Time) *batch.JobCondition {
	return newConditionStatus(t, v1.ConditionTrue, reason, msg, now)
}

func newConditionStatus(t batch.JobConditionType, st v1.ConditionStatus, reason, msg string, now time.Time) *batch.JobCondition {
	return &batch.JobCondition{Type: t, Status: st, Reason: reason, Message: msg,
		LastProbeTime: metav1.NewTime(now), LastTransitionTime: metav1.NewTime(now)}
}

// pastBackoffLimitOnFailure is kube's: under restartPolicy OnFailure the
// restarts of the running and pending pods' containers count against
// backoffLimit (any restart when it is 0).
func pastBackoffLimitOnFailure(job *batch.Job, pods []*corev1.Pod) bool {
	if job.Spec.Template.Spec.RestartPolicy != v1.RestartPolicyOnFailure {
		return false
	}
	result := int32(0)
	for _, p := range pods {
		if ph := p.GetStatus().GetPhase(); ph == string(v1.PodRunning) || ph == string(v1.PodPending) {
			for _, cs := range slices.Concat(p.GetStatus().GetInitContainerStatuses(), p.GetStatus().GetContainerStatuses()) {
				result += cs.GetRestartCount()
			}
		}
	}
	limit := ptrOr(job.Spec.BackoffLimit, 6)
	if limit == 0 {
		return result > 0
	}
	return result >= limit
}

func pastDeadline(job *batch.Job, now time.Time) bool {
	if job.Spec.ActiveDeadlineSeconds == nil || job.Status.StartTime == nil || suspended(job) {
		return false
	}
	return now.Sub(job.Status.StartTime.Time) >= time.Duration(*job.Spec.ActiveDeadlineSeconds)*time.Second
}

// stored reads p fresh: the pod as stored, or nil when it is gone or
// another pod of the name.
func (c *Controller) stored(ctx context.Context, p *corev1.Pod) (*corev1.Pod, error) {
	md := p.GetMetadata()
	f, err := objects.Get[*corev1.Pod](ctx, c.env.Store, md.GetNamespace(), md.GetName())
	if errors.Is(err, raftstore.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if f.GetMetadata().GetUid() != md.GetUid() {
		return nil, nil
	}
	return f, nil
}

// stillTracked reads p fresh: it is still there and holds the finalizer.
func (c *Controller) stillTracked(ctx context.Context, p *corev1.Pod) (bool, error) {
	f, err := c.stored(ctx, p)
	return f != nil && hasFinalizer(f), err
}

// track counts finished pods exactly once (the package doc's three
// steps) and writes the Job's status: the uids of newly finished pods
// into uncountedTerminatedPods, the finalizers of the uncounted pods
// removed, then the uncounted uids whose pods let go into the counters.
// target is the end the Job reached (an interim condition), final
// whether it may now take its terminal condition.
func (c *Controller) track(ctx context.Context, key string, u *corev1.Unstructured, job *batch.Job, pods []*corev1.Pod, podRev int64,
	newSucc, newFail, ignored []*corev1.Pod, target *batch.JobCondition, final bool, now time.Time) error {
	unc := job.Status.UncountedTerminatedPods
	behind := podRev < objects.Revision(u)
	for _, p := range newSucc {
		unc.Succeeded = append(unc.Succeeded, types.UID(p.GetMetadata().GetUid()))
	}
	for _, p := range newFail {
		unc.Failed = append(unc.Failed, types.UID(p.GetMetadata().GetUid()))
	}
	if target != nil && findCondition(job, target.Type) == nil {
		job.Status.Conditions = append(job.Status.Conditions, *target)
	}
	// Step 1.
	var err error
	if u, err = c.writeStatus(ctx, u, job); err != nil {
		return err
	}
	// Step 2.
	byUID := make(map[types.UID]*corev1.Pod, len(pods))
	for _, p := range pods {
		byUID[types.UID(p.GetMetadata().GetUid())] = p
	}
	if behind {
		// An uncounted uid without a pod in the informer is a pod gone,
		// unless the informer has not yet shown its creation: every such
		// pod was created before the Job revision that lists it. Ask the
		// store then, or the pod would be counted now with its finalizer
		// and a second time once it shows up.
		if err := c.findAbsent(ctx, job.Namespace, slices.Concat(unc.Succeeded, unc.Failed), byUID); err != nil {
			return err
		}
	}
	released := map[types.UID]bool{}
	var rmErr error
	var mu sync.Mutex
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(c.cfg.MaxInFlight)
	for _, id := range slices.Concat(unc.Succeeded, unc.Failed) {
		p := byUID[id]
		if p == nil || !hasFinalizer(p) {
			mu.Lock()
			released[id] = true // gone, or let go already
			mu.Unlock()
			continue
		}
		g.Go(func() error {
			rev, err := removeFinalizer(gctx, c.env.Store, p)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				rmErr = errors.Join(rmErr, err)
				return nil
			}
			c.runner.Expect(key, rev)
			released[id] = true
			return nil
		})
	}
	for _, p := range ignored { // let go, never counted
		g.Go(func() error {
			rev, err := removeFinalizer(gctx, c.env.Store, p)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				rmErr = errors.Join(rmErr, err)
				return nil
			}
			c.runner.Expect(key, rev)
			return nil
		})
	}
	_ = g.Wait()
	// Step 3.
	keep := func(ids []types.UID) ([]types.UID, int32) {
		var out []types.UID
		n := int32(0)
		for _, id := range ids {
			if released[id] {
				n++
			} else {
				out = append(out, id)
			}
		}
		return out, n
	}
	var ns, nf int32
	unc.Succeeded, ns = keep(unc.Succeeded)
	unc.Failed, nf = keep(unc.Failed)
	if !isIndexed(job) {
		job.Status.Succeeded += ns
	} else {
		job.Status.Succeeded = int32(len(parseIndexes(job.Status.CompletedIndexes, int(*job.Spec.Completions))))
	}
	job.Status.Failed += nf
	if final && target != nil && len(unc.Succeeded) == 0 && len(unc.Failed) == 0 && rmErr == nil {
		switch target.Type {
		case batch.JobSuccessCriteriaMet:
			job.Status.Conditions = append(job.Status.Conditions, *newCondition(batch.JobComplete, target.Reason, target.Message, now))
			t := metav1.NewTime(now)
			job.Status.CompletionTime = &t
			c.events.Record(ctx, jobKind.APIVersion(), jobKind.Name, job.Namespace, job.Name, string(job.UID), "Normal", "Completed", "Job completed")
		case batch.JobFailureTarget:
			job.Status.Conditions = append(job.Status.Conditions, *newCondition(batch.JobFailed, target.Reason, target.Message, now))
			c.events.Record(ctx, jobKind.APIVersion(), jobKind.Name, job.Namespace, job.Name, string(job.UID), "Warning", target.Reason, target.Message)
		}
	}
	if _, err := c.writeStatus(ctx, u, job); err != nil {
		return err
	}
	return rmErr
}

// findAbsent adds to byUID the pods of ids it lacks, read from the store.
func (c *Controller) findAbsent(ctx context.Context, ns string, ids []types.UID, byUID map[types.UID]*corev1.Pod) error {
	if !slices.ContainsFunc(ids, func(id types.UID) bool { return byUID[id] == nil }) {
		return nil
	}
	pods, _, err := objects.List[*corev1.Pod](ctx, c.env.Store, ns)
	if err != nil {
		return err
	}
	want := uidSet(ids)
	for _, p := range pods {
		if id := types.UID(p.GetMetadata().GetUid()); want[id] && byUID[id] == nil {
			byUID[id] = p
		}
	}
	return nil
}

// removeFinalizer removes the tracking finalizer from p (the same pod,
// read fresh and compared on write) and returns the pod's revision after
// it (0 when it is gone).
func removeFinalizer(ctx context.Context, st *objects.Store, p *corev1.Pod) (int64, error) {
	md := p.GetMetadata()
	return stage.RemovePodFinalizer(ctx, st, md.GetNamespace(), md.GetName(), md.GetUid(), TrackingFinalizer)
}

// removeFinalizers lets every pod of a finished Job go.
func (c *Controller) removeFinalizers(ctx context.Context, key string, pods []*corev1.Pod) error {
	var errs error
	for _, p := range pods {
		if !hasFinalizer(p) {
			continue
		}
		rev, err := removeFinalizer(ctx, c.env.Store, p)
		if err != nil {
			errs = errors.Join(errs, err)
			continue
		}
		c.runner.Expect(key, rev)
	}
	return errs
}

// releaseGone removes the finalizer of the pods of a Job that is gone
// (their controller reference names it).
func (c *Controller) releaseGone(ctx context.Context, ns, name string) error {
	var errs error
	for _, p := range c.podInf.List(ns) {
		ref := controller.ControllerOf(p.GetMetadata())
		if ref == nil || ref.GetKind() != jobKind.Name || ref.GetName() != name || !hasFinalizer(p) {
			continue
		}
		if _, err := removeFinalizer(ctx, c.env.Store, p); err != nil {
			errs = errors.Join(errs, err)
		}
	}
	return errs
}

// release lets a pod that stopped matching go: its owner reference and
// the finalizer.
func (c *Controller) release(ctx context.Context, key, ns, name, uid string) error {
	p, err := objects.Mutate(ctx, c.env.Store, ns, name, func(p *corev1.Pod) error {
		md := p.GetMetadata()
		n, f := len(md.OwnerReferences), len(md.Finalizers)
		md.OwnerReferences = slices.DeleteFunc(md.OwnerReferences, func(r *corev1.OwnerReference) bool { return r.GetUid() == uid })
		md.Finalizers = slices.DeleteFunc(md.Finalizers, func(f string) bool { return f == TrackingFinalizer })
		if len(md.OwnerReferences) == n && len(md.Finalizers) == f {
			return objects.ErrNoChange
		}
		return nil
	})
	if errors.Is(err, raftstore.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	rev := objects.Revision(p)
	if md := p.GetMetadata(); len(md.GetFinalizers()) == 0 && md.DeletionTimestamp != nil && md.DeletionGracePeriodSeconds != nil && *md.DeletionGracePeriodSeconds == 0 {
		// Held for the finalizer it lost: gone now (stage.RemovePodFinalizer).
		if rev, err = c.env.Store.Delete(ctx, objects.Pods, ns, name, rev); err != nil && !errors.Is(err, raftstore.ErrNotFound) {
			return err
		}
	}
	c.runner.Expect(key, rev)
	return nil
}

func (c *Controller) adopt(ctx context.Context, key string, job *batch.Job, p *corev1.Pod, sel labels.Selector) error {
	fresh, err := c.env.Store.GetKind(ctx, jobKind, job.Namespace, job.Name)
	if err != nil {
		return err
	}
	if fresh.GetMetadata().GetUid() != string(job.UID) || fresh.GetMetadata().GetDeletionTimestamp() != nil {
		return fmt.Errorf("Job %s/%s is gone or being deleted: not adopting %s", job.Namespace, job.Name, p.GetMetadata().GetName())
	}
	rev, err := controller.AdoptPod(ctx, c.env.Store, job.Namespace, p.GetMetadata().GetName(), ref(job), sel)
	if err != nil {
		return err
	}
	c.runner.Expect(key, rev)
	return nil
}

func ref(job *batch.Job) *corev1.OwnerReference {
	return controller.ControllerRef(jobKind.APIVersion(), jobKind.Name, job.Name, string(job.UID))
}

// manage creates and deletes pods so that as many run as the Job wants
// (kube's manageJob) and returns how many are active.
func (c *Controller) manage(ctx context.Context, key string, u **corev1.Unstructured, job *batch.Job, pods, activePods []*corev1.Pod, podRev int64, succeeded int32,
	succeededIndexes indexSet, pi *perIndex, terminating int32, now time.Time, started time.Time) (int32, error) {
	nActive := int32(len(activePods))
	if suspended(job) {
		deleted, err := c.deletePods(ctx, key, u, job, activePods, podRev)
		return nActive - int32(deleted), err
	}
	pending := c.unobservedPending(key, job.Namespace)
	parallelism := ptrOr(job.Spec.Parallelism, 1)
	var want int32
	switch {
	case job.Spec.Completions == nil:
		want = parallelism
		if succeeded > 0 {
			want = 0
		}
	default:
		want = max(0, min(*job.Spec.Completions-succeeded, parallelism))
	}
	// Indexed: the active pods of an index already succeeded, or a second
	// active pod of one index, go first.
	var extra []*corev1.Pod
	if isIndexed(job) {
		seen := map[int]bool{}
		var keep []*corev1.Pod
		for _, p := range activePods {
			i, ok := podIndex(p, int(*job.Spec.Completions))
			if !ok || succeededIndexes[i] || seen[i] {
				extra = append(extra, p)
				continue
			}
			seen[i] = true
			keep = append(keep, p)
		}
		activePods = keep
	}
	if rm := int(nActive) + len(pending) - int(want); rm > 0 || len(extra) > 0 {
		victims := append(extra, rankForDeletion(activePods, max(0, rm-len(extra)))...)
		victims = victims[:min(len(victims), c.cfg.MaxPodsPerSync)]
		deleted, err := c.deletePods(ctx, key, u, job, victims, podRev)
		return nActive - int32(deleted), err
	}
	diff := int(want) - int(nActive) - len(pending)
	if onlyReplaceFailedPods(job) {
		diff -= int(terminating)
	}
	if diff <= 0 && len(pending) == 0 {
		return nActive, nil
	}
	if pi == nil { // with backoffLimitPerIndex each index waits on its own
		if wait := c.backoff(pods, now); wait > 0 && len(pending) == 0 {
			c.runner.AddAfter(key, wait)
			return nActive, nil
		}
	}
	diff = min(max(diff, 0), c.cfg.MaxPodsPerSync)
	names, wait := c.newNames(job, pods, activePods, pending, diff, succeededIndexes, pi, now)
	if wait > 0 {
		c.runner.AddAfter(key, wait)
	}
	if len(names) > 0 {
		// A creation is not undone by a failed status write: decide it on
		// the Job as stored. The Job informer can be behind the pod
		// informer (a pod already let go by a status this copy does not
		// show yet would look like a free slot).
		if cur, err := c.current(ctx, *u); err != nil || !cur {
			return nActive, err
		}
	}
	ok, err := controller.SlowStart(ctx, len(names), c.cfg.MaxInFlight, func() bool { return c.runner.Owns(key) }, func(ctx context.Context, i int) error {
		return c.createOne(ctx, key, job, names[i], started)
	})
	return nActive + int32(ok), err
}

// current reports whether u is the Job as stored now; if not, the
// informer's newer copy queues the key again (and so does this, should
// that event have come already).
func (c *Controller) current(ctx context.Context, u *corev1.Unstructured) (bool, error) {
	md := u.GetMetadata()
	kv, err := c.env.Store.KV().Get(ctx, jobKind.Key(md.GetNamespace(), md.GetName()))
	if errors.Is(err, raftstore.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if kv.ModRevision != objects.Revision(u) {
		c.runner.Add(keyOf(md))
		return false, nil
	}
	return true, nil
}

// podName is a pending creation: its name and, for an Indexed Job, index
// and (with backoffLimitPerIndex) the failure counts it carries.
type podName struct {
	name            string
	index           int
	failures        int32 // -1: no annotation
	ignoredFailures int32
}

// newNames are the pending names, then n new names in the lowest free
// slots (of the lowest indexes without a pod, for an Indexed Job).
// With backoffLimitPerIndex an index whose last pod failed waits its own
// backoff; the second result is the least wait of the indexes left out.
func (c *Controller) newNames(job *batch.Job, pods, activePods []*corev1.Pod, pending []string, n int, succeededIndexes indexSet,
	pi *perIndex, now time.Time) ([]podName, time.Duration) {
	taken := map[string]bool{}
	for _, p := range pods {
		taken[p.GetMetadata().GetName()] = true
	}
	isTaken := func(name string) bool {
		if taken[name] || c.nameUsed(job, name) {
			return true
		}
		_, ok := c.podInf.Get(job.Namespace, name) // another controller's pod
		return ok
	}
	var out []podName
	busy := map[int]bool{}
	for _, p := range activePods {
		if i, ok := podIndex(p, int(ptrOr(job.Spec.Completions, 0))); ok {
			busy[i] = true
		}
	}
	if onlyReplaceFailedPods(job) {
		for _, p := range pods {
			if i, ok := podIndex(p, int(ptrOr(job.Spec.Completions, 0))); ok && !active(p) && !terminal(p) {
				busy[i] = true
			}
		}
	}
	for _, name := range pending {
		taken[name] = true
		pn := podName{name: name, index: -1, failures: -1}
		if isIndexed(job) {
			i, ok := indexOfName(job.Name, name)
			if !ok {
				continue
			}
			pn.index = i
			busy[i] = true
			if pi != nil {
				pn.failures, pn.ignoredFailures = getNewIndexFailureCounts(job, pi.replacedOf(i))
			}
		}
		out = append(out, pn)
	}
	if !isIndexed(job) {
		for _, name := range controller.FreeNames(job.Name+"-", string(job.UID), n, isTaken) {
			out = append(out, podName{name: name, index: -1, failures: -1})
		}
		return out, 0
	}
	var wait time.Duration
	for i := 0; i < int(*job.Spec.Completions) && n > 0; i++ {
		if succeededIndexes[i] || busy[i] {
			continue
		}
		pn := podName{index: i, failures: -1}
		if pi != nil {
			if pi.failed.has(i) {
				continue
			}
			if w := pi.remaining(i, c.cfg.BackoffBase, c.cfg.BackoffMax, now); w > 0 {
				if wait == 0 || w < wait {
					wait = w
				}
				continue
			}
			pn.failures, pn.ignoredFailures = getNewIndexFailureCounts(job, pi.replacedOf(i))
		}
		pn.name = controller.FreeNames(fmt.Sprintf("%s-%d-", job.Name, i), string(job.UID), 1, isTaken)[0]
		out = append(out, pn)
		n--
	}
	return out, wait
}

// usedNames is the pod names seen or created for the Job of uid.
type usedNames struct {
	uid   string
	names map[string]bool
}

// useName records name as the name of a pod job owns (see
// Controller.used).
func (c *Controller) useName(job *batch.Job, name string) {
	key := job.Namespace + "/" + job.Name
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.used == nil {
		c.used = map[string]*usedNames{}
	}
	u := c.used[key]
	if u == nil || u.uid != string(job.UID) { // a new Job of the name
		u = &usedNames{uid: string(job.UID), names: map[string]bool{}}
		c.used[key] = u
	}
	u.names[name] = true
}

// nameUsed reports whether name was a pod name of job.
func (c *Controller) nameUsed(job *batch.Job, name string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	u := c.used[job.Namespace+"/"+job.Name]
	return u != nil && u.uid == string(job.UID) && u.names[name]
}

// forgetNames drops the names of Job ns/name, deleted.
func (c *Controller) forgetNames(ns, name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.used, ns+"/"+name)
}

// indexOfName parses the index of an Indexed Job's pod name
// ("<job>-<index>-<suffix>").
func indexOfName(job, name string) (int, bool) {
	rest, ok := strings.CutPrefix(name, job+"-")
	if !ok {
		return 0, false
	}
	s, _, ok := strings.Cut(rest, "-")
	if !ok {
		return 0, false
	}
	i, err := strconv.Atoi(s)
	return i, err == nil && i >= 0
}

func (c *Controller) unobservedPending(key, ns string) []string {
	var out []string
	for _, n := range c.runner.Pending(key) {
		if _, ok := c.podInf.Get(ns, n); ok {
			c.runner.SetPending(key, n, false)
			continue
		}
		out = append(out, n)
	}
	return out
}

func (c *Controller) createOne(ctx context.Context, key string, job *batch.Job, pn podName, started time.Time) error {
	pod, err := podFor(job, pn)
	if err != nil {
		c.events.Record(ctx, jobKind.APIVersion(), jobKind.Name, job.Namespace, job.Name, string(job.UID), "Warning", "FailedCreate", "Error creating: "+err.Error())
		return err
	}
	pod.Metadata.Name = pn.name
	created, err := c.pods.Create(ctx, pod, started)
	var se *controller.StatusError
	switch {
	case err == nil:
		// The pod existed: its name is used even if it is gone before this
		// replica's informer shows it.
		c.useName(job, pn.name)
		c.runner.SetPending(key, pn.name, false)
		c.runner.Expect(key, objects.Revision(created))
		c.events.Record(ctx, jobKind.APIVersion(), jobKind.Name, job.Namespace, job.Name, string(job.UID), "Normal", "SuccessfulCreate", "Created pod: "+pn.name)
		return nil
	case errors.Is(err, controller.ErrNameTaken):
		c.runner.SetPending(key, pn.name, false)
		kv, gerr := c.env.Store.KV().Get(ctx, objects.Pods.Key(job.Namespace, pn.name))
		if gerr == nil {
			c.useName(job, pn.name)
			c.runner.Expect(key, kv.ModRevision)
		} else if !errors.Is(gerr, raftstore.ErrNotFound) {
			return gerr
		}
		return nil
	case errors.Is(err, controller.ErrUncertain):
		c.runner.SetPending(key, pn.name, true)
		return err
	case errors.As(err, &se):
		c.runner.SetPending(key, pn.name, false)
		c.events.Record(ctx, jobKind.APIVersion(), jobKind.Name, job.Namespace, job.Name, string(job.UID), "Warning", "FailedCreate", "Error creating: "+se.Status.GetMessage())
		return err
	}
	return err
}

// podFor is the pod of job's template (index -1 for a NonIndexed Job):
// the tracking finalizer, and for an index its annotation, label,
// JOB_COMPLETION_INDEX and hostname, as kube's job controller makes it.
func podFor(job *batch.Job, pn podName) (*corev1.Pod, error) {
	index := pn.index
	tmpl := job.Spec.Template.DeepCopy()
	tmpl.Finalizers = append(tmpl.Finalizers, TrackingFinalizer)
	if index >= 0 {
		idx := strconv.Itoa(index)
		if tmpl.Annotations == nil {
			tmpl.Annotations = map[string]string{}
		}
		tmpl.Annotations[batch.JobCompletionIndexAnnotation] = idx
		if pn.failures >= 0 { // kube's addIndexFailureCountAnnotation
			tmpl.Annotations[batch.JobIndexFailureCountAnnotation] = strconv.Itoa(int(pn.failures))
			if pn.ignoredFailures > 0 {
				tmpl.Annotations[batch.JobIndexIgnoredFailureCountAnnotation] = strconv.Itoa(int(pn.ignoredFailures))
			}
		}
		if tmpl.Labels == nil {
			tmpl.Labels = map[string]string{}
		}
		tmpl.Labels[batch.JobCompletionIndexAnnotation] = idx
		if tmpl.Spec.Hostname == "" {
			tmpl.Spec.Hostname = fmt.Sprintf("%s-%d", job.Name, index)
		}
		env := v1.EnvVar{Name: "JOB_COMPLETION_INDEX", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{
			FieldPath: fmt.Sprintf("metadata.annotations['%s']", batch.JobCompletionIndexAnnotation)}}}
		for _, cs := range [][]v1.Container{tmpl.Spec.InitContainers, tmpl.Spec.Containers} {
			for i := range cs {
				if !slices.ContainsFunc(cs[i].Env, func(e v1.EnvVar) bool { return e.Name == env.Name }) {
					cs[i].Env = append(cs[i].Env, env)
				}
			}
		}
	}
	return controller.PodFromTemplate(job.Namespace, tmpl, nil)
}

// deletePods deletes active pods (gracefully) and returns how many it
// deleted. A deleted pod counts as failed, as kube counts a pod deleted
// before it succeeded; the store does not hold a pod back for its
// finalizer yet, so its uid goes into uncountedTerminatedPods.failed
// first (a write of the Job, *u after it), and it is counted once gone.
func (c *Controller) deletePods(ctx context.Context, key string, u **corev1.Unstructured, job *batch.Job, pods []*corev1.Pod, podRev int64) (int, error) {
	if len(pods) == 0 {
		return 0, nil
	}
	unc := job.Status.UncountedTerminatedPods
	known := uidSet(slices.Concat(unc.Succeeded, unc.Failed))
	handled := 0
	if podRev < objects.Revision(*u) {
		// The informer may show as running a pod that finished, and was
		// even counted, by the Job revision read: decide on the pods as
		// stored.
		var err error
		var running []*corev1.Pod
		if running, err = c.stillRunning(ctx, pods); err != nil {
			return 0, err
		}
		handled, pods = len(pods)-len(running), running
	}
	for _, p := range pods {
		if id := types.UID(p.GetMetadata().GetUid()); !known[id] && hasFinalizer(p) {
			unc.Failed = append(unc.Failed, id)
		}
	}
	out, err := c.writeStatus(ctx, *u, job)
	if err != nil {
		return 0, err
	}
	*u = out
	var mu sync.Mutex
	n := 0
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(c.cfg.MaxInFlight)
	for _, p := range pods {
		g.Go(func() error {
			md := p.GetMetadata()
			d, err := c.pods.Delete(gctx, md.GetNamespace(), md.GetName())
			if err != nil && !errors.Is(err, raftstore.ErrNotFound) {
				c.events.Record(ctx, jobKind.APIVersion(), jobKind.Name, job.Namespace, job.Name, string(job.UID), "Warning", "FailedDelete", "Error deleting: "+err.Error())
				return err
			}
			mu.Lock()
			defer mu.Unlock()
			n++
			if d != nil {
				c.runner.Expect(key, objects.Revision(d))
			}
			return nil
		})
	}
	err = g.Wait()
	return n + handled, err
}

// stillRunning reads pods fresh and returns those still active and held
// by the tracking finalizer, as stored.
func (c *Controller) stillRunning(ctx context.Context, pods []*corev1.Pod) ([]*corev1.Pod, error) {
	var out []*corev1.Pod
	for _, p := range pods {
		f, err := c.stored(ctx, p)
		if err != nil {
			return nil, err
		}
		if f != nil && active(f) && hasFinalizer(f) {
			out = append(out, f)
		}
	}
	return out, nil
}

// rankForDeletion returns the n active pods kube deletes first
// (controller.ActivePods: unscheduled, pending, not ready, ... first).
func rankForDeletion(pods []*corev1.Pod, n int) []*corev1.Pod {
	if n <= 0 {
		return nil
	}
	kp := make([]*v1.Pod, len(pods))
	byName := make(map[string]*corev1.Pod, len(pods))
	for i, p := range pods {
		kp[i] = controller.KubePod(p)
		byName[p.GetMetadata().GetName()] = p
	}
	sort.Sort(kubecontroller.ActivePods(kp))
	out := make([]*corev1.Pod, 0, n)
	for _, p := range kp[:min(n, len(kp))] {
		out = append(out, byName[p.Name])
	}
	return out
}

// backoff is how long the next pod waits after failures: BackoffBase
// doubled per failure since the last success, at most BackoffMax, from
// the last failure (kube's backoffRecord, derived from the pods).
func (c *Controller) backoff(pods []*corev1.Pod, now time.Time) time.Duration {
	var lastSucc, lastFail time.Time
	for _, p := range pods {
		if p.GetStatus().GetPhase() == string(v1.PodSucceeded) {
			if t := finishTime(p); t.After(lastSucc) {
				lastSucc = t
			}
		}
	}
	failures := 0
	for _, p := range pods {
		if p.GetStatus().GetPhase() != string(v1.PodFailed) {
			continue
		}
		if t := finishTime(p); t.After(lastSucc) {
			failures++
			if t.After(lastFail) {
				lastFail = t
			}
		}
	}
	if failures == 0 {
		return 0
	}
	d := c.cfg.BackoffBase
	for i := 1; i < failures && d < c.cfg.BackoffMax; i++ {
		d *= 2
	}
	d = min(d, c.cfg.BackoffMax)
	return lastFail.Add(d).Sub(now)
}

// finishTime is when a pod finished: the last transition of its
// conditions (Ready turns False as it ends), else its creation.
func finishTime(p *corev1.Pod) time.Time {
	t := p.GetMetadata().GetCreationTimestamp().AsTime()
	for _, cond := range p.GetStatus().GetConditions() {
		if lt := cond.GetLastTransitionTime(); lt != nil && lt.AsTime().After(t) {
			t = lt.AsTime()
		}
	}
	return t
}

func isReady(p *corev1.Pod) bool {
	for _, cond := range p.GetStatus().GetConditions() {
		if cond.GetType() == string(v1.PodReady) {
			return cond.GetStatus() == string(v1.ConditionTrue)
		}
	}
	return false
}

// writeStatus stores job's status in u when it changed, comparing u's
// revision; it returns the stored object.
func (c *Controller) writeStatus(ctx context.Context, u *corev1.Unstructured, job *batch.Job) (*corev1.Unstructured, error) {
	d := c.decode(u)
	if d != nil && statusEqual(d.job.Status, job.Status) {
		return u, nil
	}
	k, err := manifest.ToKube(u)
	if err != nil {
		return nil, err
	}
	stored, ok := k.(*batch.Job)
	if !ok {
		return nil, fmt.Errorf("job: a stored Job is a %T", k)
	}
	if statusEqual(stored.Status, job.Status) {
		return u, nil
	}
	stored.Status = job.Status
	m, err := manifest.FromKube(stored)
	if err != nil {
		return nil, err
	}
	out := m.(*corev1.Unstructured)
	out.Metadata = vt.Clone(u.GetMetadata()) // the informer's copy is shared
	if _, err := c.env.Store.Update(ctx, out); err != nil {
		return nil, fmt.Errorf("update status of Job %s/%s: %w", job.Namespace, job.Name, err) // retried from the informer's newer copy
	}
	return out, nil
}

func statusEqual(a, b batch.JobStatus) bool { return apiequality.Semantic.DeepEqual(a, b) }

func uidSet(ids []types.UID) map[types.UID]bool {
	out := make(map[types.UID]bool, len(ids))
	for _, id := range ids {
		out[id] = true
	}
	return out
}

func ptrOr(p *int32, def int32) int32 {
	if p == nil {
		return def
	}
	return *p
}
