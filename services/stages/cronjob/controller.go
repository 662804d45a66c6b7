// Package cronjob is the CronJob controller stage (batch/v1 CronJob),
// kube's pkg/controller/cronjob (controller v2) built on
// services/controller: it creates a CronJob's Jobs on schedule and keeps
// its status.
//
// What it does, as kube-controller-manager does: schedules parsed by
// github.com/robfig/cron/v3 (kube's parser), timeZone from Go's time zone
// database; concurrencyPolicy Allow, Forbid (JobAlreadyActive) and
// Replace (the running Jobs deleted, with their pods);
// startingDeadlineSeconds (MissSchedule); missed runs after the
// controller was down: the most recent missed time is started, and more
// than 100 missed times are reported (TooManyMissedTimes); suspend;
// successfulJobsHistoryLimit and failedJobsHistoryLimit; status.active,
// lastScheduleTime, lastSuccessfulTime.
//
// A Job's name is the CronJob's and its scheduled minute
// ("<cronjob>-<unix minutes>"), so two replicas, or one restarted, create
// one Job per scheduled time: the second creation finds the name taken.
//
// Jobs are created with kube-apiserver's Job strategy (registry: defaults,
// selector, validation) and written to the store directly: they do not
// pass admission (quota, webhooks) as kube's do.
package cronjob

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"

	"time"

	"github.com/robfig/cron/v3"
	"golang.org/x/sync/errgroup"
	batch "k8s.io/api/batch/v1"
	v1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/kubernetes/pkg/util/parsers"
	"k8s.io/utils/ptr"

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
	"github.com/podflow/podflow/services/registry"
	"github.com/podflow/podflow/services/stage"
)

// Config configures the controller.
type Config struct {
	// Controller configures the replica's Runner (work queue, Leases).
	Controller controller.Config
	// Now is the clock schedules are read against (nil: time.Now); tests
	// move it. The Runner's Leases keep their own clock.
	Now func() time.Time
}

// DefaultConfig returns the defaults for a replica of the stage.
func DefaultConfig(replica string) Config {
	return Config{Controller: controller.DefaultConfig(pipeline.CronJob, replica)}
}

// Validate checks the Config.
func (c Config) Validate() error { return c.Controller.Validate() }

// nextScheduleDelta pads a requeue for the next scheduled time (kube's).
const nextScheduleDelta = 100 * time.Millisecond

// Controller is one replica of the CronJob controller stage.
type Controller struct {
	env    stage.Env
	cfg    Config
	runner *controller.Runner
	cjs    *informer.Informer[*corev1.Unstructured]
	jobs   *informer.Informer[*corev1.Unstructured]
	events *controller.Events
	log    *slog.Logger
}

var (
	_ stage.Handler    = (*Controller)(nil)
	_ stage.Starter    = (*Controller)(nil)
	_ stage.Reconciler = (*Controller)(nil)
)

// New returns a replica of the controller acting with env's identity.
func New(env stage.Env, cfg Config) (*Controller, error) {
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
	c := &Controller{env: env, cfg: cfg, log: log}
	c.events = &controller.Events{Recorder: &events.Recorder{Store: env.Store, Component: "cronjob-controller", Instance: env.Replica}}
	var err error
	if c.runner, err = controller.New(env.Store, cfg.Controller, c.sync, c.keys); err != nil {
		return nil, err
	}
	queue := func(u *corev1.Unstructured) { c.runner.Add(keyOf(u.GetMetadata())) }
	if c.cjs, err = informer.NewKind(env.Store, objects.CronJobs, "", informer.Handlers[*corev1.Unstructured]{
		OnAdd: queue, OnUpdate: func(_, u *corev1.Unstructured) { queue(u) },
		OnDelete: func(u *corev1.Unstructured) {
			c.runner.Forget(keyOf(u.GetMetadata()))
			c.runner.Forget(statusKey(keyOf(u.GetMetadata())))
		},
	}); err != nil {
		return nil, err
	}
	owner := func(u *corev1.Unstructured) {
		md := u.GetMetadata()
		if ref := controller.ControllerOf(md); ref != nil && ref.GetKind() == objects.CronJobs.Name {
			c.runner.Add(controller.Key(md.GetNamespace(), ref.GetName()))
		}
	}
	if c.jobs, err = informer.NewKind(env.Store, objects.Jobs, "", informer.Handlers[*corev1.Unstructured]{
		OnAdd: owner, OnUpdate: func(_, u *corev1.Unstructured) { owner(u) }, OnDelete: owner,
	}); err != nil {
		return nil, err
	}
	return c, nil
}

