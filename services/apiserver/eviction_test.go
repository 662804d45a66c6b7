package apiserver_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"
	k8scorev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	policyv1beta1 "k8s.io/api/policy/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/podrules"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/objects"
)

// evictionFixture is a system with client-go clients for the admin and
// alice, and helpers that stand in for a node (pods Running and Ready)
// and for the disruption controller (a budget's status).
type evictionFixture struct {
	t     *testing.T
	s     *system
	admin kubernetes.Interface
	alice kubernetes.Interface
	ctx   context.Context
}

func newEvictionFixture(t *testing.T) *evictionFixture {
	s := startSystem(t, options{})
	mk := func(token string) kubernetes.Interface {
		cs, err := kubernetes.NewForConfig(&rest.Config{Host: s.url, BearerToken: token, TLSClientConfig: rest.TLSClientConfig{CAData: s.ca.CertPEM}})
		if err != nil {
			t.Fatal(err)
		}
		return cs
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return &evictionFixture{t: t, s: s, admin: mk(adminToken), alice: mk(aliceToken), ctx: ctx}
}

// pod creates pod name labelled app=web, in phase (Running pods Ready
// unless notReady).
func (f *evictionFixture) pod(name, phase string, ready bool) {
	f.t.Helper()
	p := &k8scorev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": "web"}},
		Spec: k8scorev1.PodSpec{Containers: []k8scorev1.Container{{Name: "c", Image: "busybox"}}}}
	if _, err := f.admin.CoreV1().Pods("default").Create(f.ctx, p, metav1.CreateOptions{}); err != nil {
		f.t.Fatal(err)
	}
	if _, err := objects.Mutate(f.ctx, f.s.store, "default", name, func(p *corev1.Pod) error {
		if p.Status == nil {
			p.Status = &corev1.PodStatus{}
		}
		p.Status.Phase = phase
		if phase == "Running" {
			p.Spec.NodeName = "n1" // bound: its deletion waits for the node
		}
		status := podrules.ConditionFalse
		if ready {
			status = podrules.ConditionTrue
		}
		podrules.MarkPodCondition(p.Status, podrules.PodReady, status, "", "", timestamppb.Now())
		return nil
	}); err != nil {
		f.t.Fatal(err)
	}
}

// budget creates PodDisruptionBudget name over app=web with minAvailable
// 1 and the status the disruption controller would write for healthy
// Ready pods of expected.
func (f *evictionFixture) budget(name string, healthy, expected int32, policy *policyv1.UnhealthyPodEvictionPolicyType) {
	f.t.Helper()
	one := intstr.FromInt32(1)
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: &one, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			UnhealthyPodEvictionPolicy: policy}}
	pdb, err := f.admin.PolicyV1().PodDisruptionBudgets("default").Create(f.ctx, pdb, metav1.CreateOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	allowed := max(healthy-1, 0)
	pdb.Status = policyv1.PodDisruptionBudgetStatus{ObservedGeneration: pdb.Generation, CurrentHealthy: healthy, DesiredHealthy: 1,
		ExpectedPods: expected, DisruptionsAllowed: allowed}
	cond := metav1.Condition{Type: policyv1.DisruptionAllowedCondition, Status: metav1.ConditionTrue, Reason: policyv1.SufficientPodsReason,
		LastTransitionTime: metav1.Now()}
	if allowed == 0 {
		cond.Status, cond.Reason = metav1.ConditionFalse, policyv1.InsufficientPodsReason
	}
	pdb.Status.Conditions = []metav1.Condition{cond}
	if _, err := f.admin.PolicyV1().PodDisruptionBudgets("default").UpdateStatus(f.ctx, pdb, metav1.UpdateOptions{}); err != nil {
		f.t.Fatal(err)
	}
}

func (f *evictionFixture) getBudget(name string) *policyv1.PodDisruptionBudget {
	f.t.Helper()
	pdb, err := f.admin.PolicyV1().PodDisruptionBudgets("default").Get(f.ctx, name, metav1.GetOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	return pdb
}

func (f *evictionFixture) evict(cs kubernetes.Interface, name string, opts *metav1.DeleteOptions) error {
	return cs.PolicyV1().Evictions("default").Evict(f.ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}, DeleteOptions: opts})
}

// gone reports whether pod name is deleted or being deleted.
func (f *evictionFixture) gone(name string) bool {
	f.t.Helper()
	p, err := objects.Get[*corev1.Pod](f.ctx, f.s.store, "default", name)
	if errors.Is(err, raftstore.ErrNotFound) {
		return true
	}
	if err != nil {
		f.t.Fatal(err)
	}
	return p.GetMetadata().GetDeletionTimestamp() != nil
}

