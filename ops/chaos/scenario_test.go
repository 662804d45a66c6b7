package chaos

import (
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
)

// histBuilder makes a history of object versions at increasing
// revisions, as the scenarios' watches record it.
type histBuilder struct {
	rv  int64
	evs []watched
}

func (h *histBuilder) add(obj runtime.Object) *histBuilder {
	h.rv++
	h.evs = append(h.evs, watched{rv: h.rv, obj: obj.DeepCopyObject()})
	return h
}

func (h *histBuilder) del(obj runtime.Object) *histBuilder {
	h.rv++
	h.evs = append(h.evs, watched{rv: h.rv, obj: obj.DeepCopyObject(), deleted: true})
	return h
}

func ctrl(kind, name string, uid types.UID) []metav1.OwnerReference {
	return []metav1.OwnerReference{{Kind: kind, Name: name, UID: uid, Controller: new(true)}}
}

func dep(replicas int32) *appsv1.Deployment {
	d := rolloutDeployment("web", replicas)
	d.UID = "dep-uid"
	return d
}

func rs(name string, replicas int32) *appsv1.ReplicaSet {
	return &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(name + "-uid"), OwnerReferences: ctrl("Deployment", "web", "dep-uid")},
		Spec: appsv1.ReplicaSetSpec{Replicas: &replicas}}
}

func pod(name, owner string, phase corev1.PodPhase) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(name + "-uid"), OwnerReferences: ctrl("ReplicaSet", owner, types.UID(owner+"-uid"))},
		Status: corev1.PodStatus{Phase: phase}}
}

// rollingHistory is a good rollout of a Deployment of 4 replicas
// (maxSurge 25%: 1): the old ReplicaSet at 4 pods, the new one surging to
// 1, the old one scaled down to 3 before a new pod is added.
func rollingHistory() *histBuilder {
	h := &histBuilder{}
	h.add(dep(4)).add(rs("old", 4))
	for _, n := range []string{"o1", "o2", "o3", "o4"} {
		h.add(pod(n, "old", corev1.PodRunning))
	}
	h.add(rs("new", 1)).add(pod("n1", "new", corev1.PodPending)).add(pod("n1", "new", corev1.PodRunning))
	h.add(rs("old", 3))
	// A ReplicaSet's scale down leaves a pod live until it is deleted;
	// the bound is on what the ReplicaSets ask for.
	h.add(rs("new", 2)).add(pod("n2", "new", corev1.PodRunning))
	gone := pod("o4", "old", corev1.PodRunning)
	gone.DeletionTimestamp = &metav1.Time{}
	h.add(gone).del(gone)
	return h
}

// TestCheckRollout attacks both bounds of checkRollout with histories
// that break them: the ReplicaSets asking for more than replicas +
// maxSurge, and a ReplicaSet with a pod more than it was ever asked for.
func TestCheckRollout(t *testing.T) {
	vs, st := checkRollout(rollingHistory().evs, "web")
	if len(vs) != 0 {
		t.Fatalf("a good rollout: %q", vs)
	}
	if st.maxSpecSum != 5 || st.maxLive != 6 || st.boundAtMaxLive != 5 {
		t.Errorf("stats %+v, want at most 5 asked for, 6 live (bound 5)", st)
	}

	h := rollingHistory()
	h.add(rs("new", 3)) // old 3 + new 3 = 6 > 4 + 1
	vs, _ = checkRollout(h.evs, "web")
	wantViolation(t, "surge", vs, "the ReplicaSets of deployment web ask for 6 pods, more than replicas 4 + maxSurge 1")

	h = rollingHistory()
	h.add(pod("n3", "new", corev1.PodPending)) // new asked for 2, has n1, n2 and n3
	vs, _ = checkRollout(h.evs, "web")
	wantViolation(t, "created twice", vs, "ReplicaSet new has 3 live pods with pod n3, more than it was ever asked for (2)")

	// A scale to 8 raises the bound: 8 + 2.
	h = rollingHistory()
	h.add(dep(8)).add(rs("new", 7))
	if vs, _ := checkRollout(h.evs, "web"); len(vs) != 0 {
		t.Errorf("a scale up: %q", vs)
	}
	h.add(rs("old", 4)) // 7 + 4 = 11 > 8 + 2
	vs, _ = checkRollout(h.evs, "web")
	wantViolation(t, "surge after a scale", vs, "ask for 11 pods, more than replicas 8 + maxSurge 2")

	// A pod replaced (the old one Failed) is no second pod.
	h = rollingHistory()
	h.add(pod("n2", "new", corev1.PodFailed)).add(pod("n4", "new", corev1.PodPending))
	if vs, _ := checkRollout(h.evs, "web"); len(vs) != 0 {
		t.Errorf("a replaced pod: %q", vs)
	}
}