func keyOf(md *corev1.ObjectMeta) string { return controller.Key(md.GetNamespace(), md.GetName()) }

// statusKey names the expectation of a CronJob's own status write.
func statusKey(key string) string { return key + "#status" }

// Handle is never called: the stage consumes no events.
func (c *Controller) Handle(context.Context, *bus.Delivery) error {
	return bus.Permanent(errors.New("cronjob: the controller consumes no events"))
}

// Start runs the informers, the Lease and the workers on g.
func (c *Controller) Start(ctx context.Context, g *errgroup.Group) error {
	var infs informer.Group
	infs.Add(c.cjs, c.jobs)
	return c.runner.Start(ctx, g, &infs)
}

// Reconcile queues every CronJob.
func (c *Controller) Reconcile(ctx context.Context) error { return c.runner.Reconcile(ctx) }

func (c *Controller) keys() []string {
	var out []string
	for _, u := range c.cjs.List("") {
		out = append(out, keyOf(u.GetMetadata()))
	}
	return out
}

func (c *Controller) now() time.Time {
	if c.cfg.Now != nil {
		return c.cfg.Now()
	}
	return time.Now()
}

func (c *Controller) event(ctx context.Context, cj *batch.CronJob, typ, reason, format string, args ...any) {
	c.events.Record(ctx, objects.CronJobs.APIVersion(), objects.CronJobs.Name, cj.Namespace, cj.Name, string(cj.UID), typ, reason, fmt.Sprintf(format, args...))
}

func toKube[T any](u *corev1.Unstructured) (T, error) {
	var zero T
	k, err := manifest.ToKube(u)
	if err != nil {
		return zero, err
	}
	o, ok := k.(T)
	if !ok {
		return zero, fmt.Errorf("cronjob: a stored %s is a %T", u.GetKind(), k)
	}
	return o, nil
}

// sync is kube's syncCronJob for one key, then the history cleanup.
func (c *Controller) sync(ctx context.Context, key string) error {
	ns, name, err := controller.SplitKey(key)
	if err != nil {
		return nil
	}
	// The informers' revisions are read before the objects: a CronJob read
	// first could be older than a revision read after it, and satisfy an
	// expectation it does not show.
	jobsRev, cjsRev := c.jobs.Revision(), c.cjs.Revision()
	u, ok := c.cjs.Get(ns, name)
	if !ok {
		return nil
	}
	orig, err := toKube[*batch.CronJob](u)
	if err != nil {
		c.log.Warn("undecodable CronJob", "key", key, "err", err)
		return nil
	}
	// The Jobs informer must show the Jobs a sync made or deleted, the
	// CronJobs informer the status it wrote (each informer's revision
	// moves only with its own kind's changes: two expectations).
	if jobsSeen, statusSeen := c.runner.Satisfied(key, jobsRev), c.runner.Satisfied(statusKey(key), cjsRev); !jobsSeen || !statusSeen {
		c.runner.AddAfter(key, time.Second)
		return nil
	}
	cj := orig.DeepCopy()
	var jobs []*batch.Job
	for _, ju := range c.jobs.List(ns) {
		if ref := controller.ControllerOf(ju.GetMetadata()); ref == nil || ref.GetUid() != string(cj.UID) {
			continue
		}
		j, err := toKube[*batch.Job](ju)
		if err != nil {
			continue
		}
		jobs = append(jobs, j)
	}
	requeue, err := c.syncCronJob(ctx, key, cj, jobs)
	if err != nil {
		return err
	}
	if !apiequality.Semantic.DeepEqual(orig.Status, cj.Status) {
		rev, err := c.writeStatus(ctx, u, cj)
		if err != nil {
			return err
		}
		c.runner.Expect(statusKey(key), rev)
	}
	if err := c.cleanupFinished(ctx, key, cj, jobs); err != nil {
		return err
	}
	if requeue != nil {
		c.runner.AddAfter(key, *requeue)
	}
	return nil
}

