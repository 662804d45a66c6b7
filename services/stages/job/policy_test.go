package job_test

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	batch "k8s.io/api/batch/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/objects"
)

func index(p *corev1.Pod) int {
	var i int
	_, _ = fmt.Sscan(p.GetMetadata().GetAnnotations()[batch.JobCompletionIndexAnnotation], &i)
	return i
}

// TestPodFailurePolicyFailJob: a pod exiting 42 matches a FailJob rule:
// the Job fails at once with reason PodFailurePolicy and kube's message,
// long before backoffLimit 6 would stop it.
func TestPodFailurePolicyFailJob(t *testing.T) {
	ctx := t.Context()
	h := newHarness(t)
	h.exitCode = func(*corev1.Pod) int32 { return 42 }
	h.replica(ctx, "r0", nil)
	h.kubelet(ctx, "ns", func(*corev1.Pod) string { return string(v1.PodFailed) })
	h.createJob(ctx, &batch.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "pfp"}, Spec: batch.JobSpec{
		Completions: ptr.To[int32](1), BackoffLimit: ptr.To[int32](6),
		PodFailurePolicy: &batch.PodFailurePolicy{Rules: []batch.PodFailurePolicyRule{
			{Action: batch.PodFailurePolicyActionIgnore, OnPodConditions: []batch.PodFailurePolicyOnPodConditionsPattern{{Type: v1.DisruptionTarget, Status: v1.ConditionTrue}}},
			{Action: batch.PodFailurePolicyActionFailJob, OnExitCodes: &batch.PodFailurePolicyOnExitCodesRequirement{Operator: batch.PodFailurePolicyOnExitCodesOpIn, Values: []int32{42}}},
		}}}})
	var j *batch.Job
	waitFor(t, "the Job to fail", time.Minute, func() bool {
		j = h.getJob(ctx, "ns", "pfp")
		return condition(j, batch.JobFailed) != nil
	})
	pods := h.pods(ctx, "ns")
	if len(pods) != 1 {
		t.Fatalf("%d pods, want 1", len(pods))
	}
	want := fmt.Sprintf("Container c for pod ns/%s failed with exit code 42 matching FailJob rule at index 1", pods[0].GetMetadata().GetName())
	for _, ct := range []batch.JobConditionType{batch.JobFailureTarget, batch.JobFailed} {
		if c := condition(j, ct); c == nil || c.Reason != batch.JobReasonPodFailurePolicy || c.Message != want {
			t.Errorf("%s: %+v; want reason PodFailurePolicy, message %q", ct, c, want)
		}
	}
	if j.Status.Failed != 1 {
		t.Errorf("failed %d, want 1", j.Status.Failed)
	}
}

// TestPodFailurePolicyIgnore: the first two pods exit 42, which an Ignore
// rule matches: with backoffLimit 0 the Job still completes, failed 0,
// and the ignored pods are let go (no finalizer left).
func TestPodFailurePolicyIgnore(t *testing.T) {
	ctx := t.Context()
	h := newHarness(t)
	h.exitCode = func(*corev1.Pod) int32 { return 42 }
	h.replica(ctx, "r0", nil)
	// The first two pods the kubelet sees fail (not "while two were
	// created": the store shows a pod before its request returns).
	fate := map[string]string{}
	h.kubelet(ctx, "ns", func(p *corev1.Pod) string {
		uid := p.GetMetadata().GetUid()
		if _, ok := fate[uid]; !ok {
			fate[uid] = string(v1.PodSucceeded)
			if len(fate) <= 2 {
				fate[uid] = string(v1.PodFailed)
			}
		}
		return fate[uid]
	})
	h.createJob(ctx, &batch.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "ign"}, Spec: batch.JobSpec{
		Completions: ptr.To[int32](1), BackoffLimit: ptr.To[int32](0),
		PodFailurePolicy: &batch.PodFailurePolicy{Rules: []batch.PodFailurePolicyRule{
			{Action: batch.PodFailurePolicyActionIgnore, OnExitCodes: &batch.PodFailurePolicyOnExitCodesRequirement{Operator: batch.PodFailurePolicyOnExitCodesOpIn, Values: []int32{42}}},
		}}}})
	var j *batch.Job
	waitFor(t, "the Job to finish", time.Minute, func() bool {
		j = h.getJob(ctx, "ns", "ign")
		return condition(j, batch.JobComplete) != nil || condition(j, batch.JobFailed) != nil
	})
	if condition(j, batch.JobComplete) == nil || j.Status.Failed != 0 || j.Status.Succeeded != 1 {
		t.Fatalf("conditions %+v failed %d succeeded %d; want Complete, 0, 1", j.Status.Conditions, j.Status.Failed, j.Status.Succeeded)
	}
	if n := h.req.count(); n != 3 {
		t.Errorf("%d pods created, want 3", n)
	}
	waitFor(t, "every finalizer removed", 10*time.Second, func() bool {
		return !slices.ContainsFunc(h.pods(ctx, "ns"), func(p *corev1.Pod) bool { return len(p.GetMetadata().GetFinalizers()) > 0 })
	})
}

