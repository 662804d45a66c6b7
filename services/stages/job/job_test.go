package job_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"golang.org/x/sync/errgroup"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
	batch "k8s.io/api/batch/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/podflow/podflow/proto/apiv1"
	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/eventsv1"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/raftstore/raftstoretest"
	"github.com/podflow/podflow/services/controller"
	"github.com/podflow/podflow/services/manifest"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/pipeline"
	"github.com/podflow/podflow/services/stage"
	"github.com/podflow/podflow/services/stage/stagetest"
	"github.com/podflow/podflow/services/stages/job"
)

// storeRequester stands in for the pipeline's api, admission and
// persistence stages: it stores the requested pod if its name is free (a
// 409 otherwise), as persistence does, and counts the creations.
type storeRequester struct {
	st *objects.Store

	mu      sync.Mutex
	created int
}

func (r *storeRequester) Request(ctx context.Context, _ string, data []byte) ([]byte, error) {
	e := &eventsv1.Envelope{}
	if err := proto.Unmarshal(data, e); err != nil {
		return nil, err
	}
	pod := e.GetPodRequested().GetPod()
	pod.Metadata.Uid = uuid.NewString()
	pod.Metadata.CreationTimestamp = timestamppb.Now()
	resp := &apiv1.Response{}
	if _, err := r.st.Create(ctx, pod); errors.Is(err, raftstore.ErrAlreadyExists) {
		resp.Status = stage.AlreadyExists("pods", pod.Metadata.Name)
	} else if err != nil {
		return nil, err
	} else {
		r.mu.Lock()
		r.created++
		r.mu.Unlock()
		resp.Status = stage.Success(201, "Pod", pod.Metadata.Name)
		if resp.Object, err = proto.Marshal(pod); err != nil {
			return nil, err
		}
	}
	return proto.Marshal(resp)
}

func (r *storeRequester) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.created
}

type harness struct {
	t   *testing.T
	st  *objects.Store
	req *storeRequester
	// exitCode is the exit code of a failing pod's container (default 1).
	exitCode func(p *corev1.Pod) int32
}

func newHarness(t *testing.T) *harness {
	cl := raftstoretest.MakeCluster(t, 1)
	st := objects.New(cl.Client(t))
	return &harness{t: t, st: st, req: &storeRequester{st: st}}
}

// replica starts a replica of the controller; cancelling the context it
// returns stops it (a kill: nothing is released but what Start releases).
func (h *harness) replica(ctx context.Context, name string, mutate func(*job.Config)) (stop func()) {
	h.t.Helper()
	cfg := job.DefaultConfig(name)
	controller.FastConfig(&cfg.Controller)
	cfg.BackoffBase, cfg.BackoffMax = 10*time.Millisecond, 40*time.Millisecond
	if mutate != nil {
		mutate(&cfg)
	}
	env := stage.Env{Pub: &stagetest.Publisher{}, Store: h.st, Stage: pipeline.Job, Replica: name}
	c, err := job.New(env, cfg, h.req)
	if err != nil {
		h.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctx)
	g, gctx := errgroup.WithContext(ctx)
	if err := c.Start(gctx, g); err != nil {
		h.t.Fatal(err)
	}
	if err := c.Reconcile(gctx); err != nil {
		h.t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = g.Wait(); close(done) }()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	h.t.Cleanup(stop)
	return stop
}

// createJob stores j as the api server would (uid, generation, the
// generated selector and labels of kube's Job strategy).
func (h *harness) createJob(ctx context.Context, j *batch.Job) *batch.Job {
	h.t.Helper()
	j.TypeMeta = metav1.TypeMeta{APIVersion: "batch/v1", Kind: "Job"}
	j.UID = types.UID(uuid.NewString())
	j.Generation = 1
	j.CreationTimestamp = metav1.Now()
	lbl := map[string]string{batch.ControllerUidLabel: string(j.UID), batch.JobNameLabel: j.Name}
	j.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{batch.ControllerUidLabel: string(j.UID)}}
	j.Spec.Template.Labels = lbl
	if j.Spec.BackoffLimit == nil {
		j.Spec.BackoffLimit = ptr.To[int32](6)
	}
	if j.Spec.Parallelism == nil {
		j.Spec.Parallelism = ptr.To[int32](1)
	}
	if j.Spec.CompletionMode == nil {
		j.Spec.CompletionMode = ptr.To(batch.NonIndexedCompletion)
	}
	if j.Spec.Template.Spec.RestartPolicy == "" {
		j.Spec.Template.Spec.RestartPolicy = v1.RestartPolicyNever
	}
	if len(j.Spec.Template.Spec.Containers) == 0 {
		j.Spec.Template.Spec.Containers = []v1.Container{{Name: "c", Image: "busybox"}}
	}
	m, err := manifest.FromKube(j)
	if err != nil {
		h.t.Fatal(err)
	}
	if _, err := h.st.Create(ctx, m.(objects.Object)); err != nil {
		h.t.Fatal(err)
	}
	return j
}