func finished(j *batch.Job) (bool, batch.JobConditionType) {
	for _, cond := range j.Status.Conditions {
		if (cond.Type == batch.JobComplete || cond.Type == batch.JobFailed) && cond.Status == v1.ConditionTrue {
			return true, cond.Type
		}
	}
	return false, ""
}

func inActive(cj *batch.CronJob, uid types.UID) bool {
	for _, r := range cj.Status.Active {
		if r.UID == uid {
			return true
		}
	}
	return false
}

func deleteFromActive(cj *batch.CronJob, uid types.UID) {
	var out []v1.ObjectReference
	for _, r := range cj.Status.Active {
		if r.UID != uid {
			out = append(out, r)
		}
	}
	cj.Status.Active = out
}

func (c *Controller) syncCronJob(ctx context.Context, key string, cj *batch.CronJob, jobs []*batch.Job) (*time.Duration, error) {
	now := c.now()
	children := map[types.UID]bool{}
	for _, j := range jobs {
		children[j.UID] = true
		done, cond := finished(j)
		switch {
		case !done && !inActive(cj, j.UID):
			c.event(ctx, cj, "Warning", "UnexpectedJob", "Saw a job that the controller did not create or forgot: %s", j.Name)
		case done:
			if inActive(cj, j.UID) {
				deleteFromActive(cj, j.UID)
				c.event(ctx, cj, "Normal", "SawCompletedJob", "Saw completed job: %s, condition: %v", j.Name, cond)
			}
			if cond == batch.JobComplete && j.Status.CompletionTime != nil &&
				(cj.Status.LastSuccessfulTime == nil || j.Status.CompletionTime.After(cj.Status.LastSuccessfulTime.Time)) {
				cj.Status.LastSuccessfulTime = j.Status.CompletionTime
			}
		}
	}
	for _, r := range cj.Status.Active {
		if children[r.UID] {
			continue
		}
		if _, err := c.env.Store.GetKind(ctx, objects.Jobs, r.Namespace, r.Name); errors.Is(err, raftstore.ErrNotFound) {
			c.event(ctx, cj, "Normal", "MissingJob", "Active job went missing: %v", r.Name)
			deleteFromActive(cj, r.UID)
		} else if err != nil {
			return nil, err
		}
	}
	if cj.DeletionTimestamp != nil {
		return nil, nil
	}
	if tz := cj.Spec.TimeZone; tz != nil {
		if _, err := time.LoadLocation(*tz); err != nil {
			c.event(ctx, cj, "Warning", "UnknownTimeZone", "invalid timeZone: %q: %s", *tz, err)
			return nil, nil
		}
	}
	if cj.Spec.Suspend != nil && *cj.Spec.Suspend {
		return nil, nil
	}
	sched, err := parsers.ParseCronScheduleWithPanicRecovery(c.formatSchedule(ctx, cj))
	if err != nil {
		c.event(ctx, cj, "Warning", "UnparseableSchedule", "unparseable schedule: %q : %s", cj.Spec.Schedule, err)
		return nil, nil
	}
	scheduled, missed, err := mostRecentScheduleTime(cj, now, sched, true)
	if err != nil {
		c.event(ctx, cj, "Warning", "InvalidSchedule", "invalid schedule: %s : %s", cj.Spec.Schedule, err)
		return nil, nil
	}
	if scheduled != nil && missed == manyMissed {
		c.event(ctx, cj, "Warning", "TooManyMissedTimes", "too many missed start times. Set or decrease .spec.startingDeadlineSeconds or check clock skew")
	}
	if scheduled == nil {
		return nextScheduleTimeDuration(cj, now, sched), nil
	}
	if sds := cj.Spec.StartingDeadlineSeconds; sds != nil && scheduled.Add(time.Duration(*sds)*time.Second).Before(now) {
		c.event(ctx, cj, "Warning", "MissSchedule", "Missed scheduled time to start a job: %s", scheduled.UTC().Format(time.RFC1123Z))
		return nextScheduleTimeDuration(cj, now, sched), nil
	}
	jobName := getJobName(cj, *scheduled)
	for _, r := range cj.Status.Active {
		if r.Name == jobName {
			return nextScheduleTimeDuration(cj, now, sched), nil
		}
	}
	if cj.Status.LastScheduleTime != nil && cj.Status.LastScheduleTime.Time.Equal(*scheduled) {
		return nextScheduleTimeDuration(cj, now, sched), nil
	}
	if cj.Spec.ConcurrencyPolicy == batch.ForbidConcurrent && len(cj.Status.Active) > 0 {
		c.event(ctx, cj, "Normal", "JobAlreadyActive", "Not starting job because prior execution is running and concurrency policy is Forbid")
		return nextScheduleTimeDuration(cj, now, sched), nil
	}
	if cj.Spec.ConcurrencyPolicy == batch.ReplaceConcurrent {
		for _, r := range cj.Status.Active {
			if err := c.deleteJob(ctx, key, cj, r.Namespace, r.Name, r.UID); err != nil {
				return nil, fmt.Errorf("could not replace job %s/%s: %w", r.Namespace, r.Name, err)
			}
			deleteFromActive(cj, r.UID)
		}
	}
	created, err := c.createJob(ctx, key, cj, *scheduled)
	if err != nil {
		return nil, err
	}
	if created == nil {
		return nil, nil // the name is another's
	}
	if !inActive(cj, created.UID) {
		cj.Status.Active = append(cj.Status.Active, v1.ObjectReference{APIVersion: "batch/v1", Kind: "Job", Namespace: created.Namespace,
			Name: created.Name, UID: created.UID, ResourceVersion: created.ResourceVersion})
	}
	cj.Status.LastScheduleTime = &metav1.Time{Time: *scheduled}
	return nextScheduleTimeDuration(cj, now, sched), nil
}

