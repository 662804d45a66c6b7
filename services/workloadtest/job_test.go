package workloadtest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"
	batch "k8s.io/api/batch/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/controller"
	"github.com/podflow/podflow/services/informer"
	"github.com/podflow/podflow/services/nslifecycle"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/pipeline"
	"github.com/podflow/podflow/services/stage"
	"github.com/podflow/podflow/services/stages/job"
)

func startJobs(c *cluster, name string) *replica {
	return c.startController(pipeline.Job, name, func(env stage.Env, cfg controller.Config) (stage.Handler, error) {
		jc := job.DefaultConfig(name)
		jc.Controller = cfg
		jc.BackoffBase, jc.BackoffMax = 20*time.Millisecond, 100*time.Millisecond
		return job.New(env, jc, controller.NATSRequester(env.NATS))
	})
}

// newJob is a Job as `kubectl create job` writes it; the api stage's Job
// strategy generates its selector and labels.
func newJob(ns, name string, spec batch.JobSpec) *batch.Job {
	spec.Template.Spec.Containers = []v1.Container{{Name: "work", Image: "busybox", Command: []string{"true"}}}
	spec.Template.Spec.RestartPolicy = v1.RestartPolicyNever
	return &batch.Job{TypeMeta: metav1.TypeMeta{APIVersion: "batch/v1", Kind: "Job"}, ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: spec}
}

// finisher ends the containers of the Job pods the kubelet runs: phase
// end(pod) ("" keeps it running). It records the most pods of uid that
// ran at once.
type finisher struct {
	mu   sync.Mutex
	live map[string]bool
	peak int
}

func (c *cluster) finishPods(uid string, end func(p *corev1.Pod) string) *finisher {
	f := &finisher{live: map[string]bool{}}
	ctx, cancel := context.WithCancel(c.runCtx)
	c.t.Cleanup(cancel)
	work := make(chan *corev1.Pod, 100000)
	see := func(p *corev1.Pod, gone bool) {
		md := p.GetMetadata()
		if ref := controller.ControllerOf(md); ref == nil || ref.GetUid() != uid {
			return
		}
		ph := p.GetStatus().GetPhase()
		f.mu.Lock()
		if gone || md.GetDeletionTimestamp() != nil || ph == "Succeeded" || ph == "Failed" {
			delete(f.live, md.GetName())
		} else {
			f.live[md.GetName()] = true
		}
		f.peak = max(f.peak, len(f.live))
		f.mu.Unlock()
		if !gone && ph == "Running" && md.GetDeletionTimestamp() == nil {
			work <- p
		}
	}
	inf, err := informer.New[*corev1.Pod](c.store, "", informer.Handlers[*corev1.Pod]{
		OnAdd: func(p *corev1.Pod) { see(p, false) }, OnUpdate: func(_, p *corev1.Pod) { see(p, false) },
		OnDelete: func(p *corev1.Pod) { see(p, true) },
	})
	if err != nil {
		c.t.Fatal(err)
	}
	go func() { _ = inf.Run(ctx) }()
	for range 8 {
		go func() {
			for {
				select {
				case <-ctx.Done():
					return
				case p := <-work:
					to := end(p)
					if to == "" {
						continue
					}
					md := p.GetMetadata()
					_, _ = objects.Mutate(ctx, c.store, md.GetNamespace(), md.GetName(), func(q *corev1.Pod) error {
						if q.GetMetadata().GetUid() != md.GetUid() || q.GetStatus().GetPhase() != "Running" || q.GetMetadata().GetDeletionTimestamp() != nil {
							return objects.ErrNoChange
						}
						q.Status.Phase = to
						now := timestamppb.Now()
						for _, cond := range q.Status.Conditions {
							if cond.GetType() == "Ready" {
								cond.Status, cond.LastTransitionTime = "False", now
							}
						}
						return nil
					})
				}
			}
		}()
	}
	return f
}

func (f *finisher) most() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.peak
}

func jobCondition(j *batch.Job, t batch.JobConditionType) *batch.JobCondition {
	for i := range j.Status.Conditions {
		if cond := &j.Status.Conditions[i]; cond.Type == t && cond.Status == v1.ConditionTrue {
			return cond
		}
	}
	return nil
}