// TestCheckOwners: a pod whose ReplicaSet is gone, a pod with no
// controller and a ReplicaSet whose Deployment is gone are orphans.
func TestCheckOwners(t *testing.T) {
	d := *dep(2)
	rss := []appsv1.ReplicaSet{*rs("new", 2)}
	pods := []corev1.Pod{*pod("a", "new", corev1.PodRunning), *pod("b", "new", corev1.PodRunning)}
	if vs := checkOwners(pods, rss, []appsv1.Deployment{d}); len(vs) != 0 {
		t.Fatalf("no orphans: %q", vs)
	}
	vs := checkOwners(append(pods, *pod("c", "old", corev1.PodRunning)), rss, []appsv1.Deployment{d})
	wantViolation(t, "owner gone", vs, "pod c is orphaned: its controller ReplicaSet old (uid old-uid) does not exist")
	free := *pod("d", "new", corev1.PodRunning)
	free.OwnerReferences = nil
	vs = checkOwners(append(pods, free), rss, []appsv1.Deployment{d})
	wantViolation(t, "no owner", vs, "pod d is orphaned: its controller (none) does not exist")
	vs = checkOwners(pods, rss, nil)
	wantViolation(t, "deployment gone", vs, "ReplicaSet new is orphaned: its controller Deployment web (uid dep-uid) does not exist")
}

// TestRolloutStatus: kubectl rollout status's verdicts.
func TestRolloutStatus(t *testing.T) {
	d := dep(3)
	d.Generation, d.Status = 2, appsv1.DeploymentStatus{ObservedGeneration: 1, Replicas: 3, UpdatedReplicas: 3, AvailableReplicas: 3}
	for _, c := range []struct {
		mutate func(*appsv1.Deployment)
		done   bool
		msg    string
	}{
		{func(d *appsv1.Deployment) {}, false, "Waiting for deployment spec update to be observed..."},
		{func(d *appsv1.Deployment) { d.Status.ObservedGeneration = 2 }, true, `deployment "web" successfully rolled out`},
		{func(d *appsv1.Deployment) { d.Status.UpdatedReplicas = 2 }, false, "2 out of 3 new replicas have been updated"},
		{func(d *appsv1.Deployment) { d.Status.Replicas = 4 }, false, "1 old replicas are pending termination"},
		{func(d *appsv1.Deployment) { d.Status.AvailableReplicas = 1 }, false, "1 of 3 updated replicas are available"},
	} {
		d := d.DeepCopy()
		d.Status.ObservedGeneration = 2
		if c.msg == "Waiting for deployment spec update to be observed..." {
			d.Status.ObservedGeneration = 1
		}
		c.mutate(d)
		done, msg, err := rolloutStatus(d)
		if err != nil || done != c.done || !strings.Contains(msg, c.msg) {
			t.Errorf("rolloutStatus = %v, %q, %v; want %v, %q", done, msg, err, c.done, c.msg)
		}
	}
	d.Status.ObservedGeneration = 2
	d.Status.Conditions = []appsv1.DeploymentCondition{{Type: appsv1.DeploymentProgressing, Reason: "ProgressDeadlineExceeded"}}
	if _, _, err := rolloutStatus(d); err == nil || err.Error() != `deployment "web" exceeded its progress deadline` {
		t.Errorf("past its deadline: %v", err)
	}
}

func job(completions int32, indexed bool, succeeded int32, complete bool) *batchv1.Job {
	j := chaosJob("batch", completions, 2, indexed)
	j.UID = "job-uid"
	j.Status.Succeeded = succeeded
	if complete {
		j.Status.Conditions = []batchv1.JobCondition{{Type: batchv1.JobComplete, Status: corev1.ConditionTrue}}
		if indexed {
			j.Status.CompletedIndexes = indexRange(int(succeeded))
		}
	}
	return j
}

func jobPod(name string, index int, phase corev1.PodPhase, tracked bool) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(name + "-uid"),
		Annotations: map[string]string{batchv1.JobCompletionIndexAnnotation: strconv.Itoa(index)}}, Status: corev1.PodStatus{Phase: phase}}
	if tracked {
		p.Finalizers = []string{jobTrackingFinalizer}
	}
	return p
}