// formatSchedule is kube's: a timeZone becomes the schedule's TZ= prefix;
// a schedule naming a zone itself is run, with a warning (the api refuses
// new ones).
func (c *Controller) formatSchedule(ctx context.Context, cj *batch.CronJob) string {
	if strings.Contains(cj.Spec.Schedule, "TZ") {
		c.event(ctx, cj, "Warning", "UnsupportedSchedule", "CRON_TZ or TZ used in schedule %q is not officially supported, see https://kubernetes.io/docs/concepts/workloads/controllers/cron-jobs/ for more details", cj.Spec.Schedule)
		return cj.Spec.Schedule
	}
	if tz := cj.Spec.TimeZone; tz != nil {
		return fmt.Sprintf("TZ=%s %s", *tz, cj.Spec.Schedule)
	}
	return cj.Spec.Schedule
}

// getJobName is kube's: the scheduled time in minutes since the epoch.
func getJobName(cj *batch.CronJob, scheduled time.Time) string {
	return fmt.Sprintf("%s-%d", cj.Name, scheduled.Unix()/60)
}

// createJob creates the Job of scheduled time (kube's getJobFromTemplate2)
// with the Job strategy of kube-apiserver; a Job of that name already
// there is returned if it is this CronJob's (nil otherwise).
func (c *Controller) createJob(ctx context.Context, key string, cj *batch.CronJob, scheduled time.Time) (*batch.Job, error) {
	loc, err := time.LoadLocation(ptr.Deref(cj.Spec.TimeZone, ""))
	if err != nil {
		return nil, err
	}
	j := &batch.Job{
		TypeMeta: metav1.TypeMeta{APIVersion: "batch/v1", Kind: "Job"},
		ObjectMeta: metav1.ObjectMeta{
			Namespace: cj.Namespace, Name: getJobName(cj, scheduled),
			Labels: map[string]string{}, Annotations: map[string]string{},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(cj, batch.SchemeGroupVersion.WithKind("CronJob"))},
		},
	}
	for k, v := range cj.Spec.JobTemplate.Labels {
		j.Labels[k] = v
	}
	for k, v := range cj.Spec.JobTemplate.Annotations {
		j.Annotations[k] = v
	}
	j.Annotations[batch.CronJobScheduledTimestampAnnotation] = scheduled.In(loc).Format(time.RFC3339)
	cj.Spec.JobTemplate.Spec.DeepCopyInto(&j.Spec)
	m, err := manifest.FromKube(j)
	if err != nil {
		return nil, err
	}
	u := m.(*corev1.Unstructured)
	if _, st := registry.Default().PrepareCreate(ctx, pipeline.ControllerUser(pipeline.CronJob), "", u); st != nil {
		c.event(ctx, cj, "Warning", "FailedCreate", "Error creating job: %s", st.GetMessage())
		return nil, fmt.Errorf("create Job %s/%s: %d %s: %s", j.Namespace, j.Name, st.GetCode(), st.GetReason(), st.GetMessage())
	}
	rev, err := c.env.Store.Create(ctx, u)
	if errors.Is(err, raftstore.ErrAlreadyExists) {
		o, gerr := c.env.Store.GetKind(ctx, objects.Jobs, j.Namespace, j.Name)
		if gerr != nil {
			return nil, gerr
		}
		ex, gerr := toKube[*batch.Job](o.(*corev1.Unstructured))
		if gerr != nil {
			return nil, gerr
		}
		if !metav1.IsControlledBy(ex, cj) {
			return nil, nil
		}
		c.runner.Expect(key, objects.Revision(o))
		return ex, nil
	}
	if err != nil {
		c.event(ctx, cj, "Warning", "FailedCreate", "Error creating job: %v", err)
		return nil, err
	}
	c.runner.Expect(key, rev)
	c.event(ctx, cj, "Normal", "SuccessfulCreate", "Created job %v", j.Name)
	return toKube[*batch.Job](u)
}