// TestSuccessPolicy: an Indexed Job of 5 whose index 0 succeeds while the
// others run forever meets its successPolicy (succeededIndexes "0"):
// SuccessCriteriaMet and Complete with reason SuccessPolicy, the running
// pods deleted, completedIndexes "0".
func TestSuccessPolicy(t *testing.T) {
	for _, tc := range []struct {
		name string
		rule batch.SuccessPolicyRule
		msg  string
	}{
		{"succeededIndexes", batch.SuccessPolicyRule{SucceededIndexes: ptr.To("0")}, "Matched rules at index 1"},
		{"succeededCount", batch.SuccessPolicyRule{SucceededCount: ptr.To[int32](1)}, "Matched rules at index 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			h := newHarness(t)
			h.replica(ctx, "r0", nil)
			h.kubelet(ctx, "ns", func(p *corev1.Pod) string {
				if index(p) == 0 {
					return string(v1.PodSucceeded)
				}
				return ""
			})
			h.createJob(ctx, &batch.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "sp"}, Spec: batch.JobSpec{
				Completions: ptr.To[int32](5), Parallelism: ptr.To[int32](2), CompletionMode: ptr.To(batch.IndexedCompletion),
				SuccessPolicy: &batch.SuccessPolicy{Rules: []batch.SuccessPolicyRule{{SucceededIndexes: ptr.To("3-4")}, tc.rule}}}})
			var j *batch.Job
			waitFor(t, "the Job to complete", time.Minute, func() bool {
				j = h.getJob(ctx, "ns", "sp")
				return condition(j, batch.JobComplete) != nil
			})
			for _, ct := range []batch.JobConditionType{batch.JobSuccessCriteriaMet, batch.JobComplete} {
				if c := condition(j, ct); c == nil || c.Reason != batch.JobReasonSuccessPolicy || c.Message != tc.msg {
					t.Errorf("%s: %+v; want reason SuccessPolicy, %q", ct, c, tc.msg)
				}
			}
			if j.Status.CompletedIndexes != "0" || j.Status.Succeeded != 1 || j.Status.Active != 0 || ptr.Deref(j.Status.Terminating, -1) != 0 {
				t.Errorf("completedIndexes %q succeeded %d active %d terminating %v", j.Status.CompletedIndexes, j.Status.Succeeded, j.Status.Active, j.Status.Terminating)
			}
		})
	}
}

// TestBackoffLimitPerIndex: odd indexes fail, even succeed; with
// backoffLimitPerIndex 1 each odd index runs twice (failure counts "0"
// then "1" in its pods' annotation) and fails, the even ones complete,
// and the Job fails with reason FailedIndexes — kube's conformance case.
func TestBackoffLimitPerIndex(t *testing.T) {
	ctx := t.Context()
	h := newHarness(t)
	h.replica(ctx, "r0", nil)
	h.kubelet(ctx, "ns", func(p *corev1.Pod) string {
		if index(p)%2 == 1 {
			return string(v1.PodFailed)
		}
		return string(v1.PodSucceeded)
	})
	h.createJob(ctx, &batch.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "bpi"}, Spec: batch.JobSpec{
		Completions: ptr.To[int32](4), Parallelism: ptr.To[int32](2), CompletionMode: ptr.To(batch.IndexedCompletion),
		BackoffLimit: ptr.To[int32](math.MaxInt32), BackoffLimitPerIndex: ptr.To[int32](1)}})
	var j *batch.Job
	waitFor(t, "the Job to fail", time.Minute, func() bool {
		j = h.getJob(ctx, "ns", "bpi")
		return condition(j, batch.JobFailed) != nil
	})
	if c := condition(j, batch.JobFailed); c.Reason != batch.JobReasonFailedIndexes || c.Message != "Job has failed indexes" {
		t.Errorf("Failed: %q %q", c.Reason, c.Message)
	}
	if ptr.Deref(j.Status.FailedIndexes, "<nil>") != "1,3" || j.Status.CompletedIndexes != "0,2" || j.Status.Failed != 4 || j.Status.Succeeded != 2 {
		t.Errorf("failedIndexes %v completedIndexes %q failed %d succeeded %d; want 1,3 0,2 4 2",
			ptr.Deref(j.Status.FailedIndexes, "<nil>"), j.Status.CompletedIndexes, j.Status.Failed, j.Status.Succeeded)
	}
	counts := map[int][]string{}
	for _, p := range h.pods(ctx, "ns") {
		counts[index(p)] = append(counts[index(p)], p.GetMetadata().GetAnnotations()[batch.JobIndexFailureCountAnnotation])
	}
	for i, want := range map[int]string{0: "0", 1: "0,1", 2: "0", 3: "0,1"} {
		slices.Sort(counts[i])
		if got := strings.Join(counts[i], ","); got != want {
			t.Errorf("index %d: failure counts of its pods %q, want %q", i, got, want)
		}
	}
}

