package status

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/raftstore/raftstoretest"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/stage"
	"github.com/podflow/podflow/services/stage/stagetest"
)

// terminalFixture stores, on a real store, pod default/p (uid-p) Running
// on n1 and n1's NodeAllocation holding it and another pod, as a bind
// leaves them.
func terminalFixture(ctx context.Context, t *testing.T) stage.Env {
	t.Helper()
	cl := raftstoretest.MakeCluster(t, 1)
	env := stage.Env{Store: objects.New(cl.Client(t)), Stage: "status", Replica: "status-test", Log: slog.New(slog.DiscardHandler)}
	pod := reportPod()
	pod.Status.Phase = "Running"
	alloc := &corev1.NodeAllocation{Metadata: &corev1.ObjectMeta{Name: "n1"}, Pods: map[string]*corev1.AllocatedPod{
		"uid-p":     {Namespace: "default", Name: "p", MilliCpu: 1000},
		"uid-other": {Namespace: "default", Name: "other", MilliCpu: 500},
	}}
	if _, err := env.Store.Commit(ctx, objects.Txn{}.Put(pod).Put(alloc)); err != nil {
		t.Fatal(err)
	}
	return env
}

func newStatusStage(t *testing.T, env stage.Env) *Stage {
	t.Helper()
	s, err := NewStage(env, DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestTerminalReportReleasesAllocation: the report that makes a pod
// Succeeded or Failed releases it from its node's NodeAllocation in the
// same transaction (the record's revision is the pod's), as kubelet's
// admission and kube-scheduler count no terminal pod; the node's other
// pods stay. A report that leaves the pod running releases nothing; the
// terminal report delivered again, to this replica or to a restarted
// one, and a later report (the phase stays terminal) write nothing to the
// record: the pod is released once and never accounted again. A pod made
// terminal by another writer (pods/status) is released by the next report
// applied to it.
func TestTerminalReportReleasesAllocation(t *testing.T) {
	for _, phase := range []string{"Succeeded", "Failed"} {
		t.Run(phase, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			env := terminalFixture(ctx, t)
			s := newStatusStage(t, env)
			read := func() (*corev1.Pod, *corev1.NodeAllocation) {
				t.Helper()
				pod, err := objects.Get[*corev1.Pod](ctx, env.Store, "default", "p")
				if err != nil {
					t.Fatal(err)
				}
				alloc, err := objects.Get[*corev1.NodeAllocation](ctx, env.Store, "", "n1")
				if err != nil {
					t.Fatal(err)
				}
				return pod, alloc
			}
			handle := func(s *Stage, seq int64, phase string) {
				t.Helper()
				if err := s.Handle(ctx, stagetest.Deliver(env, reportEvent(seq, &corev1.PodStatus{Phase: phase}))); err != nil {
					t.Fatal(err)
				}
			}

			handle(s, 1, "Running")
			_, before := read()
			if _, held := before.GetPods()["uid-p"]; !held {
				t.Fatal("a running pod's report released it")
			}

			handle(s, 2, phase)
			pod, alloc := read()
			if pod.GetStatus().GetPhase() != phase {
				t.Fatalf("pod phase %q, want %q", pod.GetStatus().GetPhase(), phase)
			}
			if _, held := alloc.GetPods()["uid-p"]; held {
				t.Fatalf("NodeAllocation n1 still holds the %s pod: %v", phase, alloc.GetPods())
			}
			if _, held := alloc.GetPods()["uid-other"]; !held {
				t.Errorf("NodeAllocation n1 lost the node's other pod: %v", alloc.GetPods())
			}
			if objects.Revision(alloc) != objects.Revision(pod) {
				t.Errorf("NodeAllocation at revision %d, the terminal pod at %d: want one transaction", objects.Revision(alloc), objects.Revision(pod))
			}

			// Redelivered, to this replica and to a restarted one; then
			// a later report, which the terminal phase outlives.
			handle(s, 2, phase)
			handle(newStatusStage(t, env), 2, phase)
			if _, again := read(); objects.Revision(again) != objects.Revision(alloc) {
				t.Errorf("NodeAllocation rewritten (revision %d, was %d) by a redelivered report", objects.Revision(again), objects.Revision(alloc))
			}
			handle(newStatusStage(t, env), 3, "Running")
			later, again := read()
			if later.GetStatus().GetPhase() != phase {
				t.Errorf("pod phase %q after a later report, want %q kept", later.GetStatus().GetPhase(), phase)
			}
			if _, held := again.GetPods()["uid-p"]; held || objects.Revision(again) != objects.Revision(alloc) {
				t.Errorf("NodeAllocation at revision %d (was %d) holds %v after a later report: want it untouched", objects.Revision(again), objects.Revision(alloc), again.GetPods())
			}
		})
	}
	t.Run("terminal through pods/status", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		env := terminalFixture(ctx, t)
		if _, err := objects.Mutate(ctx, env.Store, "default", "p", func(p *corev1.Pod) error {
			p.Status.Phase = "Failed"
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if err := newStatusStage(t, env).Handle(ctx, stagetest.Deliver(env, reportEvent(1, &corev1.PodStatus{Phase: "Running"}))); err != nil {
			t.Fatal(err)
		}
		alloc, err := objects.Get[*corev1.NodeAllocation](ctx, env.Store, "", "n1")
		if err != nil {
			t.Fatal(err)
		}
		if _, held := alloc.GetPods()["uid-p"]; held {
			t.Errorf("NodeAllocation n1 still holds the Failed pod after a report was applied to it: %v", alloc.GetPods())
		}
	})
}