// jobHistory is a good Job of 3 completions: each pod created with the
// tracking finalizer, Succeeded, then counted and its finalizer removed.
func jobHistory(indexed bool) *histBuilder {
	h := &histBuilder{}
	h.add(job(3, indexed, 0, false))
	for i, n := range []string{"a", "b", "c"} {
		h.add(jobPod(n, i, corev1.PodPending, true)).add(jobPod(n, i, corev1.PodSucceeded, true))
		h.add(job(3, indexed, int32(i+1), false)).add(jobPod(n, i, corev1.PodSucceeded, false))
	}
	return h
}

// TestCheckJob attacks each clause of checkJob with a history or an end
// that breaks it: a completion counted twice, one lost, succeeded above
// completions or going down, an index counted twice, a Job not Complete.
func TestCheckJob(t *testing.T) {
	for _, indexed := range []bool{false, true} {
		final := job(3, indexed, 3, true)
		if vs, st := checkJob(jobHistory(indexed).add(final).evs, final); len(vs) != 0 || st.succeededPods != 3 {
			t.Fatalf("indexed %v: a good Job: %q %+v", indexed, vs, st)
		}
		// Counted before its pod succeeded: a completion counted twice.
		h := &histBuilder{}
		h.add(job(3, indexed, 0, false)).add(jobPod("a", 0, corev1.PodSucceeded, true)).add(job(3, indexed, 2, false))
		vs, _ := checkJob(h.evs, final)
		wantViolation(t, "counted twice", vs, "counts 2 succeeded when 1")
		// Over completions and down again.
		h = jobHistory(indexed)
		h.add(job(3, indexed, 4, false)).add(job(3, indexed, 3, true))
		vs, _ = checkJob(h.evs, final)
		wantViolation(t, "over completions", vs, "counts 4 succeeded, more than its 3 completions")
		wantViolation(t, "went down", vs, "succeeded went down from 4 to 3")
		// Lost: a fourth pod succeeded and was never counted.
		h = jobHistory(indexed)
		h.add(jobPod("d", 3, corev1.PodSucceeded, true)).add(final)
		vs, _ = checkJob(h.evs, final)
		if indexed {
			wantViolation(t, "index out of range", vs, "a pod succeeded with index 3, outside 0-2")
		} else {
			wantViolation(t, "lost", vs, "counts 3 succeeded, but 4 distinct tracked pods succeeded")
		}
		// Not Complete, and short of its completions.
		short := job(3, indexed, 2, false)
		vs, _ = checkJob(jobHistory(indexed).evs, short)
		wantViolation(t, "not complete", vs, `ended "", not Complete`)
		wantViolation(t, "short", vs, "ended with 2 succeeded, want exactly its 3 completions")
	}
	// Indexed: index 1 run twice and counted twice, index 2 never run.
	h := &histBuilder{}
	h.add(job(3, true, 0, false))
	for _, p := range []struct {
		name string
		ix   int
	}{{"a", 0}, {"b", 1}, {"b2", 1}} {
		h.add(jobPod(p.name, p.ix, corev1.PodSucceeded, true))
	}
	final := job(3, true, 3, true)
	vs, st := checkJob(h.add(final).evs, final)
	wantViolation(t, "index twice", vs, "counts 3 succeeded when 2 indexes had succeeded")
	wantViolation(t, "index twice at the end", vs, "counts 3 succeeded, but 2 distinct indexes succeeded")
	if st.extraRuns != 1 {
		t.Errorf("extra runs %d, want 1", st.extraRuns)
	}
	final.Status.CompletedIndexes = "0,1"
	vs, _ = checkJob(h.evs, final)
	wantViolation(t, "completedIndexes", vs, `completedIndexes are "0,1", want "0-2"`)
	// A pod without the tracking finalizer is not counted.
	h = &histBuilder{}
	h.add(job(1, false, 0, false)).add(jobPod("x", -1, corev1.PodSucceeded, false)).add(job(1, false, 1, false))
	vs, _ = checkJob(h.evs, job(1, false, 1, true))
	wantViolation(t, "untracked", vs, "counts 1 succeeded when 0 pods had succeeded")
}

// TestCheckFinalizers: a pod left with the tracking finalizer is named.
func TestCheckFinalizers(t *testing.T) {
	pods := []corev1.Pod{*jobPod("a", 0, corev1.PodSucceeded, false)}
	if vs := checkFinalizers(pods); len(vs) != 0 {
		t.Fatalf("no finalizer: %q", vs)
	}
	vs := checkFinalizers(append(pods, *jobPod("b", 1, corev1.PodSucceeded, true)))
	wantViolation(t, "finalizer left", vs, "pod b (Succeeded) still carries batch.kubernetes.io/job-tracking")
}