// TestIndexedJobThroughThePipeline: an Indexed Job of 100 completions
// with parallelism 10, its pods created through the api stage, admission
// and persistence and run by the kubelet, completes exactly 100: one pod
// per index, never more than 10 at once, succeeded 100, completedIndexes
// 0-99, every finalizer removed, Complete.
func TestIndexedJobThroughThePipeline(t *testing.T) {
	c := newCluster(t)
	startJobs(c, "job-a")
	startJobs(c, "job-b")
	u := c.apply("create", newJob("default", "idx", batch.JobSpec{Completions: ptr.To[int32](100), Parallelism: ptr.To[int32](10),
		CompletionMode: ptr.To(batch.IndexedCompletion)}))
	uid := u.GetMetadata().GetUid()
	f := c.finishPods(uid, func(*corev1.Pod) string { return "Succeeded" })
	var j *batch.Job
	c.eventually("the Job to complete", 3*time.Minute, func() bool {
		var ok bool
		j, ok = get[*batch.Job](c, objects.Jobs, "default", "idx")
		return ok && jobCondition(j, batch.JobComplete) != nil
	})
	if j.Status.Succeeded != 100 || j.Status.Failed != 0 || j.Status.CompletedIndexes != "0-99" {
		t.Errorf("succeeded %d failed %d completedIndexes %q; want 100, 0, 0-99", j.Status.Succeeded, j.Status.Failed, j.Status.CompletedIndexes)
	}
	if jobCondition(j, batch.JobSuccessCriteriaMet) == nil {
		t.Errorf("Complete without SuccessCriteriaMet: %+v", j.Status.Conditions)
	}
	if n := f.most(); n > 10 {
		t.Errorf("%d pods ran at once, parallelism is 10", n)
	}
	perIndex := map[string]int{}
	for _, p := range c.pods("default") {
		md := p.GetMetadata()
		if ref := controller.ControllerOf(md); ref == nil || ref.GetUid() != uid {
			continue
		}
		idx := md.GetAnnotations()[batch.JobCompletionIndexAnnotation]
		perIndex[idx]++
		if slices.Contains(md.GetFinalizers(), job.TrackingFinalizer) {
			t.Errorf("pod %s keeps the tracking finalizer", md.GetName())
		}
		if !strings.HasPrefix(md.GetName(), "idx-"+idx+"-") || p.GetSpec().GetHostname() != "idx-"+idx {
			t.Errorf("pod %s of index %s has hostname %q", md.GetName(), idx, p.GetSpec().GetHostname())
		}
		if md.GetLabels()[batch.JobNameLabel] != "idx" || md.GetLabels()[batch.ControllerUidLabel] != uid {
			t.Errorf("pod %s labels %v", md.GetName(), md.GetLabels())
		}
	}
	if len(perIndex) != 100 {
		t.Errorf("%d indexes ran, want 100", len(perIndex))
	}
	for idx, n := range perIndex {
		if n != 1 {
			t.Errorf("index %s ran %d pods", idx, n)
		}
	}
}

// TestFailingJobThroughThePipeline: every pod fails; backoffLimit 2 makes
// exactly three pods, then the Job is Failed with BackoffLimitExceeded.
func TestFailingJobThroughThePipeline(t *testing.T) {
	c := newCluster(t)
	startJobs(c, "job-a")
	u := c.apply("create", newJob("default", "fail", batch.JobSpec{BackoffLimit: ptr.To[int32](2)}))
	uid := u.GetMetadata().GetUid()
	c.finishPods(uid, func(*corev1.Pod) string { return "Failed" })
	var j *batch.Job
	c.eventually("the Job to fail", time.Minute, func() bool {
		var ok bool
		j, ok = get[*batch.Job](c, objects.Jobs, "default", "fail")
		return ok && jobCondition(j, batch.JobFailed) != nil
	})
	if cond := jobCondition(j, batch.JobFailed); cond.Reason != "BackoffLimitExceeded" || cond.Message != "Job has reached the specified backoff limit" {
		t.Errorf("Failed %q: %q", cond.Reason, cond.Message)
	}
	time.Sleep(500 * time.Millisecond) // room for a wrong fourth pod
	n := 0
	for _, p := range c.pods("default") {
		if ref := controller.ControllerOf(p.GetMetadata()); ref != nil && ref.GetUid() == uid {
			n++
		}
	}
	if n != 3 || j.Status.Failed != 3 {
		t.Errorf("%d pods, failed %d; want 3 and 3", n, j.Status.Failed)
	}
}

