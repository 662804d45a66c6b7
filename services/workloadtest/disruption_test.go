package workloadtest

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	policy "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/podflow/podflow/proto/apiv1"
	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/controller"
	"github.com/podflow/podflow/services/manifest"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/pipeline"
	"github.com/podflow/podflow/services/stage"
	"github.com/podflow/podflow/services/stages/disruption"
)

func startDisruption(c *cluster, name string) *replica {
	return c.startController(pipeline.Disruption, name, func(env stage.Env, cfg controller.Config) (stage.Handler, error) {
		dc := disruption.DefaultConfig(name)
		dc.Controller = cfg
		return disruption.New(env, dc)
	})
}

func budget(name string, minAvailable, maxUnavailable *intstr.IntOrString) *policy.PodDisruptionBudget {
	return &policy.PodDisruptionBudget{
		TypeMeta:   metav1.TypeMeta{APIVersion: "policy/v1", Kind: "PodDisruptionBudget"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec: policy.PodDisruptionBudgetSpec{MinAvailable: minAvailable, MaxUnavailable: maxUnavailable,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}}},
	}
}

// pdbStatus is the part of a budget's status a test expects.
type pdbStatus struct {
	expected, desired, current, allowed int32
	reason                              string // of the DisruptionAllowed condition
}

func statusOf(p *policy.PodDisruptionBudget) pdbStatus {
	s := pdbStatus{p.Status.ExpectedPods, p.Status.DesiredHealthy, p.Status.CurrentHealthy, p.Status.DisruptionsAllowed, ""}
	for _, c := range p.Status.Conditions {
		if c.Type == policy.DisruptionAllowedCondition {
			s.reason = c.Reason
		}
	}
	return s
}

