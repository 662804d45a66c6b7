package cronjob_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"
	batch "k8s.io/api/batch/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/raftstore/raftstoretest"
	"github.com/podflow/podflow/services/controller"
	"github.com/podflow/podflow/services/manifest"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/pipeline"
	"github.com/podflow/podflow/services/registry"
	"github.com/podflow/podflow/services/stage"
	"github.com/podflow/podflow/services/stage/stagetest"
	"github.com/podflow/podflow/services/stages/cronjob"
)

// clock is the controller's fake clock.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) set(t time.Time) {
	c.mu.Lock()
	c.now = t
	c.mu.Unlock()
}

type harness struct {
	t     *testing.T
	st    *objects.Store
	clock *clock
	c     *cronjob.Controller
}

func at(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

func newHarness(t *testing.T, start time.Time) *harness {
	cl := raftstoretest.MakeCluster(t, 1)
	st := objects.New(cl.Client(t))
	h := &harness{t: t, st: st, clock: &clock{now: start}}
	cfg := cronjob.DefaultConfig("r0")
	controller.FastConfig(&cfg.Controller)
	cfg.Now = h.clock.Now
	env := stage.Env{Pub: &stagetest.Publisher{}, Store: st, Stage: pipeline.CronJob, Replica: "r0"}
	if os.Getenv("CRONJOB_TEST_LOG") != "" {
		env.Log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	c, err := cronjob.New(env, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	g, gctx := errgroup.WithContext(ctx)
	if err := c.Start(gctx, g); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); _ = g.Wait() })
	h.c = c
	return h
}

// create stores cj as the api server would (kube's CronJob strategy),
// created at the fake clock's time.
func (h *harness) create(cj *batch.CronJob) {
	h.t.Helper()
	cj.TypeMeta = metav1.TypeMeta{APIVersion: "batch/v1", Kind: "CronJob"}
	if cj.Namespace == "" {
		cj.Namespace = "ns"
	}
	cj.Spec.JobTemplate.Spec.Template.Spec.Containers = []v1.Container{{Name: "c", Image: "busybox"}}
	cj.Spec.JobTemplate.Spec.Template.Spec.RestartPolicy = v1.RestartPolicyOnFailure
	m, err := manifest.FromKube(cj)
	if err != nil {
		h.t.Fatal(err)
	}
	u := m.(*corev1.Unstructured)
	if _, st := registry.Default().PrepareCreate(context.Background(), &corev1.UserInfo{Username: "admin"}, "", u); st != nil {
		h.t.Fatalf("prepare CronJob: %s", st.GetMessage())
	}
	u.Metadata.CreationTimestamp = nil
	k, err := manifest.ToKube(u)
	if err != nil {
		h.t.Fatal(err)
	}
	kc := k.(*batch.CronJob)
	kc.CreationTimestamp = metav1.NewTime(h.clock.Now())
	m, err = manifest.FromKube(kc)
	if err != nil {
		h.t.Fatal(err)
	}
	if _, err := h.st.Create(context.Background(), m.(objects.Object)); err != nil {
		h.t.Fatal(err)
	}
}

// tick moves the clock to t and has the controller look at every CronJob.
func (h *harness) tick(t time.Time) {
	h.clock.set(t)
	if err := h.c.Reconcile(context.Background()); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) cronJob(name string) *batch.CronJob {
	h.t.Helper()
	o, err := h.st.GetKind(context.Background(), objects.CronJobs, "ns", name)
	if err != nil {
		h.t.Fatal(err)
	}
	k, err := manifest.ToKube(o)
	if err != nil {
		h.t.Fatal(err)
	}
	return k.(*batch.CronJob)
}

func (h *harness) jobs() []*batch.Job {
	h.t.Helper()
	kvs, _, err := h.st.KV().List(context.Background(), objects.Jobs.Prefix("ns"))
	if err != nil {
		h.t.Fatal(err)
	}
	var out []*batch.Job
	for _, kv := range kvs {
		u := &corev1.Unstructured{}
		if err := objects.Decode(kv, u); err != nil {
			h.t.Fatal(err)
		}
		k, err := manifest.ToKube(u)
		if err != nil {
			h.t.Fatal(err)
		}
		out = append(out, k.(*batch.Job))
	}
	return out
}

