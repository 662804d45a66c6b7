package chaos

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// runRollout is the rollout scenario: a Deployment of a tenth of
// o.ScaleTo (at least 10) created and rolled out, then a new template
// (a rollout) and, while it rolls, a scale to o.ScaleTo, all while the
// kill loop kills the deployment and replicaset controllers' replicas.
// Then the rollout must finish as `kubectl rollout status` decides it,
// and the checks run over every version of the Deployment, its
// ReplicaSets and its pods that the watches saw (checkRollout), and over
// what is left (checkOwners).
func runRollout(ctx context.Context, s *scenarioRun) ([]string, error) {
	name := fmt.Sprintf("chaos-rollout-%d", s.o.Seed%100000)
	const ns = "default"
	sel := "app=" + name
	initial := int32(max(s.o.ScaleTo/10, 10))
	pods, rss, deps := s.cs.CoreV1().Pods(ns), s.cs.AppsV1().ReplicaSets(ns), s.cs.AppsV1().Deployments(ns)
	rec, err := recordSelected(ctx, sel, pods, rss.Watch, deps.Watch)
	if err != nil {
		return nil, err
	}
	defer rec.history() //nolint:errcheck // stops the watches on an early return
	if _, err := deps.Create(ctx, rolloutDeployment(name, initial), metav1.CreateOptions{}); err != nil {
		return nil, fmt.Errorf("create deployment %s: %w", name, err)
	}
	s.say("created deployment %s with %d replicas", name, initial)
	rolledOut := func(limit time.Duration) error {
		last, err := poll(ctx, limit, func() (bool, string, error) {
			d, err := deps.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error(), nil
			}
			return rolloutStatus(d)
		})
		if err != nil {
			return fmt.Errorf("deployment %s not rolled out after %s: %s: %w", name, limit, last, err)
		}
		return nil
	}
	if err := rolledOut(s.o.Settle); err != nil {
		return nil, err
	}
	s.say("rolled out")
	patch := `{"spec":{"template":{"metadata":{"annotations":{"chaos.podflow.io/rollout":"2"}}}}}`
	if _, err := deps.Patch(ctx, name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		return nil, fmt.Errorf("roll out deployment %s: %w", name, err)
	}
	s.say("new template: rolling out")
	s.startKills()
	sleepCtx(ctx, 2*time.Second)
	scale := fmt.Sprintf(`{"spec":{"replicas":%d}}`, s.o.ScaleTo)
	if _, err := deps.Patch(ctx, name, types.StrategicMergePatchType, []byte(scale), metav1.PatchOptions{}); err != nil {
		return nil, fmt.Errorf("scale deployment %s: %w", name, err)
	}
	s.say("scaled to %d replicas during the rollout", s.o.ScaleTo)
	err = rolledOut(s.o.Duration + s.o.Settle)
	s.stopKills()
	if err != nil {
		return []string{err.Error()}, nil
	}
	s.say("rolled out")
	// What is left settles: no pod of an old ReplicaSet still live (kube
	// deletes them; rollout status counts only the ReplicaSets' status).
	var final []corev1.Pod
	var finalRS []appsv1.ReplicaSet
	var finalDep *appsv1.Deployment
	last, err := poll(ctx, s.o.Settle, func() (bool, string, error) {
		pl, err := pods.List(ctx, metav1.ListOptions{LabelSelector: sel})
		if err != nil {
			return false, err.Error(), nil
		}
		rl, err := rss.List(ctx, metav1.ListOptions{LabelSelector: sel})
		if err != nil {
			return false, err.Error(), nil
		}
		d, err := deps.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		final, finalRS, finalDep = pl.Items, rl.Items, d
		live := 0
		for i := range final {
			if livePod(&final[i]) {
				live++
			}
		}
		return live == int(*d.Spec.Replicas) && len(final) == live, fmt.Sprintf("%d pods, %d live, want %d", len(final), live, *d.Spec.Replicas), nil
	})
	if finalDep == nil {
		return nil, fmt.Errorf("deployment %s: %s", name, last)
	}
	var violations []string
	if err != nil {
		violations = append(violations, fmt.Sprintf("deployment %s: the pods did not settle in %s: %s", name, s.o.Settle, last))
	}
	// Fences: a write to a pod, a ReplicaSet and the Deployment after the
	// end, each waited for in its watch, so that the history holds every
	// earlier version.
	fence := []byte(fmt.Sprintf(fenceWrite, time.Now().UnixNano()))
	var rvs [3]string
	if len(final) > 0 {
		p, err := pods.Patch(ctx, final[0].Name, types.MergePatchType, fence, metav1.PatchOptions{})
		if err != nil {
			return nil, fmt.Errorf("fence: %w", err)
		}
		rvs[0] = p.ResourceVersion
	}
	if len(finalRS) > 0 {
		r, err := rss.Patch(ctx, finalRS[0].Name, types.MergePatchType, fence, metav1.PatchOptions{})
		if err != nil {
			return nil, fmt.Errorf("fence: %w", err)
		}
		rvs[1] = r.ResourceVersion
	}
	d, err := deps.Patch(ctx, name, types.MergePatchType, fence, metav1.PatchOptions{})
	if err != nil {
		return nil, fmt.Errorf("fence: %w", err)
	}
	rvs[2] = d.ResourceVersion
	for i, rv := range rvs {
		if rv == "" {
			continue
		}
		if err := rec.fence(ctx, i, rv, time.Minute); err != nil {
			return nil, err
		}
	}
	hist, err := rec.history()
	if err != nil {
		return nil, fmt.Errorf("watch: %w", err)
	}
	vs, st := checkRollout(hist, name)
	violations = append(violations, vs...)
	fmt.Fprintf(s.out, "  check: the ReplicaSets of %s never asked for more than replicas + maxSurge pods, and none had more live pods than it was ever asked for (%d versions seen; at most %d ReplicaSet replicas and %d live pods, the bound then %d)\n",
		name, len(hist), st.maxSpecSum, st.maxLive, st.boundAtMaxLive)
	violations = append(violations, checkOwners(final, finalRS, []appsv1.Deployment{*finalDep})...)
	fmt.Fprintf(s.out, "  check: rolled out (kubectl rollout status); %d pods left, every one live and owned by an existing ReplicaSet of an existing Deployment\n", len(final))
	if err := deps.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		s.say("delete deployment %s: %v", name, err)
	}
	return violations, nil
}