// waitBudget waits until budget name's status is want for its current
// generation.
func (c *cluster) waitBudget(name string, want pdbStatus) *policy.PodDisruptionBudget {
	c.t.Helper()
	var last *policy.PodDisruptionBudget
	deadline := time.Now().Add(60 * time.Second)
	for {
		p, ok := get[*policy.PodDisruptionBudget](c, objects.PodDisruptionBudgets, "default", name)
		if ok && p.Status.ObservedGeneration == p.Generation && statusOf(p) == want {
			return p
		}
		last = p
		if time.Now().After(deadline) {
			c.t.Fatalf("budget %s: status %+v, want %+v", name, statusOf(last), want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// updateBudget changes budget name's spec (f) and stores it, again on a
// conflict with the controller's status writes.
func (c *cluster) updateBudget(name string, f func(*policy.PodDisruptionBudget)) {
	c.t.Helper()
	c.updateRetry(func() runtime.Object {
		p, _ := get[*policy.PodDisruptionBudget](c, objects.PodDisruptionBudgets, "default", name)
		f(p)
		p.TypeMeta = metav1.TypeMeta{APIVersion: "policy/v1", Kind: "PodDisruptionBudget"}
		return p
	})
}

// TestDisruptionStatus: two replicas of the disruption controller keep a
// budget's status as kube computes it, over a ReplicaSet's pods, for
// integer and percentage minAvailable and maxUnavailable, as pods become
// unready, and with the evictions the Eviction subresource recorded.
func TestDisruptionStatus(t *testing.T) {
	c := newCluster(t)
	startReplicaSets(c, "rs-a")
	startDisruption(c, "pdb-a")
	startDisruption(c, "pdb-b")
	rs := c.apply("create", replicaSet("default", "web", 4, map[string]string{"app": "web"}))
	c.eventually("4 pods", 60*time.Second, func() bool { return len(c.owned("default", rs.GetMetadata().GetUid())) == 4 })

	three := intstr.FromInt32(3)
	c.apply("create", budget("web", &three, nil))
	c.waitBudget("web", pdbStatus{4, 3, 4, 1, policy.SufficientPodsReason})

	t.Run("maxUnavailable percent, from the ReplicaSet's scale", func(t *testing.T) {
		half := intstr.FromString("50%")
		c.updateBudget("web", func(p *policy.PodDisruptionBudget) { p.Spec.MinAvailable, p.Spec.MaxUnavailable = nil, &half })
		c.waitBudget("web", pdbStatus{4, 2, 4, 2, policy.SufficientPodsReason})
	})
	t.Run("minAvailable 100%", func(t *testing.T) {
		all := intstr.FromString("100%")
		c.updateBudget("web", func(p *policy.PodDisruptionBudget) { p.Spec.MinAvailable, p.Spec.MaxUnavailable = &all, nil })
		c.waitBudget("web", pdbStatus{4, 4, 4, 0, policy.InsufficientPodsReason})
	})
	pods := c.owned("default", rs.GetMetadata().GetUid())
	names := make([]string, 0, len(pods))
	for _, p := range pods {
		names = append(names, p.GetMetadata().GetName())
	}
	slices.Sort(names)
	t.Run("an unready pod is not healthy", func(t *testing.T) {
		two := intstr.FromInt32(2)
		c.updateBudget("web", func(p *policy.PodDisruptionBudget) { p.Spec.MinAvailable = &two })
		c.waitBudget("web", pdbStatus{4, 2, 4, 2, policy.SufficientPodsReason})
		c.kubelet.setReady("default", names[0], false)
		c.waitBudget("web", pdbStatus{4, 2, 3, 1, policy.SufficientPodsReason})
		c.kubelet.setReady("default", names[0], true)
		c.waitBudget("web", pdbStatus{4, 2, 4, 2, policy.SufficientPodsReason})
	})
	t.Run("disruptedPods", func(t *testing.T) {
		// An eviction approved a moment ago: its pod is not counted
		// healthy and the entry is kept. One approved long ago
		// (DeletionTimeout) whose pod was never deleted: dropped.
		p, _ := get[*policy.PodDisruptionBudget](c, objects.PodDisruptionBudgets, "default", "web")
		p.Status.DisruptedPods = map[string]metav1.Time{
			names[1]: metav1.Now(),
			names[2]: {Time: time.Now().Add(-disruption.DeletionTimeout - time.Minute)},
		}
		c.updateStatus(p)
		got := c.waitBudget("web", pdbStatus{4, 2, 3, 1, policy.SufficientPodsReason})
		if _, ok := got.Status.DisruptedPods[names[1]]; !ok || len(got.Status.DisruptedPods) != 1 {
			t.Errorf("disruptedPods %v, want only %s", got.Status.DisruptedPods, names[1])
		}
	})
}

// updateStatus stores p's status as the admin (the status subresource).
func (c *cluster) updateStatus(p *policy.PodDisruptionBudget) {
	c.t.Helper()
	p.TypeMeta = metav1.TypeMeta{APIVersion: "policy/v1", Kind: "PodDisruptionBudget"}
	m, err := manifest.FromKube(p)
	if err != nil {
		c.t.Fatal(err)
	}
	u := m.(*corev1.Unstructured)
	b, err := proto.Marshal(u)
	if err != nil {
		c.t.Fatal(err)
	}
	st, _ := c.request(&apiv1.ObjectRequest{Token: adminToken, Verb: "update", Subresource: "status", Kind: objects.PodDisruptionBudgets.Qualified(),
		Namespace: "default", Name: p.Name, Object: b})
	if st.GetCode() >= 300 || st.GetStatus() == "Failure" {
		c.t.Fatalf("update status: %d %s", st.GetCode(), st.GetMessage())
	}
}

// TestDisruptionFailSafe: a budget over no pods is processed and allows
// nothing; a percentage budget over pods whose controller has no scale
// cannot be computed; the sync fails safe (disruptionsAllowed 0,
// DisruptionAllowed False with reason SyncFailed), an integer minAvailable
// works.
func TestDisruptionFailSafe(t *testing.T) {
	c := newCluster(t)
	startDisruption(c, "pdb-a")
	// A budget over no pods is processed (observedGeneration), allowing
	// nothing.
	c.apply("create", budget("none", ptr.To(intstr.FromString("1%")), nil))
	c.waitBudget("none", pdbStatus{0, 0, 0, 0, policy.InsufficientPodsReason})
	// A pod whose controller is a kind without a scale subresource.
	c.apply("create", budget("job", ptr.To(intstr.FromString("50%")), nil))
	for i := range 2 {
		createPod(c, fmt.Sprintf("job-%d", i), map[string]string{"app": "job"},
			&corev1.OwnerReference{ApiVersion: "batch/v1", Kind: "Job", Name: "j", Uid: "job-uid", Controller: true})
	}
	c.eventually("SyncFailed", 60*time.Second, func() bool {
		p, ok := get[*policy.PodDisruptionBudget](c, objects.PodDisruptionBudgets, "default", "job")
		if !ok {
			return false
		}
		for _, cond := range p.Status.Conditions {
			if cond.Type == policy.DisruptionAllowedCondition && cond.Status == metav1.ConditionFalse && cond.Reason == policy.SyncFailedReason &&
				cond.Message == "jobs.batch does not implement the scale subresource" {
				return p.Status.DisruptionsAllowed == 0
			}
		}
		return false
	})
	c.updateBudget("job", func(p *policy.PodDisruptionBudget) { p.Spec.MinAvailable = ptr.To(intstr.FromInt32(1)) })
	c.waitBudget("job", pdbStatus{2, 1, 2, 1, policy.SufficientPodsReason})
}

// createPod stores pod name with labels and owner (the test kubelet runs
// and readies it).
func createPod(c *cluster, name string, labels map[string]string, owner *corev1.OwnerReference) {
	c.t.Helper()
	p := &corev1.Pod{Metadata: &corev1.ObjectMeta{Namespace: "default", Name: name, Uid: "uid-" + name, Labels: labels,
		OwnerReferences: []*corev1.OwnerReference{owner}},
		Spec: &corev1.PodSpec{Containers: []*corev1.Container{{Name: "app", Image: "nginx"}}}}
	if _, err := c.store.Create(context.Background(), p); err != nil {
		c.t.Fatal(err)
	}
}
