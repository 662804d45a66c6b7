package chaos

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// jobTrackingFinalizer is the finalizer the job controller puts on every
// pod it creates and removes once it counted the pod
// (batchv1.JobTrackingFinalizer).
const jobTrackingFinalizer = batchv1.JobTrackingFinalizer

// runJob is the job scenario: a Job of o.Completions completions
// (o.Parallelism at once, Indexed with o.Indexed) whose pods exit 0 soon
// after they start on the simulated nodes, while the kill loop kills the
// job controller's replicas. The Job must end Complete, and the checks
// run over every version of the Job and its pods the watches saw
// (checkJob) and over the pods left (checkFinalizers).
func runJob(ctx context.Context, s *scenarioRun) ([]string, error) {
	name := fmt.Sprintf("chaos-job-%d", s.o.Seed%100000)
	const ns = "default"
	sel := "chaos.podflow.io/job=" + name
	pods, jobs := s.cs.CoreV1().Pods(ns), s.cs.BatchV1().Jobs(ns)
	rec, err := recordSelected(ctx, sel, pods, jobs.Watch)
	if err != nil {
		return nil, err
	}
	defer rec.history() //nolint:errcheck // stops the watches on an early return
	job := chaosJob(name, int32(s.o.Completions), int32(s.o.Parallelism), s.o.Indexed)
	if _, err := jobs.Create(ctx, job, metav1.CreateOptions{}); err != nil {
		return nil, fmt.Errorf("create job %s: %w", name, err)
	}
	mode := "NonIndexed"
	if s.o.Indexed {
		mode = "Indexed"
	}
	s.startKills()
	s.say("created %s job %s: %d completions, parallelism %d", mode, name, s.o.Completions, s.o.Parallelism)
	var final *batchv1.Job
	said := time.Now()
	last, err := poll(ctx, s.o.Duration+s.o.Settle, func() (bool, string, error) {
		j, err := jobs.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		final = j
		msg := fmt.Sprintf("succeeded %d, failed %d, active %d", j.Status.Succeeded, j.Status.Failed, j.Status.Active)
		if time.Since(said) >= 5*time.Second {
			said = time.Now()
			s.say("%s", msg)
		}
		return jobFinished(j) != "", msg, nil
	})
	s.stopKills()
	if err != nil {
		return []string{fmt.Sprintf("job %s did not finish in %s: %s", name, s.o.Duration+s.o.Settle, last)}, nil
	}
	s.say("job %s: %s (%s)", name, jobFinished(final), last)
	// The controller removes the finalizer of every pod it counted; the
	// last ones may follow the Complete condition.
	var left []corev1.Pod
	last, err = poll(ctx, s.o.Settle, func() (bool, string, error) {
		pl, err := pods.List(ctx, metav1.ListOptions{LabelSelector: sel})
		if err != nil {
			return false, err.Error(), nil
		}
		left = pl.Items
		n := len(checkFinalizers(left))
		return n == 0, fmt.Sprintf("%d of %d pods still carry %s", n, len(left), jobTrackingFinalizer), nil
	})
	var violations []string
	if err != nil {
		violations = append(violations, checkFinalizers(left)...)
	}
	// Fences: a write to the Job and to a pod after the end, each waited
	// for in its watch, so that the history holds every earlier version.
	fence := []byte(fmt.Sprintf(fenceWrite, time.Now().UnixNano()))
	j, err := jobs.Patch(ctx, name, types.MergePatchType, fence, metav1.PatchOptions{})
	if err != nil {
		return nil, fmt.Errorf("fence: %w", err)
	}
	final = j
	if err := rec.fence(ctx, 1, j.ResourceVersion, time.Minute); err != nil {
		return nil, err
	}
	if len(left) > 0 {
		p, err := pods.Patch(ctx, left[0].Name, types.MergePatchType, fence, metav1.PatchOptions{})
		if err != nil {
			return nil, fmt.Errorf("fence: %w", err)
		}
		if err := rec.fence(ctx, 0, p.ResourceVersion, time.Minute); err != nil {
			return nil, err
		}
	}
	hist, err := rec.history()
	if err != nil {
		return nil, fmt.Errorf("watch: %w", err)
	}
	vs, st := checkJob(hist, final)
	violations = append(violations, vs...)
	fmt.Fprintf(s.out, "  check: job %s counted each completion once: status.succeeded %d of %d completions, %d distinct pods succeeded (%d indexes; %d runs beyond one per index), never counted ahead of its pods (%d versions seen)\n",
		name, final.Status.Succeeded, s.o.Completions, st.succeededPods, st.indexes, st.extraRuns, len(hist))
	fmt.Fprintf(s.out, "  check: %s on none of the %d pods left\n", jobTrackingFinalizer, len(left))
	bg := metav1.DeletePropagationBackground
	if err := jobs.Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: &bg}); err != nil {
		s.say("delete job %s: %v", name, err)
	}
	return violations, nil
}

func chaosJob(name string, completions, parallelism int32, indexed bool) *batchv1.Job {
	labels := map[string]string{"chaos.podflow.io/job": name}
	mode := batchv1.NonIndexedCompletion
	if indexed {
		mode = batchv1.IndexedCompletion
	}
	backoff := int32(6)
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec: batchv1.JobSpec{
			Completions: &completions, Parallelism: &parallelism, CompletionMode: &mode, BackoffLimit: &backoff,
			Template: corev1.PodTemplateSpec{
				// The simulated runtime's containers exit 0 after 200ms.
				ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: map[string]string{"sim.podflow.io/exit-after": "200ms"}},
				Spec: corev1.PodSpec{
					RestartPolicy:                corev1.RestartPolicyNever,
					AutomountServiceAccountToken: new(false),
					Containers:                   []corev1.Container{{Name: "work", Image: "busybox"}},
				},
			},
		},
	}
}