// wantTooManyRequests checks err is kube's 429 for a budget with the
// cause message want.
func wantTooManyRequests(t *testing.T, err error, want string) {
	t.Helper()
	var se *apierrors.StatusError
	if !errors.As(err, &se) || se.ErrStatus.Code != http.StatusTooManyRequests || se.ErrStatus.Reason != metav1.StatusReasonTooManyRequests {
		t.Fatalf("eviction: got %v, want 429 TooManyRequests", err)
	}
	if se.ErrStatus.Message != "Cannot evict pod as it would violate the pod's disruption budget." {
		t.Errorf("message %q", se.ErrStatus.Message)
	}
	if d := se.ErrStatus.Details; d == nil || len(d.Causes) != 1 || d.Causes[0].Type != policyv1.DisruptionBudgetCause || d.Causes[0].Message != want {
		t.Errorf("causes %+v, want one %s cause %q", se.ErrStatus.Details, policyv1.DisruptionBudgetCause, want)
	}
}

// TestEvictionSpendsTheBudget: an eviction covered by a budget that
// allows one disruption deletes the pod gracefully with the
// DisruptionTarget condition, spends the disruption and records the pod
// in disruptedPods; the next eviction is refused with kube's 429.
func TestEvictionSpendsTheBudget(t *testing.T) {
	t.Parallel()
	f := newEvictionFixture(t)
	f.pod("web-1", "Running", true)
	f.pod("web-2", "Running", true)
	f.budget("web", 2, 2, nil)

	// Dry run: decided, nothing written.
	if err := f.evict(f.admin, "web-1", &metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
		t.Fatalf("dry-run eviction: %v", err)
	}
	if f.gone("web-1") || f.getBudget("web").Status.DisruptionsAllowed != 1 {
		t.Fatal("a dry-run eviction changed the pod or the budget")
	}

	if err := f.evict(f.admin, "web-1", nil); err != nil {
		t.Fatalf("eviction allowed by the budget: %v", err)
	}
	if !f.gone("web-1") {
		t.Fatal("web-1 was not deleted")
	}
	p, err := objects.Get[*corev1.Pod](f.ctx, f.s.store, "default", "web-1")
	if err != nil {
		t.Fatal(err)
	}
	if c := podrules.PodCondition(p.GetStatus(), "DisruptionTarget"); c.GetStatus() != podrules.ConditionTrue || c.GetReason() != "EvictionByEvictionAPI" ||
		c.GetMessage() != "Eviction API: evicting" {
		t.Errorf("web-1's DisruptionTarget condition %v", c)
	}
	if g := p.GetMetadata().GetDeletionGracePeriodSeconds(); g != 30 {
		t.Errorf("deletionGracePeriodSeconds %d, want the default 30", g)
	}
	pdb := f.getBudget("web")
	if pdb.Status.DisruptionsAllowed != 0 {
		t.Errorf("disruptionsAllowed %d after the eviction, want 0", pdb.Status.DisruptionsAllowed)
	}
	if _, ok := pdb.Status.DisruptedPods["web-1"]; !ok || len(pdb.Status.DisruptedPods) != 1 {
		t.Errorf("disruptedPods %v, want web-1", pdb.Status.DisruptedPods)
	}
	if c := findCondition(pdb.Status.Conditions, policyv1.DisruptionAllowedCondition); c == nil || c.Status != metav1.ConditionFalse || c.Reason != policyv1.InsufficientPodsReason {
		t.Errorf("DisruptionAllowed condition %+v, want False InsufficientPods", c)
	}

	err = f.evict(f.admin, "web-2", nil)
	wantTooManyRequests(t, err, "The disruption budget web does not allow evicting pods currently")
	if f.gone("web-2") {
		t.Fatal("web-2 was deleted although the budget allows no disruption")
	}
}

func findCondition(cs []metav1.Condition, typ string) *metav1.Condition {
	for i := range cs {
		if cs[i].Type == typ {
			return &cs[i]
		}
	}
	return nil
}