// deleteJob deletes a Job and its pods (there is no garbage collector to
// cascade yet): kube's deleteJob with background propagation.
func (c *Controller) deleteJob(ctx context.Context, key string, cj *batch.CronJob, ns, name string, uid types.UID) error {
	rev, err := c.env.Store.Delete(ctx, objects.Jobs, ns, name, 0)
	if err != nil && !errors.Is(err, raftstore.ErrNotFound) {
		c.event(ctx, cj, "Warning", "FailedDelete", "Deleted job: %v", err)
		return err
	}
	if err == nil {
		c.runner.Expect(key, rev)
	}
	pods, _, err := objects.List[*corev1.Pod](ctx, c.env.Store, ns)
	if err != nil {
		return err
	}
	for _, p := range pods {
		if ref := controller.ControllerOf(p.GetMetadata()); ref == nil || ref.GetUid() != string(uid) {
			continue
		}
		if _, err := stage.DeletePod(ctx, c.env, ns, p.GetMetadata().GetName(), nil); err != nil && !errors.Is(err, raftstore.ErrNotFound) {
			return err
		}
	}
	c.event(ctx, cj, "Normal", "SuccessfulDelete", "Deleted job %v", name)
	return nil
}

// cleanupFinished deletes the oldest finished Jobs beyond the history
// limits (kube's cleanupFinishedJobs).
func (c *Controller) cleanupFinished(ctx context.Context, key string, cj *batch.CronJob, jobs []*batch.Job) error {
	if cj.Spec.FailedJobsHistoryLimit == nil && cj.Spec.SuccessfulJobsHistoryLimit == nil {
		return nil
	}
	var ok, failed []*batch.Job
	for _, j := range jobs {
		switch _, cond := finished(j); cond {
		case batch.JobComplete:
			ok = append(ok, j)
		case batch.JobFailed:
			failed = append(failed, j)
		}
	}
	var errs error
	for _, set := range []struct {
		jobs  []*batch.Job
		limit *int32
	}{{ok, cj.Spec.SuccessfulJobsHistoryLimit}, {failed, cj.Spec.FailedJobsHistoryLimit}} {
		if set.limit == nil || len(set.jobs) <= int(*set.limit) {
			continue
		}
		sort.Slice(set.jobs, func(a, b int) bool { return jobStartedBefore(set.jobs[a], set.jobs[b]) })
		for _, j := range set.jobs[:len(set.jobs)-int(*set.limit)] {
			errs = errors.Join(errs, c.deleteJob(ctx, key, cj, j.Namespace, j.Name, j.UID))
		}
	}
	return errs
}