func names(jobs []*batch.Job) []string {
	var out []string
	for _, j := range jobs {
		out = append(out, j.Name)
	}
	slices.Sort(out)
	return out
}

func jobName(cj string, t time.Time) string { return fmt.Sprintf("%s-%d", cj, t.Unix()/60) }

// waitJobs waits until the Jobs are exactly want (by name).
func (h *harness) waitJobs(what string, want ...string) []*batch.Job {
	h.t.Helper()
	slices.Sort(want)
	deadline := time.Now().Add(20 * time.Second)
	for {
		js := h.jobs()
		if slices.Equal(names(js), want) {
			return js
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("%s: Jobs %v, want %v", what, names(js), want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// complete marks Job name Complete (as the Job controller would).
func (h *harness) complete(name string, at time.Time) {
	h.t.Helper()
	for {
		o, err := h.st.GetKind(context.Background(), objects.Jobs, "ns", name)
		if err != nil {
			h.t.Fatal(err)
		}
		k, _ := manifest.ToKube(o)
		j := k.(*batch.Job)
		t := metav1.NewTime(at)
		j.Status.StartTime, j.Status.CompletionTime = &t, &t
		j.Status.Conditions = append(j.Status.Conditions,
			batch.JobCondition{Type: batch.JobSuccessCriteriaMet, Status: v1.ConditionTrue, Reason: "CompletionsReached"},
			batch.JobCondition{Type: batch.JobComplete, Status: v1.ConditionTrue, Reason: "CompletionsReached"})
		j.TypeMeta = metav1.TypeMeta{APIVersion: "batch/v1", Kind: "Job"}
		m, err := manifest.FromKube(j)
		if err != nil {
			h.t.Fatal(err)
		}
		if _, err = h.st.Update(context.Background(), m.(objects.Object)); err == nil {
			return
		} else if !errors.Is(err, raftstore.ErrConflict) {
			h.t.Fatal(err)
		}
	}
}

// TestCronJobFiresOnSchedule: with a fake clock, a */5 CronJob makes no
// Job before 10:05 and one at 10:05 — named by its minute, owned by the
// CronJob, annotated with its scheduled time, built by kube's Job
// strategy (selector, labels) — then another at 10:10 (Allow), and
// status lists both active with lastScheduleTime 10:10; a completed Job
// leaves active and sets lastSuccessfulTime.
func TestCronJobFiresOnSchedule(t *testing.T) {
	h := newHarness(t, at("2026-01-01T10:00:30Z"))
	h.create(&batch.CronJob{ObjectMeta: metav1.ObjectMeta{Name: "cj"}, Spec: batch.CronJobSpec{Schedule: "*/5 * * * *"}})
	h.tick(at("2026-01-01T10:04:59Z"))
	h.tick(at("2026-01-01T10:05:10Z"))
	js := h.waitJobs("at 10:05", jobName("cj", at("2026-01-01T10:05:00Z")))
	cj := h.cronJob("cj")
	j := js[0]
	if ref := metav1.GetControllerOf(j); ref == nil || ref.UID != cj.UID || ref.Kind != "CronJob" {
		t.Errorf("Job controller %v", ref)
	}
	if got := j.Annotations[batch.CronJobScheduledTimestampAnnotation]; got != "2026-01-01T10:05:00Z" {
		t.Errorf("scheduled-timestamp annotation %q", got)
	}
	if j.Spec.Selector == nil || j.Spec.Template.Labels[batch.ControllerUidLabel] != string(j.UID) {
		t.Errorf("the Job strategy did not run: selector %v labels %v", j.Spec.Selector, j.Spec.Template.Labels)
	}
	h.tick(at("2026-01-01T10:10:01Z"))
	h.waitJobs("at 10:10", jobName("cj", at("2026-01-01T10:05:00Z")), jobName("cj", at("2026-01-01T10:10:00Z")))
	deadline := time.Now().Add(10 * time.Second)
	for cj = h.cronJob("cj"); len(cj.Status.Active) != 2 || cj.Status.LastScheduleTime == nil ||
		!cj.Status.LastScheduleTime.Time.Equal(at("2026-01-01T10:10:00Z")); cj = h.cronJob("cj") {
		if time.Now().After(deadline) {
			t.Fatalf("status %+v", cj.Status)
		}
		time.Sleep(20 * time.Millisecond)
	}
	h.complete(jobName("cj", at("2026-01-01T10:05:00Z")), at("2026-01-01T10:06:00Z"))
	for cj = h.cronJob("cj"); len(cj.Status.Active) != 1 || cj.Status.LastSuccessfulTime == nil; cj = h.cronJob("cj") {
		if time.Now().After(deadline) {
			t.Fatalf("status after a completion %+v", cj.Status)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !cj.Status.LastSuccessfulTime.Time.Equal(at("2026-01-01T10:06:00Z")) || cj.Status.Active[0].Name != jobName("cj", at("2026-01-01T10:10:00Z")) {
		t.Errorf("status %+v", cj.Status)
	}
}

// TestCronJobTimeZone: 09:00 in Asia/Tokyo is 00:00 UTC; the Job's
// annotation is in the CronJob's zone.
func TestCronJobTimeZone(t *testing.T) {
	h := newHarness(t, at("2026-01-01T23:00:00Z"))
	h.create(&batch.CronJob{ObjectMeta: metav1.ObjectMeta{Name: "tz"}, Spec: batch.CronJobSpec{Schedule: "0 9 * * *", TimeZone: ptr.To("Asia/Tokyo")}})
	h.tick(at("2026-01-01T23:59:59Z"))
	h.tick(at("2026-01-02T00:00:30Z"))
	js := h.waitJobs("09:00 in Tokyo", jobName("tz", at("2026-01-02T00:00:00Z")))
	if got := js[0].Annotations[batch.CronJobScheduledTimestampAnnotation]; got != "2026-01-02T09:00:00+09:00" {
		t.Errorf("scheduled-timestamp annotation %q", got)
	}
}

// TestCronJobForbidAndReplace: Forbid starts nothing while a Job runs;
// Replace deletes the running Job and starts the new one.
func TestCronJobForbidAndReplace(t *testing.T) {
	h := newHarness(t, at("2026-01-01T10:00:30Z"))
	h.create(&batch.CronJob{ObjectMeta: metav1.ObjectMeta{Name: "f"}, Spec: batch.CronJobSpec{Schedule: "*/5 * * * *", ConcurrencyPolicy: batch.ForbidConcurrent}})
	h.create(&batch.CronJob{ObjectMeta: metav1.ObjectMeta{Name: "r"}, Spec: batch.CronJobSpec{Schedule: "*/5 * * * *", ConcurrencyPolicy: batch.ReplaceConcurrent}})
	h.tick(at("2026-01-01T10:05:10Z"))
	h.waitJobs("at 10:05", jobName("f", at("2026-01-01T10:05:00Z")), jobName("r", at("2026-01-01T10:05:00Z")))
	h.tick(at("2026-01-01T10:10:10Z"))
	// Forbid keeps its 10:05 Job alone; Replace swaps its Job.
	h.waitJobs("at 10:10", jobName("f", at("2026-01-01T10:05:00Z")), jobName("r", at("2026-01-01T10:10:00Z")))
	h.tick(at("2026-01-01T10:15:10Z"))
	h.waitJobs("at 10:15", jobName("f", at("2026-01-01T10:05:00Z")), jobName("r", at("2026-01-01T10:15:00Z")))
	// Once the 10:05 Job is done, the 10:15 run starts late (no deadline).
	h.complete(jobName("f", at("2026-01-01T10:05:00Z")), at("2026-01-01T10:15:20Z"))
	h.waitJobs("the 10:05 Job done", jobName("f", at("2026-01-01T10:05:00Z")), jobName("f", at("2026-01-01T10:15:00Z")), jobName("r", at("2026-01-01T10:15:00Z")))
}

// TestCronJobMissedRuns: after the controller was down for two hours, an
// every-minute CronJob starts only the most recent run (kube's rule for
// more than 100 missed times); with startingDeadlineSeconds 10 and the
// last run 30 s late, it starts nothing.
func TestCronJobMissedRuns(t *testing.T) {
	h := newHarness(t, at("2026-01-01T10:00:30Z"))
	h.create(&batch.CronJob{ObjectMeta: metav1.ObjectMeta{Name: "m"}, Spec: batch.CronJobSpec{Schedule: "* * * * *"}})
	h.create(&batch.CronJob{ObjectMeta: metav1.ObjectMeta{Name: "d"}, Spec: batch.CronJobSpec{Schedule: "* * * * *", StartingDeadlineSeconds: ptr.To[int64](10)}})
	h.tick(at("2026-01-01T12:00:30Z"))
	h.waitJobs("after two hours down", jobName("m", at("2026-01-01T12:00:00Z")))
	h.tick(at("2026-01-01T12:01:05Z"))
	h.waitJobs("a minute later", jobName("m", at("2026-01-01T12:00:00Z")), jobName("m", at("2026-01-01T12:01:00Z")), jobName("d", at("2026-01-01T12:01:00Z")))
}

// TestCronJobHistoryLimits: successfulJobsHistoryLimit 1 keeps only the
// newest completed Job.
func TestCronJobHistoryLimits(t *testing.T) {
	h := newHarness(t, at("2026-01-01T10:00:30Z"))
	h.create(&batch.CronJob{ObjectMeta: metav1.ObjectMeta{Name: "h"}, Spec: batch.CronJobSpec{Schedule: "* * * * *", SuccessfulJobsHistoryLimit: ptr.To[int32](1)}})
	var want []string
	for i := 1; i <= 3; i++ {
		ts := at("2026-01-01T10:00:00Z").Add(time.Duration(i) * time.Minute)
		h.tick(ts.Add(5 * time.Second))
		want = append(want, jobName("h", ts))
		h.waitJobs(fmt.Sprintf("run %d", i), want...)
		h.complete(jobName("h", ts), ts.Add(10*time.Second))
		want = want[len(want)-1:] // once completed, only the newest stays
		h.tick(ts.Add(20 * time.Second))
		h.waitJobs(fmt.Sprintf("history after run %d", i), want...)
	}
}

// TestCronJobTZInScheduleRefused: a schedule naming its zone (TZ= or
// CRON_TZ=) is refused on create, as kube-apiserver refuses it (the zone
// belongs in spec.timeZone), and so is an unknown timeZone.
func TestCronJobTZInScheduleRefused(t *testing.T) {
	for _, tc := range []struct{ sched, tz, field string }{
		{"TZ=UTC * * * * *", "", "spec.schedule"},
		{"CRON_TZ=Asia/Tokyo 0 9 * * *", "", "spec.schedule"},
		{"0 9 * * *", "Mars/Olympus_Mons", "spec.timeZone"},
	} {
		sched := tc.sched
		cj := &batch.CronJob{TypeMeta: metav1.TypeMeta{APIVersion: "batch/v1", Kind: "CronJob"}, ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "tz"},
			Spec: batch.CronJobSpec{Schedule: sched, JobTemplate: batch.JobTemplateSpec{Spec: batch.JobSpec{Template: v1.PodTemplateSpec{Spec: v1.PodSpec{
				RestartPolicy: v1.RestartPolicyNever, Containers: []v1.Container{{Name: "c", Image: "busybox"}}}}}}}}
		if tc.tz != "" {
			cj.Spec.TimeZone = &tc.tz
		}
		m, err := manifest.FromKube(cj)
		if err != nil {
			t.Fatal(err)
		}
		_, st := registry.Default().PrepareCreate(context.Background(), &corev1.UserInfo{Username: "admin"}, "", m.(*corev1.Unstructured))
		if st == nil || st.GetCode() != 422 || !strings.Contains(st.GetMessage(), tc.field) {
			t.Errorf("schedule %q timeZone %q: %v, want 422 naming %s", sched, tc.tz, st, tc.field)
		}
	}
}