// jobFinished is the type of the Job's finishing condition that is True
// (Complete or Failed), "" while it runs.
func jobFinished(j *batchv1.Job) batchv1.JobConditionType {
	for _, c := range j.Status.Conditions {
		if (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) && c.Status == corev1.ConditionTrue {
			return c.Type
		}
	}
	return ""
}

// jobStats are figures of a Job's history: its distinct succeeded pods
// (those that carried the tracking finalizer), the indexes they
// completed (Indexed), and successes beyond the first of an index.
type jobStats struct{ succeededPods, indexes, extraRuns int }

// checkJob replays hist (every version of one Job and its pods, in
// revision order) and returns the violations of "each completion counted
// exactly once", with final the Job as read at the end:
//   - status.succeeded never exceeds spec.completions and never decreases;
//   - at no revision does status.succeeded exceed the pods that succeeded
//     by then (distinct uids; for an Indexed Job, distinct completion
//     indexes): more is a completion counted twice;
//   - final is Complete, its status.succeeded equals spec.completions and
//     the distinct succeeded pods ever tracked (for an Indexed Job, the
//     distinct indexes, with completedIndexes naming each index once):
//     fewer is a completion lost.
func checkJob(hist []watched, final *batchv1.Job) ([]string, jobStats) {
	var v []string
	var st jobStats
	completions := int32(1)
	if final.Spec.Completions != nil {
		completions = *final.Spec.Completions
	}
	indexed := final.Spec.CompletionMode != nil && *final.Spec.CompletionMode == batchv1.IndexedCompletion
	succeeded := map[types.UID]bool{}
	tracked := map[types.UID]bool{}
	indexes := map[int]int{}
	var last int32 = -1
	flagged := map[string]bool{} // a violation once per kind and value
	once := func(key, msg string) {
		if !flagged[key] {
			flagged[key] = true
			v = append(v, msg)
		}
	}
	for _, e := range hist {
		switch o := e.obj.(type) {
		case *corev1.Pod:
			if slices.Contains(o.Finalizers, jobTrackingFinalizer) {
				tracked[o.UID] = true
			}
			if o.Status.Phase != corev1.PodSucceeded || succeeded[o.UID] || !tracked[o.UID] {
				break
			}
			succeeded[o.UID] = true
			if ix, err := strconv.Atoi(o.Annotations[batchv1.JobCompletionIndexAnnotation]); indexed && err == nil {
				indexes[ix]++
			}
		case *batchv1.Job:
			if o.UID != final.UID || e.deleted {
				break
			}
			n := o.Status.Succeeded
			if n > completions {
				once(fmt.Sprintf("over %d", n), fmt.Sprintf("revision %d: job %s counts %d succeeded, more than its %d completions", e.rv, o.Name, n, completions))
			}
			if n < last {
				once(fmt.Sprintf("down %d", n), fmt.Sprintf("revision %d: job %s's succeeded went down from %d to %d", e.rv, o.Name, last, n))
			}
			last = max(last, n)
			done := len(succeeded)
			what := "pods"
			if indexed {
				done, what = len(indexes), "indexes"
			}
			if int(n) > done {
				once(fmt.Sprintf("ahead %d", n), fmt.Sprintf("revision %d: job %s counts %d succeeded when %d %s had succeeded: a completion counted twice", e.rv, o.Name, n, done, what))
			}
		}
	}
	st.succeededPods, st.indexes = len(succeeded), len(indexes)
	for _, k := range indexes {
		st.extraRuns += k - 1
	}
	if c := jobFinished(final); c != batchv1.JobComplete {
		v = append(v, fmt.Sprintf("job %s ended %q, not Complete", final.Name, c))
	}
	if final.Status.Succeeded != completions {
		v = append(v, fmt.Sprintf("job %s ended with %d succeeded, want exactly its %d completions", final.Name, final.Status.Succeeded, completions))
	}
	if indexed {
		for ix := range indexes {
			if ix < 0 || ix >= int(completions) {
				v = append(v, fmt.Sprintf("job %s: a pod succeeded with index %d, outside 0-%d", final.Name, ix, completions-1))
			}
		}
		if int(final.Status.Succeeded) != len(indexes) {
			v = append(v, fmt.Sprintf("job %s counts %d succeeded, but %d distinct indexes succeeded", final.Name, final.Status.Succeeded, len(indexes)))
		}
		if want := indexRange(int(completions)); final.Status.CompletedIndexes != want {
			v = append(v, fmt.Sprintf("job %s's completedIndexes are %q, want %q", final.Name, final.Status.CompletedIndexes, want))
		}
	} else if int(final.Status.Succeeded) != len(succeeded) {
		v = append(v, fmt.Sprintf("job %s counts %d succeeded, but %d distinct tracked pods succeeded", final.Name, final.Status.Succeeded, len(succeeded)))
	}
	return v, st
}

// indexRange is kube's completedIndexes of indexes 0..n-1.
func indexRange(n int) string {
	switch n {
	case 0:
		return ""
	case 1:
		return "0"
	case 2:
		return "0,1"
	}
	return fmt.Sprintf("0-%d", n-1)
}

// checkFinalizers returns a violation for every pod that still carries
// the job tracking finalizer.
func checkFinalizers(pods []corev1.Pod) []string {
	var v []string
	for _, p := range pods {
		if slices.Contains(p.Finalizers, jobTrackingFinalizer) {
			v = append(v, fmt.Sprintf("pod %s (%s) still carries %s", p.Name, p.Status.Phase, jobTrackingFinalizer))
		}
	}
	return v
}