func rolloutDeployment(name string, replicas int32) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	surge, unavail := intstr.FromString("25%"), intstr.FromString("25%")
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDeployment{MaxSurge: &surge, MaxUnavailable: &unavail}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					AutomountServiceAccountToken: new(false),
					Containers:                   []corev1.Container{{Name: "app", Image: "podflow/http:1"}},
				},
			},
		},
	}
}

// rolloutStatus is `kubectl rollout status` for a Deployment
// (kubectl's DeploymentStatusViewer): done once the controller observed
// the generation and every replica is updated and available with no old
// one left; an error once the progress deadline passed.
func rolloutStatus(d *appsv1.Deployment) (done bool, msg string, err error) {
	if d.Generation > d.Status.ObservedGeneration {
		return false, "Waiting for deployment spec update to be observed...", nil
	}
	for _, c := range d.Status.Conditions {
		if c.Type == appsv1.DeploymentProgressing && c.Reason == "ProgressDeadlineExceeded" {
			return false, "", fmt.Errorf("deployment %q exceeded its progress deadline", d.Name)
		}
	}
	st := d.Status
	switch {
	case d.Spec.Replicas != nil && st.UpdatedReplicas < *d.Spec.Replicas:
		return false, fmt.Sprintf("Waiting for deployment %q rollout to finish: %d out of %d new replicas have been updated...", d.Name, st.UpdatedReplicas, *d.Spec.Replicas), nil
	case st.Replicas > st.UpdatedReplicas:
		return false, fmt.Sprintf("Waiting for deployment %q rollout to finish: %d old replicas are pending termination...", d.Name, st.Replicas-st.UpdatedReplicas), nil
	case st.AvailableReplicas < st.UpdatedReplicas:
		return false, fmt.Sprintf("Waiting for deployment %q rollout to finish: %d of %d updated replicas are available...", d.Name, st.AvailableReplicas, st.UpdatedReplicas), nil
	}
	return true, fmt.Sprintf("deployment %q successfully rolled out", d.Name), nil
}

// livePod is kube's active pod (controller.FilterActivePods, what a
// ReplicaSet's status.replicas counts): not Succeeded or Failed and not
// being deleted.
func livePod(p *corev1.Pod) bool {
	return p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed && p.DeletionTimestamp == nil
}

// maxSurge is kube's deploymentutil.MaxSurge: the surge of a
// RollingUpdate Deployment in pods (a percentage rounded up), 0 for
// Recreate.
func maxSurge(d *appsv1.Deployment) int32 {
	if d.Spec.Strategy.Type == appsv1.RecreateDeploymentStrategyType || d.Spec.Replicas == nil {
		return 0
	}
	ms := intstr.FromString("25%")
	if ru := d.Spec.Strategy.RollingUpdate; ru != nil && ru.MaxSurge != nil {
		ms = *ru.MaxSurge
	}
	v, err := intstr.GetScaledValueFromIntOrPercent(&ms, int(*d.Spec.Replicas), true)
	if err != nil {
		return 0
	}
	return int32(v)
}

// rolloutStats are figures of a rollout history: the largest sum of its
// ReplicaSets' spec.replicas, the most live pods at once and the bound
// (replicas + maxSurge) at that revision.
type rolloutStats struct{ maxSpecSum, maxLive, boundAtMaxLive int32 }

type rsState struct {
	name          string
	owner         types.UID // its controller
	spec, maxSpec int32
	live          int32
}