// TestMaxFailedIndexes: every pod fails; with backoffLimitPerIndex 0 and
// maxFailedIndexes 0 the first failure ends the Job
// (MaxFailedIndexesExceeded) before another index starts.
func TestMaxFailedIndexes(t *testing.T) {
	ctx := t.Context()
	h := newHarness(t)
	h.replica(ctx, "r0", nil)
	h.kubelet(ctx, "ns", func(*corev1.Pod) string { return string(v1.PodFailed) })
	h.createJob(ctx, &batch.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "mfi"}, Spec: batch.JobSpec{
		Completions: ptr.To[int32](4), Parallelism: ptr.To[int32](1), CompletionMode: ptr.To(batch.IndexedCompletion),
		BackoffLimit: ptr.To[int32](math.MaxInt32), BackoffLimitPerIndex: ptr.To[int32](0), MaxFailedIndexes: ptr.To[int32](0)}})
	var j *batch.Job
	waitFor(t, "the Job to fail", time.Minute, func() bool {
		j = h.getJob(ctx, "ns", "mfi")
		return condition(j, batch.JobFailed) != nil
	})
	if c := condition(j, batch.JobFailed); c.Reason != batch.JobReasonMaxFailedIndexesExceeded {
		t.Errorf("Failed reason %q", c.Reason)
	}
	if ptr.Deref(j.Status.FailedIndexes, "<nil>") != "0" || j.Status.Failed != 1 || h.req.count() != 1 {
		t.Errorf("failedIndexes %v failed %d created %d; want 0, 1, 1", ptr.Deref(j.Status.FailedIndexes, "<nil>"), j.Status.Failed, h.req.count())
	}
}

// TestFailIndexAction: a pod exiting 1 matches a FailIndex rule: its
// index fails at once despite backoffLimitPerIndex 1 (one pod for it).
func TestFailIndexAction(t *testing.T) {
	ctx := t.Context()
	h := newHarness(t)
	h.replica(ctx, "r0", nil)
	h.kubelet(ctx, "ns", func(p *corev1.Pod) string {
		if index(p) == 1 {
			return string(v1.PodFailed)
		}
		return string(v1.PodSucceeded)
	})
	h.createJob(ctx, &batch.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "fia"}, Spec: batch.JobSpec{
		Completions: ptr.To[int32](2), Parallelism: ptr.To[int32](2), CompletionMode: ptr.To(batch.IndexedCompletion),
		BackoffLimit: ptr.To[int32](math.MaxInt32), BackoffLimitPerIndex: ptr.To[int32](1),
		PodFailurePolicy: &batch.PodFailurePolicy{Rules: []batch.PodFailurePolicyRule{
			{Action: batch.PodFailurePolicyActionFailIndex, OnExitCodes: &batch.PodFailurePolicyOnExitCodesRequirement{Operator: batch.PodFailurePolicyOnExitCodesOpIn, Values: []int32{1}}},
		}}}})
	var j *batch.Job
	waitFor(t, "the Job to fail", time.Minute, func() bool {
		j = h.getJob(ctx, "ns", "fia")
		return condition(j, batch.JobFailed) != nil
	})
	if ptr.Deref(j.Status.FailedIndexes, "<nil>") != "1" || j.Status.CompletedIndexes != "0" || j.Status.Failed != 1 || j.Status.Succeeded != 1 || h.req.count() != 2 {
		t.Errorf("failedIndexes %v completedIndexes %q failed %d succeeded %d created %d; want 1, 0, 1, 1, 2",
			ptr.Deref(j.Status.FailedIndexes, "<nil>"), j.Status.CompletedIndexes, j.Status.Failed, j.Status.Succeeded, h.req.count())
	}
}