func (h *harness) getJob(ctx context.Context, ns, name string) *batch.Job {
	h.t.Helper()
	o, err := h.st.GetKind(ctx, objects.Jobs, ns, name)
	if err != nil {
		h.t.Fatal(err)
	}
	k, err := manifest.ToKube(o)
	if err != nil {
		h.t.Fatal(err)
	}
	return k.(*batch.Job)
}

func (h *harness) pods(ctx context.Context, ns string) []*corev1.Pod {
	h.t.Helper()
	ps, _, err := objects.List[*corev1.Pod](ctx, h.st, ns)
	if err != nil {
		h.t.Fatal(err)
	}
	return ps
}

func condition(j *batch.Job, t batch.JobConditionType) *batch.JobCondition {
	for i := range j.Status.Conditions {
		if c := &j.Status.Conditions[i]; c.Type == t && c.Status == v1.ConditionTrue {
			return c
		}
	}
	return nil
}

// kubelet runs the Job's pods as a node would: each pod not finished
// ends with the phase end(pod) picks ("" leaves it running), a pod
// marked for deletion ends Failed. It records the most pods it saw
// active at once.
func (h *harness) kubelet(ctx context.Context, ns string, end func(p *corev1.Pod) string) (peak func() int) {
	var mu sync.Mutex
	most := 0
	go func() {
		for ctx.Err() == nil {
			ps, _, err := objects.List[*corev1.Pod](ctx, h.st, ns)
			if err != nil {
				continue
			}
			n := 0
			for _, p := range ps {
				ph := p.GetStatus().GetPhase()
				if ph == string(v1.PodSucceeded) || ph == string(v1.PodFailed) {
					continue
				}
				if p.GetMetadata().GetDeletionTimestamp() == nil {
					n++
				}
				to := end(p)
				if p.GetMetadata().GetDeletionTimestamp() != nil {
					to = string(v1.PodFailed)
				}
				if to == "" {
					continue
				}
				_, _ = objects.Mutate(ctx, h.st, ns, p.GetMetadata().GetName(), func(q *corev1.Pod) error {
					if q.GetMetadata().GetUid() != p.GetMetadata().GetUid() || q.GetStatus().GetPhase() == to {
						return objects.ErrNoChange
					}
					if q.Status == nil {
						q.Status = &corev1.PodStatus{}
					}
					q.Status.Phase = to
					q.Status.Conditions = []*corev1.PodCondition{{Type: "Ready", Status: "False", LastTransitionTime: timestamppb.Now()}}
					code := int32(0)
					if to == string(v1.PodFailed) {
						code = 1
						if h.exitCode != nil {
							code = h.exitCode(p)
						}
					}
					q.Status.ContainerStatuses = []*corev1.ContainerStatus{{Name: "c", State: &corev1.ContainerState{
						Terminated: &corev1.ContainerStateTerminated{ExitCode: code, FinishedAt: timestamppb.Now()}}}}
					return nil
				})
			}
			mu.Lock()
			most = max(most, n)
			mu.Unlock()
			time.Sleep(5 * time.Millisecond)
		}
	}()
	return func() int {
		mu.Lock()
		defer mu.Unlock()
		return most
	}
}

