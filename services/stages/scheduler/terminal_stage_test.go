package scheduler_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/eventsv1"
	"github.com/podflow/podflow/proto/podrules"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/stage"
	"github.com/podflow/podflow/services/stage/stagetest"
	"github.com/podflow/podflow/services/stages/scheduler/schedsim"
	"github.com/podflow/podflow/services/stages/status"
)

// TestTerminalPodFreesItsNode: a pod that Succeeded or Failed holds
// nothing on its node, as in Kubernetes (kube-scheduler's pod informer
// lists no terminal pod): on a node with room for one pod — by cpu, or by
// a host port — a second pod, unschedulable while the first runs, binds
// there once the first finishes, the first not deleted, and the node's
// stored NodeAllocation then accounts for the second pod only. The
// scheduler retries an unschedulable pod only after 10 minutes here, so
// the bind is the terminal pod's update waking it.
//
// The first pod finishes through the status stage (its node's report,
// which releases it from the allocation in the same transaction) or
// through another writer (a client's pods/status write, which leaves the
// allocation as it was: the next bind releases it). In the restart case
// the scheduler replica is stopped before the first pod finishes and a
// new one started after, before the second pod comes: it learns which
// pods finished from its initial list of the store.
func TestTerminalPodFreesItsNode(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	env := startSlowRetryEnv(ctx, t)
	replica := startReplicas(t, env, 1)[0]
	senv := stage.Env{Store: env.Store, Stage: "status", Replica: "status-test", Log: slog.New(slog.DiscardHandler)}
	st, err := status.NewStage(senv, status.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	get := benchPods(ctx, t, env)
	waitFor := func(what string, cond func() bool) { t.Helper(); waitUntil(t, what, cond) }

	for i, tc := range []struct {
		name, phase string
		byPort      bool // the node has room for one pod by its host port, else by its cpu
		viaStatus   bool // finished through the status stage, else through pods/status
		restart     bool // the replica restarted while the first pod finishes
	}{
		{"Succeeded, cpu, status stage", "Succeeded", false, true, false},
		{"Failed, cpu, status stage", "Failed", false, true, false},
		{"Succeeded, host port, status stage", "Succeeded", true, true, false},
		{"Failed, host port, status stage", "Failed", true, true, false},
		{"Succeeded, cpu, pods/status", "Succeeded", false, false, false},
		{"Failed, host port, pods/status", "Failed", true, false, false},
		{"Failed, cpu, pods/status, restarted", "Failed", false, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nodeName := fmt.Sprintf("term-%d", i)
			node, cpu := schedsim.Node(nodeName, "1", "8Gi", 110), "1"
			if tc.byPort {
				node.Status.Allocatable["cpu"], node.Status.Capacity["cpu"], cpu = "8", "8", "100m"
			}
			if err := env.CreateNodes(ctx, []*corev1.Node{node}); err != nil {
				t.Fatal(err)
			}
			mk := func(name string) *corev1.Pod {
				p := schedsim.Pod("bench", fmt.Sprintf("%s-%d", name, i), cpu, "64Mi")
				p.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": nodeName}
				if tc.byPort {
					p.Spec.Containers[0].Ports = []*corev1.ContainerPort{{ContainerPort: 80, HostPort: 8080, Protocol: "TCP"}}
				}
				return p
			}
			a, b := mk("a"), mk("b")
			if err := env.Submit(ctx, []*corev1.Pod{a}); err != nil {
				t.Fatal(err)
			}
			waitFor("a bound", func() bool { return get(a.Metadata.Name).GetSpec().GetNodeName() == nodeName })
			submitB := func() {
				t.Helper()
				if err := env.Submit(ctx, []*corev1.Pod{b}); err != nil {
					t.Fatal(err)
				}
			}
			if !tc.restart {
				submitB()
				waitFor("b unschedulable beside a", func() bool {
					return podrules.PodCondition(get(b.Metadata.Name).GetStatus(), "PodScheduled").GetReason() == "Unschedulable"
				})
			}

			if tc.restart {
				if err := replica.Stop(); err != nil {
					t.Fatal(err)
				}
			}
			if tc.viaStatus {
				rep := &eventsv1.Envelope{
					Namespace: "bench", PodName: a.Metadata.Name, PodUid: a.Metadata.Uid, NodeName: nodeName,
					Stage: "nodeagent", Replica: nodeName,
					Payload: &eventsv1.Envelope_PodStatusReport{PodStatusReport: &eventsv1.PodStatusReport{Seq: 1, Status: &corev1.PodStatus{Phase: tc.phase}}},
				}
				if err := st.Handle(ctx, stagetest.Deliver(senv, rep)); err != nil {
					t.Fatal(err)
				}
			} else if _, err := objects.Mutate(ctx, env.Store, "bench", a.Metadata.Name, func(p *corev1.Pod) error {
				p.Status.Phase = tc.phase
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			if tc.restart {
				replica = startReplicas(t, env, 1)[0]
				submitB()
			}

			waitFor("b bound beside the finished a", func() bool { return get(b.Metadata.Name).GetSpec().GetNodeName() == nodeName })
			if ph := get(a.Metadata.Name).GetStatus().GetPhase(); ph != tc.phase {
				t.Errorf("a is %q, want %q", ph, tc.phase)
			}
			alloc, err := objects.Get[*corev1.NodeAllocation](ctx, env.Store, "", nodeName)
			if err != nil {
				t.Fatal(err)
			}
			if _, held := alloc.GetPods()[a.Metadata.Uid]; held || len(alloc.GetPods()) != 1 {
				t.Errorf("NodeAllocation %s accounts for %v, want b only", nodeName, alloc.GetPods())
			}
		})
	}
	rep, err := env.Verify(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := rep.Err(); err != nil {
		t.Error(err)
	}
}
