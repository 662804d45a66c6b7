package scheduler_test

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/podrules"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/stages/scheduler"
	"github.com/podflow/podflow/services/stages/scheduler/schedsim"
)

// dongle is the extended resource of the scalar race tests.
const dongle = "example.com/dongle"

// dongleEnv starts a store (3 raft replicas) and a bus, writes node-00000
// offering one dongle and node-00001 and node-00002 offering none, and
// starts n scheduler replicas.
func dongleEnv(ctx context.Context, t *testing.T, replicas int) (*schedsim.Env, []*schedsim.Replica) {
	t.Helper()
	cfg := schedsim.DefaultConfig(t.TempDir())
	cfg.StoreNoSync = true
	env, err := schedsim.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(env.Close)
	nodes := schedsim.Nodes(3, "64", "64Gi", 110)
	res := map[string]string{dongle: "1"}
	for k, v := range nodes[0].Status.Allocatable {
		res[k] = v
	}
	nodes[0].Status.Allocatable, nodes[0].Status.Capacity = res, res
	if err := env.CreateNodes(ctx, nodes); err != nil {
		t.Fatal(err)
	}
	return env, startReplicas(t, env, replicas)
}

// donglePods returns n pods pod-00000, … each requesting one dongle.
func donglePods(n int) []*corev1.Pod {
	pods := schedsim.Pods(n, "100m", "64Mi")
	for _, p := range pods {
		r := p.Spec.Containers[0].Resources
		r.Requests[dongle] = "1"
		r.Limits = map[string]string{dongle: "1"}
	}
	return pods
}

// TestReplicasRaceForTheLastUnit: three scheduler replicas on one
// consumer, 24 pods each requesting one unit of an extended resource that
// one node offers once. Exactly one pod binds; the others stay Pending
// with kube-scheduler's "Insufficient example.com/dongle"; no revision of
// the store's history overcommits the node (Verify).
func TestReplicasRaceForTheLastUnit(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	env, rs := dongleEnv(ctx, t, 3)
	const numPods = 24
	if err := env.Submit(ctx, donglePods(numPods)); err != nil {
		t.Fatal(err)
	}
	var list []*corev1.Pod
	waitUntil(t, "1 pod bound, the rest Unschedulable", func() bool {
		var err error
		if list, _, err = objects.List[*corev1.Pod](ctx, env.Store, "bench"); err != nil {
			t.Fatal(err)
		}
		settled := 0
		for _, p := range list {
			c := podrules.PodCondition(p.GetStatus(), podrules.PodScheduled)
			if p.GetSpec().GetNodeName() != "" || c.GetReason() == "Unschedulable" {
				settled++
			}
		}
		return settled == numPods
	})
	bound := 0
	for _, p := range list {
		if node := p.GetSpec().GetNodeName(); node != "" {
			bound++
			if node != "node-00000" {
				t.Errorf("pod %s bound to %s, which offers no %s", p.GetMetadata().GetName(), node, dongle)
			}
			continue
		}
		msg := podrules.PodCondition(p.GetStatus(), podrules.PodScheduled).GetMessage()
		if !strings.Contains(msg, "Insufficient "+dongle) {
			t.Errorf("pod %s Unschedulable with %q, want Insufficient %s", p.GetMetadata().GetName(), msg, dongle)
		}
	}
	if bound != 1 {
		t.Errorf("%d pods bound, want 1", bound)
	}
	rep, err := env.Verify(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := rep.Err(); err != nil {
		t.Error(err)
	}
	var conflicts int64
	for _, r := range rs {
		conflicts += r.Stage.Counters.Conflicts.Load()
	}
	t.Logf("binds %d, lost races %d", rep.Binds, conflicts)
}

// TestBindRechecksScalarResources attacks the bind transaction itself:
// two scheduler replicas bind 16 pods, each requesting one dongle, at once
// onto the node that offers one, each bind as a decision would that
// counted no dongle (a replica of a release that did not filter on it, or
// a cache that missed a pod: scheduler.BindKnowing with a decision that
// saw every revision). A bind that loses the node's allocation to the
// other replica reads it again and retries, as the stage does. The
// allocation's re-check in the same raft entry as the binding must let
// exactly one bind commit; without its scalar resources, all 16 commit and
// Verify finds the node overcommitted at every revision after the first.
func TestBindRechecksScalarResources(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	env, rs := dongleEnv(ctx, t, 2)
	const numPods = 16
	pods := donglePods(numPods)
	for _, p := range pods {
		p.Spec.SchedulerName = "pf-manual" // the test drives the binds
	}
	if err := env.CreatePods(ctx, pods); err != nil {
		t.Fatal(err)
	}
	outcomes := make([]string, numPods)
	errs := make([]error, numPods)
	var wg sync.WaitGroup
	for i, p := range pods {
		s := rs[i%len(rs)].Stage
		wg.Go(func() {
			outcomes[i], errs[i] = bindRetrying(ctx, s, p, "node-00000")
		})
	}
	wg.Wait()
	bound := 0
	for i, o := range outcomes {
		if errs[i] != nil {
			t.Fatalf("bind %s: %v", pods[i].GetMetadata().GetName(), errs[i])
		}
		if o == "bound" {
			bound++
		}
	}
	rep, err := env.Verify(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := rep.Err(); err != nil {
		t.Error(err)
	}
	if bound != 1 || rep.Binds != 1 {
		t.Errorf("%d binds committed (%d in the history) for one dongle, want 1; outcomes %v", bound, rep.Binds, outcomes)
	}
}

// bindRetrying binds pod (as stored) to node through s, a decision that
// saw every revision, refreshing the node's allocation after each lost
// race, up to 5 attempts. It returns the last outcome.
func bindRetrying(ctx context.Context, s *scheduler.Stage, pod *corev1.Pod, node string) (string, error) {
	var outcome string
	for range 5 {
		_, o, _, err := s.BindKnowing(ctx, pod, node, math.MaxInt64, nil)
		if err != nil {
			return "", err
		}
		if outcome = o; outcome != "nodeStale" {
			return outcome, nil
		}
		if err := s.Refresh(ctx, node); err != nil {
			return "", fmt.Errorf("refresh %s: %w", node, err)
		}
	}
	return outcome, nil
}