func waitFor(t *testing.T, what string, timeout time.Duration, f func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !f() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestIndexedJobCompletesExactly: an Indexed Job of 100 completions with
// parallelism 10 runs each index once, never more than 10 pods at once,
// counts exactly 100, lists completedIndexes 0-99, lets every pod go
// (no finalizer left) and ends Complete after SuccessCriteriaMet; its
// pods carry their index as kube's do.
func TestIndexedJobCompletesExactly(t *testing.T) {
	ctx := t.Context()
	h := newHarness(t)
	h.replica(ctx, "r0", nil)
	peak := h.kubelet(ctx, "ns", func(*corev1.Pod) string { return string(v1.PodSucceeded) })
	h.createJob(ctx, &batch.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "idx"}, Spec: batch.JobSpec{
		Completions: ptr.To[int32](100), Parallelism: ptr.To[int32](10), CompletionMode: ptr.To(batch.IndexedCompletion)}})
	var j *batch.Job
	waitFor(t, "the Job to complete", 2*time.Minute, func() bool {
		j = h.getJob(ctx, "ns", "idx")
		return condition(j, batch.JobComplete) != nil
	})
	if j.Status.Succeeded != 100 || j.Status.Failed != 0 || j.Status.CompletedIndexes != "0-99" || j.Status.Active != 0 {
		t.Errorf("status: succeeded %d failed %d completedIndexes %q active %d; want 100, 0, 0-99, 0",
			j.Status.Succeeded, j.Status.Failed, j.Status.CompletedIndexes, j.Status.Active)
	}
	if condition(j, batch.JobSuccessCriteriaMet) == nil || j.Status.CompletionTime == nil {
		t.Errorf("a complete Job without SuccessCriteriaMet or completionTime: %+v", j.Status)
	}
	if c := condition(j, batch.JobComplete); c.Reason != batch.JobReasonCompletionsReached {
		t.Errorf("Complete reason %q", c.Reason)
	}
	if u := j.Status.UncountedTerminatedPods; u != nil && len(u.Succeeded)+len(u.Failed) > 0 {
		t.Errorf("uncounted pods left: %+v", u)
	}
	if p := peak(); p > 10 {
		t.Errorf("%d pods ran at once, parallelism is 10", p)
	}
	perIndex := map[string]int{}
	for _, p := range h.pods(ctx, "ns") {
		md := p.GetMetadata()
		idx := md.GetAnnotations()[batch.JobCompletionIndexAnnotation]
		perIndex[idx]++
		if slices.Contains(md.GetFinalizers(), job.TrackingFinalizer) {
			t.Errorf("pod %s still holds the tracking finalizer", md.GetName())
		}
		if !strings.HasPrefix(md.GetName(), "idx-"+idx+"-") || p.GetSpec().GetHostname() != "idx-"+idx || md.GetLabels()[batch.JobCompletionIndexAnnotation] != idx {
			t.Errorf("pod %s of index %s: hostname %q labels %v", md.GetName(), idx, p.GetSpec().GetHostname(), md.GetLabels())
		}
		env := p.GetSpec().GetContainers()[0].GetEnv()
		if len(env) != 1 || env[0].GetName() != "JOB_COMPLETION_INDEX" ||
			env[0].GetValueFrom().GetFieldRef().GetFieldPath() != "metadata.annotations['batch.kubernetes.io/job-completion-index']" {
			t.Errorf("pod %s env %v", md.GetName(), env)
		}
		if ref := controller.ControllerOf(md); ref == nil || ref.GetUid() != string(j.UID) || ref.GetKind() != "Job" {
			t.Errorf("pod %s controller %v", md.GetName(), ref)
		}
	}
	if len(perIndex) != 100 || h.req.count() != 100 {
		t.Errorf("%d indexes have pods, %d pods created; want 100 and 100", len(perIndex), h.req.count())
	}
	for idx, n := range perIndex {
		if n != 1 {
			t.Errorf("index %s ran %d times", idx, n)
		}
	}
}

// TestFailingJobStopsAtBackoffLimit: every pod fails; with backoffLimit
// 2 the Job makes 3 pods, one after another, then FailureTarget and
// Failed, reason BackoffLimitExceeded, and no more.
func TestFailingJobStopsAtBackoffLimit(t *testing.T) {
	ctx := t.Context()
	h := newHarness(t)
	h.replica(ctx, "r0", nil)
	h.kubelet(ctx, "ns", func(*corev1.Pod) string { return string(v1.PodFailed) })
	h.createJob(ctx, &batch.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "fail"}, Spec: batch.JobSpec{
		Completions: ptr.To[int32](1), BackoffLimit: ptr.To[int32](2)}})
	var j *batch.Job
	waitFor(t, "the Job to fail", time.Minute, func() bool {
		j = h.getJob(ctx, "ns", "fail")
		return condition(j, batch.JobFailed) != nil
	})
	c := condition(j, batch.JobFailed)
	if c.Reason != batch.JobReasonBackoffLimitExceeded || c.Message != "Job has reached the specified backoff limit" {
		t.Errorf("Failed: %q %q", c.Reason, c.Message)
	}
	if condition(j, batch.JobFailureTarget) == nil || condition(j, batch.JobComplete) != nil {
		t.Errorf("conditions %+v", j.Status.Conditions)
	}
	if j.Status.Failed != 3 || j.Status.Succeeded != 0 {
		t.Errorf("failed %d succeeded %d; want 3, 0", j.Status.Failed, j.Status.Succeeded)
	}
	time.Sleep(300 * time.Millisecond) // time for a wrong extra pod
	if n := h.req.count(); n != 3 {
		t.Errorf("%d pods created, want 3", n)
	}
}