// TestJobControllerKilledCountsEachCompletionOnce: while a Job of 300
// completions (parallelism 30, one pod in eight failing) runs, a Job
// controller replica is killed (its connection cut, its Lease left to
// expire) and replaced every 0.5-1 s; at the end status.succeeded and
// status.failed equal the pods' phases: no completion counted twice, none
// lost. ops/chaos checks the same invariant with SIGKILLed processes.
func TestJobControllerKilledCountsEachCompletionOnce(t *testing.T) {
	c := newCluster(t)
	reps := []*replica{startJobs(c, "job-0"), startJobs(c, "job-1")}
	const completions = 300
	u := c.apply("create", newJob("default", "chaos", batch.JobSpec{Completions: ptr.To[int32](completions), Parallelism: ptr.To[int32](30),
		BackoffLimit: ptr.To[int32](10000)}))
	uid := u.GetMetadata().GetUid()
	c.finishPods(uid, func(*corev1.Pod) string {
		if rand.IntN(8) == 0 {
			return "Failed"
		}
		return "Succeeded"
	})
	ctx, cancel := context.WithCancel(c.runCtx)
	killed := make(chan int)
	go func() {
		n := 0
		defer func() { killed <- n }()
		for i := 2; ; i++ {
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Duration(500+rand.IntN(500)) * time.Millisecond):
			}
			k := rand.IntN(len(reps))
			reps[k].Kill()
			n++
			reps[k] = startJobs(c, fmt.Sprintf("job-%d", i))
		}
	}()
	var j *batch.Job
	c.eventually("the Job to complete", 4*time.Minute, func() bool {
		var ok bool
		j, ok = get[*batch.Job](c, objects.Jobs, "default", "chaos")
		return ok && jobCondition(j, batch.JobComplete) != nil
	})
	cancel()
	kills := <-killed
	succeeded, failed := 0, 0
	for _, p := range c.pods("default") {
		md := p.GetMetadata()
		if ref := controller.ControllerOf(md); ref == nil || ref.GetUid() != uid {
			continue
		}
		switch p.GetStatus().GetPhase() {
		case "Succeeded":
			succeeded++
		case "Failed":
			failed++
		}
		if slices.Contains(md.GetFinalizers(), job.TrackingFinalizer) {
			t.Errorf("pod %s keeps the tracking finalizer", md.GetName())
		}
	}
	t.Logf("%d kills: %d pods succeeded, %d failed", kills, succeeded, failed)
	if int(j.Status.Succeeded) != succeeded || int(j.Status.Failed) != failed {
		t.Errorf("the Job counted succeeded %d failed %d; its pods: %d succeeded, %d failed", j.Status.Succeeded, j.Status.Failed, succeeded, failed)
	}
	if succeeded < completions {
		t.Errorf("Complete with %d of %d completions", succeeded, completions)
	}
	if unc := j.Status.UncountedTerminatedPods; unc != nil && len(unc.Succeeded)+len(unc.Failed) > 0 {
		t.Errorf("pods left uncounted: %+v", unc)
	}
}

// TestPrivilegedJobGatedByPodSecurity: a Job whose template runs a
// privileged container is accepted (kube-apiserver with
// --allow-privileged=true); Pod Security admission decides by the
// namespace's label whether its pods may run. In a namespace enforcing
// privileged the Job's pod is created; in one enforcing baseline the pod
// is refused with kube's PodSecurity message, which the Job controller
// records as a FailedCreate Event.
func TestPrivilegedJobGatedByPodSecurity(t *testing.T) {
	c := newCluster(t)
	startJobs(c, "job-a")
	for _, level := range []string{"privileged", "baseline"} {
		ns := &corev1.Namespace{Metadata: &corev1.ObjectMeta{Name: "psa-" + level, Uid: "ns-" + level,
			Labels: map[string]string{"pod-security.kubernetes.io/enforce": level}}}
		nslifecycle.PrepareForCreate(ns)
		if _, err := c.store.Create(context.Background(), ns); err != nil {
			t.Fatal(err)
		}
	}
	privileged := func(ns string) *batch.Job {
		j := newJob(ns, "priv", batch.JobSpec{BackoffLimit: ptr.To[int32](0)})
		j.Spec.Template.Spec.Containers[0].SecurityContext = &v1.SecurityContext{Privileged: ptr.To(true)}
		return j
	}
	okUID := c.apply("create", privileged("psa-privileged")).GetMetadata().GetUid()
	refusedUID := c.apply("create", privileged("psa-baseline")).GetMetadata().GetUid()

	c.eventually("the privileged namespace's Job pod", 30*time.Second, func() bool {
		for _, p := range c.pods("psa-privileged") {
			if ref := controller.ControllerOf(p.GetMetadata()); ref != nil && ref.GetUid() == okUID {
				return true
			}
		}
		return false
	})
	const want = `Error creating: pods "priv-` // then the generated suffix
	const violation = `" is forbidden: violates PodSecurity "baseline:latest": privileged (container "work" must not set securityContext.privileged=true)`
	c.eventually("the baseline namespace's FailedCreate Event", 30*time.Second, func() bool {
		evs, _, err := objects.List[*corev1.Event](context.Background(), c.store, "psa-baseline")
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range evs {
			if e.GetReason() == "FailedCreate" && e.GetInvolvedObject().GetUid() == refusedUID &&
				strings.HasPrefix(e.GetMessage(), want) && strings.HasSuffix(e.GetMessage(), violation) {
				return true
			}
		}
		return false
	})
	if ps := c.pods("psa-baseline"); len(ps) != 0 {
		t.Errorf("%d pods in the baseline namespace, want none", len(ps))
	}
}