// jobStartedBefore is kube's byJobStartTime: by startTime (none last),
// then name.
func jobStartedBefore(a, b *batch.Job) bool {
	if a.Status.StartTime == nil && b.Status.StartTime != nil {
		return false
	}
	if a.Status.StartTime != nil && b.Status.StartTime == nil {
		return true
	}
	if a.Status.StartTime != nil && !a.Status.StartTime.Equal(b.Status.StartTime) {
		return a.Status.StartTime.Before(b.Status.StartTime)
	}
	return a.Name < b.Name
}

// writeStatus stores cj's status in u, comparing u's revision, and
// returns the new revision.
func (c *Controller) writeStatus(ctx context.Context, u *corev1.Unstructured, cj *batch.CronJob) (int64, error) {
	stored, err := toKube[*batch.CronJob](u)
	if err != nil {
		return 0, err
	}
	stored.Status = cj.Status
	m, err := manifest.FromKube(stored)
	if err != nil {
		return 0, err
	}
	out := m.(*corev1.Unstructured)
	out.Metadata = vt.Clone(u.GetMetadata())
	rev, err := c.env.Store.Update(ctx, out)
	if err != nil {
		return 0, fmt.Errorf("update status of CronJob %s/%s: %w", cj.Namespace, cj.Name, err)
	}
	return rev, nil
}

type missedSchedules int

const (
	noneMissed missedSchedules = iota
	fewMissed
	manyMissed
)

// mostRecentScheduleTime is kube's (pkg/controller/cronjob utils.go): the
// most recent scheduled time not after now since the last one (or the
// CronJob's creation, or now minus startingDeadlineSeconds when
// includeDeadline), nil for none, and whether more than 100 were missed.
func mostRecentScheduleTime(cj *batch.CronJob, now time.Time, schedule cron.Schedule, includeDeadline bool) (*time.Time, missedSchedules, error) {
	earliest := earliestTime(cj, now, includeDeadline)
	t1 := schedule.Next(earliest)
	t2 := schedule.Next(t1)
	if now.Before(t1) {
		return nil, noneMissed, nil
	}
	if now.Before(t2) {
		return &t1, noneMissed, nil
	}
	between := int64(t2.Sub(t1).Round(time.Second).Seconds())
	if between < 1 {
		return nil, noneMissed, fmt.Errorf("time difference between two schedules is less than 1 second")
	}
	n := int64(now.Sub(t1).Seconds())/between + 1
	var recent time.Time
	potential := t1.Add(time.Duration((n-1-1)*between) * time.Second)
	for t := schedule.Next(potential); !t.After(now); t = schedule.Next(t) {
		recent = t
	}
	missed := fewMissed
	if n > 100 {
		missed = manyMissed
	}
	if recent.IsZero() {
		return nil, missed, nil
	}
	return &recent, missed, nil
}

func earliestTime(cj *batch.CronJob, now time.Time, includeDeadline bool) time.Time {
	earliest := cj.CreationTimestamp.Time
	if cj.Status.LastScheduleTime != nil {
		earliest = cj.Status.LastScheduleTime.Time
	}
	if includeDeadline && cj.Spec.StartingDeadlineSeconds != nil {
		if d := now.Add(-time.Duration(*cj.Spec.StartingDeadlineSeconds) * time.Second); d.After(earliest) {
			earliest = d
		}
	}
	return earliest
}

// nextScheduleTimeDuration is kube's: how long until the next scheduled
// time, padded by nextScheduleDelta.
func nextScheduleTimeDuration(cj *batch.CronJob, now time.Time, schedule cron.Schedule) *time.Duration {
	recent, missed, err := mostRecentScheduleTime(cj, now, schedule, false)
	var from time.Time
	switch {
	case err != nil:
		from = now
	case recent != nil:
		from = *recent
	case missed == noneMissed:
		from = earliestTime(cj, now, false)
	default:
		from = now
	}
	d := schedule.Next(from).Add(nextScheduleDelta).Sub(now)
	return &d
}