// TestRestartsCountUnderOnFailure: under restartPolicy OnFailure a pod
// that keeps restarting its container in place (never Failed) reaches
// backoffLimit 2 on its restarts: BackoffLimitExceeded, as kube's
// pastBackoffLimitOnFailure.
func TestRestartsCountUnderOnFailure(t *testing.T) {
	ctx := t.Context()
	h := newHarness(t)
	h.replica(ctx, "r0", nil)
	h.createJob(ctx, &batch.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "onf"}, Spec: batch.JobSpec{
		Completions: ptr.To[int32](1), BackoffLimit: ptr.To[int32](2),
		Template: v1.PodTemplateSpec{Spec: v1.PodSpec{RestartPolicy: v1.RestartPolicyOnFailure}}}})
	var name string
	waitFor(t, "the pod", 30*time.Second, func() bool {
		ps := h.pods(ctx, "ns")
		if len(ps) == 1 {
			name = ps[0].GetMetadata().GetName()
		}
		return name != ""
	})
	restart := func(n int32) {
		t.Helper()
		if _, err := objects.Mutate(ctx, h.st, "ns", name, func(p *corev1.Pod) error {
			p.Status = &corev1.PodStatus{Phase: string(v1.PodRunning), ContainerStatuses: []*corev1.ContainerStatus{{Name: "c", RestartCount: n}}}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	restart(1)
	time.Sleep(300 * time.Millisecond) // time for a wrong end
	if condition(h.getJob(ctx, "ns", "onf"), batch.JobFailureTarget) != nil {
		t.Fatal("the Job failed after one restart, backoffLimit is 2")
	}
	restart(2)
	waitFor(t, "the Job to fail", 30*time.Second, func() bool {
		return condition(h.getJob(ctx, "ns", "onf"), batch.JobFailureTarget) != nil
	})
	j := h.getJob(ctx, "ns", "onf")
	if c := condition(j, batch.JobFailureTarget); c.Reason != batch.JobReasonBackoffLimitExceeded {
		t.Errorf("FailureTarget reason %q", c.Reason)
	}
}

// TestReplacementTakesANewName: the pod of index 0 disappears while it
// runs (deleted, as an eviction ends); its replacement gets a name of its
// own, as kube's generateName gives, not the name of the pod it replaces:
// clients (kube's e2e) wait for an evicted pod's name to be gone.
func TestReplacementTakesANewName(t *testing.T) {
	ctx := t.Context()
	h := newHarness(t)
	h.replica(ctx, "r0", nil)
	h.kubelet(ctx, "ns", func(p *corev1.Pod) string {
		if h.req.count() < 2 {
			return "" // the first pod runs until deleted
		}
		return string(v1.PodSucceeded)
	})
	h.createJob(ctx, &batch.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "evict"}, Spec: batch.JobSpec{
		Completions: ptr.To[int32](1), BackoffLimit: ptr.To[int32](3), CompletionMode: ptr.To(batch.IndexedCompletion)}})
	var first string
	waitFor(t, "the first pod", 30*time.Second, func() bool {
		ps := h.pods(ctx, "ns")
		if len(ps) == 1 {
			first = ps[0].GetMetadata().GetName()
		}
		return first != ""
	})
	if _, err := h.st.Delete(ctx, objects.Pods, "ns", first, 0); err != nil {
		t.Fatal(err)
	}
	// The replacement is the pod not being deleted: the first may still be
	// listed, held for the Job's tracking finalizer.
	var second *corev1.Pod
	waitFor(t, "the replacement pod", 30*time.Second, func() bool {
		for _, p := range h.pods(ctx, "ns") {
			if p.GetMetadata().GetDeletionTimestamp() == nil {
				second = p
			}
		}
		return h.req.count() >= 2 && second != nil
	})
	if name := second.GetMetadata().GetName(); name == first || index(second) != 0 {
		t.Fatalf("replacement %q of %q: want a new name for index 0", name, first)
	}
	waitFor(t, "the Job to complete", 30*time.Second, func() bool {
		return condition(h.getJob(ctx, "ns", "evict"), batch.JobComplete) != nil
	})
}