// TestBackoffDelaysTheNextPod: after two failures the next pod waits
// BackoffBase doubled (200ms with a 100ms base), not less.
func TestBackoffDelaysTheNextPod(t *testing.T) {
	ctx := t.Context()
	h := newHarness(t)
	h.replica(ctx, "r0", func(c *job.Config) { c.BackoffBase, c.BackoffMax = 300*time.Millisecond, time.Second })
	var mu sync.Mutex
	created := map[string]time.Time{}
	h.kubelet(ctx, "ns", func(p *corev1.Pod) string {
		mu.Lock()
		defer mu.Unlock()
		if _, ok := created[p.GetMetadata().GetName()]; !ok {
			created[p.GetMetadata().GetName()] = time.Now()
		}
		return string(v1.PodFailed)
	})
	h.createJob(ctx, &batch.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "b"}, Spec: batch.JobSpec{BackoffLimit: ptr.To[int32](2)}})
	waitFor(t, "the Job to fail", time.Minute, func() bool { return condition(h.getJob(ctx, "ns", "b"), batch.JobFailed) != nil })
	mu.Lock()
	defer mu.Unlock()
	var times []time.Time
	for _, t := range created {
		times = append(times, t)
	}
	slices.SortFunc(times, func(a, b time.Time) int { return a.Compare(b) })
	if len(times) != 3 {
		t.Fatalf("%d pods, want 3", len(times))
	}
	if d := times[1].Sub(times[0]); d < 300*time.Millisecond {
		t.Errorf("the second pod came %s after the first, want at least the base 300ms", d)
	}
	if d := times[2].Sub(times[1]); d < 600*time.Millisecond {
		t.Errorf("the third pod came %s after the second, want at least 600ms (doubled)", d)
	}
}

// TestActiveDeadline: a Job running longer than activeDeadlineSeconds has
// its pods deleted and fails with DeadlineExceeded.
func TestActiveDeadline(t *testing.T) {
	ctx := t.Context()
	h := newHarness(t)
	h.replica(ctx, "r0", nil)
	h.kubelet(ctx, "ns", func(*corev1.Pod) string { return "" }) // runs forever
	h.createJob(ctx, &batch.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "slow"}, Spec: batch.JobSpec{
		Parallelism: ptr.To[int32](2), ActiveDeadlineSeconds: ptr.To[int64](1)}})
	var j *batch.Job
	waitFor(t, "the Job to fail", time.Minute, func() bool {
		j = h.getJob(ctx, "ns", "slow")
		return condition(j, batch.JobFailed) != nil
	})
	if c := condition(j, batch.JobFailed); c.Reason != batch.JobReasonDeadlineExceeded || c.Message != "Job was active longer than specified deadline" {
		t.Errorf("Failed: %q %q", c.Reason, c.Message)
	}
	for _, p := range h.pods(ctx, "ns") {
		if p.GetMetadata().GetDeletionTimestamp() == nil {
			t.Errorf("pod %s not deleted", p.GetMetadata().GetName())
		}
	}
	if j.Status.Active != 0 || j.Status.Failed != 2 {
		t.Errorf("active %d failed %d; want 0, 2", j.Status.Active, j.Status.Failed)
	}
}

