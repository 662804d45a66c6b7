package scheduler_test

import (
	"context"
	"testing"
	"time"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/podrules"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/stages/scheduler/schedsim"
)

// TestSchedulingGates: a gated pod stays Pending with PodScheduled=False,
// reason SchedulingGated, while other pods are scheduled; removing one of
// two gates changes nothing, removing the last one schedules it at once
// (not after the retry backoff).
func TestSchedulingGates(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	env := startSlowRetryEnv(ctx, t)
	if err := env.CreateNodes(ctx, []*corev1.Node{schedsim.Node("n1", "4", "16Gi", 110)}); err != nil {
		t.Fatal(err)
	}
	startReplicas(t, env, 1)
	get := benchPods(ctx, t, env)
	waitFor := func(what string, cond func() bool) { t.Helper(); waitUntil(t, what, cond) }

	gatedPod := schedsim.Pod("bench", "gated", "100m", "64Mi")
	gatedPod.Spec.SchedulingGates = []*corev1.PodSchedulingGate{{Name: "example.com/a"}, {Name: "example.com/b"}}
	free := schedsim.Pod("bench", "free", "100m", "64Mi")
	if err := env.Submit(ctx, []*corev1.Pod{gatedPod, free}); err != nil {
		t.Fatal(err)
	}
	waitFor("free bound", func() bool { return get("free").GetSpec().GetNodeName() != "" })
	waitFor("gated marked", func() bool {
		return podrules.PodCondition(get("gated").GetStatus(), "PodScheduled") != nil
	})
	c := podrules.PodCondition(get("gated").GetStatus(), "PodScheduled")
	if c.GetStatus() != "False" || c.GetReason() != "SchedulingGated" || c.GetMessage() != "Scheduling is blocked due to non-empty scheduling gates" {
		t.Errorf("PodScheduled = %s/%s %q", c.GetStatus(), c.GetReason(), c.GetMessage())
	}

	ungate := func(keep int) {
		t.Helper()
		if _, err := objects.Mutate(ctx, env.Store, "bench", "gated", func(p *corev1.Pod) error {
			p.Spec.SchedulingGates = p.Spec.SchedulingGates[:keep]
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	ungate(1)
	time.Sleep(500 * time.Millisecond) // more than the retry loop's tick
	if n := get("gated").GetSpec().GetNodeName(); n != "" {
		t.Fatalf("pod with one gate left bound to %s", n)
	}
	ungate(0)
	waitFor("gated bound once ungated", func() bool { return get("gated").GetSpec().GetNodeName() == "n1" })
	if c := podrules.PodCondition(get("gated").GetStatus(), "PodScheduled"); c.GetStatus() != "True" {
		t.Errorf("PodScheduled after the bind = %v", c)
	}
	rep, err := env.Verify(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := rep.Err(); err != nil {
		t.Error(err)
	}
}

// startSlowRetryEnv starts a store and bus whose scheduler replicas retry
// unschedulable pods only after 10 minutes, unless woken.
func startSlowRetryEnv(ctx context.Context, t *testing.T) *schedsim.Env {
	t.Helper()
	cfg := schedsim.DefaultConfig(t.TempDir())
	cfg.StoreNoSync = true
	cfg.Stage.InitialBackoff, cfg.Stage.MaxBackoff = 10*time.Minute, 10*time.Minute
	env, err := schedsim.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(env.Close)
	return env
}

// benchPods returns a getter of the stored pods of namespace bench.
func benchPods(ctx context.Context, t *testing.T, env *schedsim.Env) func(name string) *corev1.Pod {
	return func(name string) *corev1.Pod {
		t.Helper()
		p, err := objects.Get[*corev1.Pod](ctx, env.Store, "bench", name)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
}

// waitUntil polls cond until it holds, failing the test after deadline.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	end := time.Now().Add(deadline)
	for !cond() {
		if time.Now().After(end) {
			t.Fatalf("timed out after %s waiting for %s", deadline, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