// TestEvictionRefusals: what kube-apiserver refuses, refused the same way.
func TestEvictionRefusals(t *testing.T) {
	t.Parallel()
	f := newEvictionFixture(t)
	f.pod("web-1", "Running", true)
	f.pod("web-2", "Running", true)
	f.budget("web", 1, 2, nil) // 1 healthy of desired 1: no disruption

	t.Run("budget exhausted", func(t *testing.T) {
		wantTooManyRequests(t, f.evict(f.admin, "web-1", nil), "The disruption budget web needs 1 healthy pods and has 1 currently")
		if f.gone("web-1") {
			t.Fatal("web-1 deleted")
		}
	})
	t.Run("v1beta1 too", func(t *testing.T) {
		err := f.admin.PolicyV1beta1().Evictions("default").Evict(f.ctx, &policyv1beta1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: "web-1", Namespace: "default"}})
		wantTooManyRequests(t, err, "The disruption budget web needs 1 healthy pods and has 1 currently")
	})
	t.Run("no RBAC on pods/eviction", func(t *testing.T) {
		err := f.evict(f.alice, "web-1", nil)
		if !apierrors.IsForbidden(err) {
			t.Fatalf("alice's eviction: %v, want 403", err)
		}
	})
	t.Run("name mismatch", func(t *testing.T) {
		err := f.admin.CoreV1().RESTClient().Post().Namespace("default").Resource("pods").Name("web-1").SubResource("eviction").
			Body([]byte(`{"apiVersion":"policy/v1","kind":"Eviction","metadata":{"name":"web-2"}}`)).SetHeader("Content-Type", "application/json").Do(f.ctx).Error()
		if !apierrors.IsBadRequest(err) || !strings.Contains(err.Error(), "name in URL does not match name in Eviction object") {
			t.Fatalf("got %v, want 400 name mismatch", err)
		}
	})
	t.Run("stale resourceVersion precondition", func(t *testing.T) {
		f.pod("pending", "Pending", false)
		stale := "1"
		err := f.evict(f.admin, "pending", &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &stale}})
		if !apierrors.IsConflict(err) {
			t.Fatalf("got %v, want 409", err)
		}
		if f.gone("pending") {
			t.Fatal("deleted despite a failed precondition")
		}
	})
	t.Run("missing pod", func(t *testing.T) {
		if err := f.evict(f.admin, "nope", nil); !apierrors.IsNotFound(err) {
			t.Fatalf("got %v, want 404", err)
		}
	})
	t.Run("two budgets", func(t *testing.T) {
		f.budget("web-too", 2, 2, nil)
		defer func() {
			_ = f.admin.PolicyV1().PodDisruptionBudgets("default").Delete(f.ctx, "web-too", metav1.DeleteOptions{})
		}()
		err := f.evict(f.admin, "web-1", nil)
		var se *apierrors.StatusError
		if !errors.As(err, &se) || se.ErrStatus.Code != 500 ||
			se.ErrStatus.Message != "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support." {
			t.Fatalf("got %v, want kube's 500 for two budgets", err)
		}
	})
}

// TestEvictionOfPodsNoDisruption: a Pending pod is evicted whatever the
// budget; a not Ready pod as unhealthyPodEvictionPolicy says.
func TestEvictionOfPodsNoDisruption(t *testing.T) {
	t.Parallel()
	f := newEvictionFixture(t)
	f.pod("pending", "Pending", false)
	f.pod("unready", "Running", false)
	f.pod("ready", "Running", true)
	f.budget("web", 1, 3, nil) // IfHealthyBudget: 1 healthy, desired 1

	if err := f.evict(f.admin, "pending", nil); err != nil || !f.gone("pending") {
		t.Fatalf("a Pending pod's eviction: %v (gone %v)", err, f.gone("pending"))
	}
	// IfHealthyBudget with currentHealthy >= desiredHealthy: the unready
	// pod goes without spending a disruption.
	five := int64(5)
	if err := f.evict(f.admin, "unready", &metav1.DeleteOptions{GracePeriodSeconds: &five}); err != nil || !f.gone("unready") {
		t.Fatalf("an unready pod's eviction under a healthy budget: %v", err)
	}
	if p, err := objects.Get[*corev1.Pod](f.ctx, f.s.store, "default", "unready"); err != nil || p.GetMetadata().GetDeletionGracePeriodSeconds() != 5 {
		t.Errorf("deleteOptions.gracePeriodSeconds 5 not honoured: %v %v", p.GetMetadata().GetDeletionGracePeriodSeconds(), err)
	}
	if got := f.getBudget("web").Status.DisruptionsAllowed; got != 0 {
		t.Errorf("disruptionsAllowed %d", got)
	}
	wantTooManyRequests(t, f.evict(f.admin, "ready", nil), "The disruption budget web needs 1 healthy pods and has 1 currently")

	// IfHealthyBudget with the budget unhealthy: refused; AlwaysAllow: evicted.
	f.pod("unready-2", "Running", false)
	pdb := f.getBudget("web")
	pdb.Status.CurrentHealthy = 0
	if _, err := f.admin.PolicyV1().PodDisruptionBudgets("default").UpdateStatus(f.ctx, pdb, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	wantTooManyRequests(t, f.evict(f.admin, "unready-2", nil), "The disruption budget web needs 1 healthy pods and has 0 currently")
	pdb = f.getBudget("web")
	always := policyv1.AlwaysAllow
	pdb.Spec.UnhealthyPodEvictionPolicy = &always
	if _, err := f.admin.PolicyV1().PodDisruptionBudgets("default").Update(f.ctx, pdb, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := f.evict(f.admin, "unready-2", nil); err != nil || !f.gone("unready-2") {
		t.Fatalf("AlwaysAllow: an unready pod's eviction: %v", err)
	}
}

// TestEvictionDiscovery: kubectl drain evicts only when discovery lists
// pods/eviction as policy's Eviction (else it deletes).
func TestEvictionDiscovery(t *testing.T) {
	t.Parallel()
	f := newEvictionFixture(t)
	l, err := f.admin.Discovery().ServerResourcesForGroupVersion("v1")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range l.APIResources {
		if r.Name == "pods/eviction" {
			if r.Kind != "Eviction" || r.Group != "policy" || r.Version != "v1" {
				t.Fatalf("pods/eviction listed as %+v", r)
			}
			return
		}
	}
	t.Fatal("discovery does not list pods/eviction")
}