// TestSuspend: a suspended Job makes no pod and says so; resumed, it
// runs to completion.
func TestSuspend(t *testing.T) {
	ctx := t.Context()
	h := newHarness(t)
	h.replica(ctx, "r0", nil)
	h.kubelet(ctx, "ns", func(*corev1.Pod) string { return string(v1.PodSucceeded) })
	h.createJob(ctx, &batch.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "s"}, Spec: batch.JobSpec{
		Completions: ptr.To[int32](2), Suspend: ptr.To(true)}})
	waitFor(t, "Suspended", 30*time.Second, func() bool {
		c := condition(h.getJob(ctx, "ns", "s"), batch.JobSuspended)
		return c != nil && c.Reason == "JobSuspended"
	})
	if n := h.req.count(); n != 0 {
		t.Fatalf("a suspended Job made %d pods", n)
	}
	for { // as a client's update: read, change, compare-and-swap
		j := h.getJob(ctx, "ns", "s")
		j.Spec.Suspend = ptr.To(false)
		m, err := manifest.FromKube(j)
		if err != nil {
			t.Fatal(err)
		}
		_, err = h.st.Update(ctx, m.(objects.Object))
		if err == nil {
			break
		}
		if !errors.Is(err, raftstore.ErrConflict) {
			t.Fatal(err)
		}
	}
	var j *batch.Job
	waitFor(t, "the Job to complete", 30*time.Second, func() bool {
		j = h.getJob(ctx, "ns", "s")
		return condition(j, batch.JobComplete) != nil
	})
	for _, c := range j.Status.Conditions {
		if c.Type == batch.JobSuspended && (c.Status != v1.ConditionFalse || c.Reason != "JobResumed") {
			t.Errorf("Suspended after resuming: %+v", c)
		}
	}
	if j.Status.Succeeded != 2 {
		t.Errorf("succeeded %d, want 2", j.Status.Succeeded)
	}
}

// TestKilledReplicasCountEachCompletionOnce: three replicas share the Job
// controller's work while one after another is killed and restarted;
// every Succeeded pod is counted exactly once (status.succeeded equals
// the Succeeded pods, none left uncounted, none holding the finalizer).
// ops/chaos runs the same invariant with SIGKILLed processes.
func TestKilledReplicasCountEachCompletionOnce(t *testing.T) {
	ctx := t.Context()
	h := newHarness(t)
	stops := make([]func(), 3)
	for i := range stops {
		stops[i] = h.replica(ctx, fmt.Sprintf("r%d", i), nil)
	}
	h.kubelet(ctx, "ns", func(p *corev1.Pod) string {
		if rand.IntN(8) == 0 {
			return string(v1.PodFailed)
		}
		return string(v1.PodSucceeded)
	})
	const completions = 200
	h.createJob(ctx, &batch.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "chaos"}, Spec: batch.JobSpec{
		Completions: ptr.To[int32](completions), Parallelism: ptr.To[int32](20), BackoffLimit: ptr.To[int32](1000)}})
	killer, cancelKiller := context.WithCancel(ctx)
	killed := 0
	killerDone := make(chan struct{})
	go func() {
		defer close(killerDone)
		for i := 0; killer.Err() == nil; i++ {
			time.Sleep(time.Duration(150+rand.IntN(200)) * time.Millisecond)
			if killer.Err() != nil {
				return
			}
			r := i % len(stops)
			stops[r]()
			killed++
			stops[r] = h.replica(ctx, fmt.Sprintf("r%d-%d", r, i), nil)
		}
	}()
	var j *batch.Job
	waitFor(t, "the Job to complete", 3*time.Minute, func() bool {
		j = h.getJob(ctx, "ns", "chaos")
		return condition(j, batch.JobComplete) != nil
	})
	cancelKiller()
	<-killerDone // its last replica started before the test's context ends
	succeeded, failed := 0, 0
	for _, p := range h.pods(ctx, "ns") {
		switch p.GetStatus().GetPhase() {
		case string(v1.PodSucceeded):
			succeeded++
		case string(v1.PodFailed):
			failed++
		}
		if slices.Contains(p.GetMetadata().GetFinalizers(), job.TrackingFinalizer) {
			t.Errorf("pod %s still holds the tracking finalizer", p.GetMetadata().GetName())
		}
	}
	t.Logf("%d replica kills; %d pods succeeded, %d failed; %d created, %d listed", killed, succeeded, failed, h.req.count(), len(h.pods(ctx, "ns")))
	if int(j.Status.Succeeded) != succeeded || int(j.Status.Failed) != failed {
		t.Errorf("status counts succeeded %d failed %d, the pods say %d and %d", j.Status.Succeeded, j.Status.Failed, succeeded, failed)
	}
	if succeeded < completions {
		t.Errorf("complete with %d successes, want %d", succeeded, completions)
	}
	if u := j.Status.UncountedTerminatedPods; u != nil && len(u.Succeeded)+len(u.Failed) > 0 {
		t.Errorf("uncounted pods left: %+v", u)
	}
}
