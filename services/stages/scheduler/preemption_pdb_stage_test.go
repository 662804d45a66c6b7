package scheduler_test

import (
	"context"
	"errors"
	"testing"
	"time"

	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/manifest"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/stages/scheduler/schedsim"
)

// TestPreemptionRespectsBudgets: on a real store, two full nodes, one
// running a pod a PodDisruptionBudget (policy/v1, status.disruptionsAllowed
// 0) protects and the other a pod of higher priority no budget protects: a
// preemptor takes the unprotected pod's node, although the protected pod
// is the cheaper victim by priority (kube-scheduler's fewest budget
// violations first). The stage reads the budget from the store.
func TestPreemptionRespectsBudgets(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cfg := schedsim.DefaultConfig(t.TempDir())
	cfg.StoreNoSync = true
	env, err := schedsim.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(env.Close)
	if err := env.CreateNodes(ctx, schedsim.Nodes(2, "4", "16Gi", 110)); err != nil {
		t.Fatal(err)
	}
	pdb := &policyv1.PodDisruptionBudget{
		TypeMeta:   metav1.TypeMeta{APIVersion: "policy/v1", Kind: "PodDisruptionBudget"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "bench", Name: "db", UID: "pdb-uid"},
		Spec:       policyv1.PodDisruptionBudgetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}},
		Status:     policyv1.PodDisruptionBudgetStatus{DisruptionsAllowed: 0, CurrentHealthy: 1, DesiredHealthy: 1, ExpectedPods: 1},
	}
	stored, err := manifest.FromKube(pdb)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.Store.Create(ctx, stored.(objects.Object)); err != nil {
		t.Fatal(err)
	}
	startReplicas(t, env, 1) // its informers have listed the budget once it runs
	fin, err := env.StartFinalizer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer fin.Stop()

	guarded := schedsim.Pod("bench", "guarded", "4", "64Mi")
	guarded.Metadata.Labels = map[string]string{"app": "db"}
	guarded.Spec.Priority = ptr(int32(0))
	free := schedsim.Pod("bench", "free", "4", "64Mi")
	free.Metadata.Labels = map[string]string{"app": "web"}
	free.Spec.Priority = ptr(int32(5))
	if err := env.Submit(ctx, []*corev1.Pod{guarded, free}); err != nil {
		t.Fatal(err)
	}
	if err := env.Scheduled.Wait(ctx, 2); err != nil {
		t.Fatal(err)
	}
	get := benchPods(ctx, t, env)
	freeNode := get("free").GetSpec().GetNodeName()
	high := schedsim.Pod("bench", "high", "4", "64Mi")
	high.Spec.Priority = ptr(int32(1000))
	if err := env.Submit(ctx, []*corev1.Pod{high}); err != nil {
		t.Fatal(err)
	}
	if err := env.Scheduled.Wait(ctx, 3); err != nil {
		t.Fatal(err)
	}
	if got := get("high").GetSpec().GetNodeName(); got != freeNode {
		t.Errorf("the preemptor is bound to %q, want %q (the node of the pod no budget protects)", got, freeNode)
	}
	if g, err := objects.Get[*corev1.Pod](ctx, env.Store, "bench", "guarded"); err != nil || g.GetMetadata().GetDeletionTimestamp() != nil {
		t.Errorf("the pod its budget protects was preempted: %v %v", err, g.GetStatus().GetConditions())
	}
	waitUntil(t, "the unprotected victim gone", func() bool {
		_, err := objects.Get[*corev1.Pod](ctx, env.Store, "bench", "free")
		return errors.Is(err, raftstore.ErrNotFound)
	})
}