// checkRollout replays hist (every version of Deployment name, its
// ReplicaSets and their pods, in revision order) and returns the
// violations of the rolling update's bounds, as kube's deployment e2e
// asserts them (test/utils' waitForDeploymentCompleteMaybeCheckRolling)
// at every revision instead of at its polls:
//   - the ReplicaSets of the Deployment never ask for more than
//     spec.replicas + maxSurge pods in all (the sum of their
//     spec.replicas: the count the deployment controller surges by);
//   - no ReplicaSet ever has more live pods (not terminal, not being
//     deleted) than the most it was ever asked for: more is a pod
//     created twice.
//
// Live pods of the whole Deployment exceed replicas + maxSurge only by
// pods a ReplicaSet was scaled down from and has not deleted yet, as in
// kube.
func checkRollout(hist []watched, name string) ([]string, rolloutStats) {
	var v []string
	var st rolloutStats
	var dep *appsv1.Deployment
	rs := map[types.UID]*rsState{}
	podRS := map[types.UID]types.UID{} // live pods' ReplicaSet
	var lastSpecViolation int32 = -1
	for i, e := range hist {
		switch o := e.obj.(type) {
		case *appsv1.Deployment:
			if o.Name == name {
				if dep = o; e.deleted {
					dep = nil
				}
			}
		case *appsv1.ReplicaSet:
			r := rs[o.UID]
			if r == nil {
				r = &rsState{name: o.Name}
				rs[o.UID] = r
			}
			if ref := metav1.GetControllerOf(o); ref != nil {
				r.owner = ref.UID
			}
			r.spec = 0
			if o.Spec.Replicas != nil && !e.deleted {
				r.spec = *o.Spec.Replicas
			}
			r.maxSpec = max(r.maxSpec, r.spec)
		case *corev1.Pod:
			ref := metav1.GetControllerOf(o)
			prev, was := podRS[o.UID]
			if was {
				rs[prev].live--
				delete(podRS, o.UID)
			}
			if ref == nil || e.deleted || !livePod(o) {
				break
			}
			r := rs[ref.UID]
			if r == nil {
				v = append(v, fmt.Sprintf("revision %d: pod %s is live before its ReplicaSet %s was seen", e.rv, o.Name, ref.Name))
				r = &rsState{name: ref.Name}
				rs[ref.UID] = r
			}
			r.live++
			podRS[o.UID] = ref.UID
			if !was && r.live > r.maxSpec {
				v = append(v, fmt.Sprintf("revision %d: ReplicaSet %s has %d live pods with pod %s, more than it was ever asked for (%d): a pod created twice",
					e.rv, r.name, r.live, o.Name, r.maxSpec))
			}
		}
		if dep == nil || dep.Spec.Replicas == nil || (i+1 < len(hist) && hist[i+1].rv == e.rv) {
			continue // the state after a whole revision
		}
		bound := *dep.Spec.Replicas + maxSurge(dep)
		var specSum, live int32
		for _, r := range rs {
			if r.owner == dep.UID {
				specSum += r.spec
				live += r.live
			}
		}
		st.maxSpecSum = max(st.maxSpecSum, specSum)
		if live > st.maxLive {
			st.maxLive, st.boundAtMaxLive = live, bound
		}
		if specSum > bound && specSum != lastSpecViolation {
			v = append(v, fmt.Sprintf("revision %d: the ReplicaSets of deployment %s ask for %d pods, more than replicas %d + maxSurge %d",
				e.rv, name, specSum, *dep.Spec.Replicas, maxSurge(dep)))
		}
		if specSum > bound {
			lastSpecViolation = specSum
		} else {
			lastSpecViolation = -1
		}
	}
	return v, st
}

// checkOwners returns a violation for every pod without a controller or
// whose controller (a ReplicaSet) is not among rss, and for every
// ReplicaSet whose controller is not among deps: orphans, after the
// rollout settled.
func checkOwners(pods []corev1.Pod, rss []appsv1.ReplicaSet, deps []appsv1.Deployment) []string {
	var v []string
	rsUIDs, depUIDs := map[types.UID]bool{}, map[types.UID]bool{}
	for _, d := range deps {
		depUIDs[d.UID] = true
	}
	for _, r := range rss {
		rsUIDs[r.UID] = true
		if ref := metav1.GetControllerOf(&r); ref == nil || !depUIDs[ref.UID] {
			v = append(v, fmt.Sprintf("ReplicaSet %s is orphaned: its controller %s does not exist", r.Name, refString(ref)))
		}
	}
	for _, p := range pods {
		if ref := metav1.GetControllerOf(&p); ref == nil || !rsUIDs[ref.UID] {
			v = append(v, fmt.Sprintf("pod %s is orphaned: its controller %s does not exist", p.Name, refString(ref)))
		}
	}
	return v
}

func refString(ref *metav1.OwnerReference) string {
	if ref == nil {
		return "(none)"
	}
	return fmt.Sprintf("%s %s (uid %s)", ref.Kind, ref.Name, ref.UID)
}
