package nodewire_test

import (
	"context"
	"testing"
	"time"

	"github.com/podflow/podflow/nodeagent"
	"github.com/podflow/podflow/nodeagent/nodeagenttest"
	"github.com/podflow/podflow/nodeagent/sim"
	"github.com/podflow/podflow/ops/processes/nodewire"
	corev1 "github.com/podflow/podflow/proto/corev1"
	eventsv1 "github.com/podflow/podflow/proto/eventsv1"
	"github.com/podflow/podflow/raftstore/raftstoretest"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/stage/stagetest"
	"github.com/podflow/podflow/services/stages/status"
)

// TestDeadlineExceededOnceAcrossAgentRestart: a sim node agent fails a pod
// past its activeDeadlineSeconds and is restarted before the status stage
// has applied its reports (they wait in the stream); the new agent,
// finding the pod unfinished in the store, fails it again and reports
// DeadlineExceeded again. The pod's Event DeadlineExceeded is
// recorded once (count 1), as kubelet records it once per pod, and the
// pod ends Failed with reason DeadlineExceeded.
func TestDeadlineExceededOnceAcrossAgentRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	store := objects.New(raftstoretest.MakeCluster(t, 1).Client(t))
	env, _, _ := stagetest.NewEnv("status")
	env.Store = store
	st, err := status.NewStage(env, status.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	rt, err := sim.New(sim.DefaultConfig("10.244.1.0/24"))
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	pub := nodeagenttest.NewPublisher()
	cfg := nodeagent.DefaultConfig(node, "10.244.1.0/24")
	cfg.SpecSecond = 10 * time.Millisecond
	startAgent := func() *nodeagent.Agent {
		a, err := nodeagent.New(cfg, rt, nodewire.NewStore(store), pub)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(a.Stop)
		if err := a.Start(ctx); err != nil { // adopts what is left and reconciles from the store
			t.Fatal(err)
		}
		return a
	}
	deadline := int64(1)
	pod := &corev1.Pod{
		Metadata: &corev1.ObjectMeta{Name: "deadline", Namespace: "default", Uid: "uid-deadline"},
		Spec: &corev1.PodSpec{NodeName: node, ActiveDeadlineSeconds: &deadline,
			Containers: []*corev1.Container{{Name: "app", Image: "nginx:1.27"}}},
	}
	if _, err := store.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	// applied hands the agents' reports to the status stage, in order, as
	// its runner would.
	applied := func() {
		for _, e := range pub.Pod(pod.Metadata.Uid) {
			if e.GetPodStatusReport() == nil {
				continue
			}
			if err := st.Handle(ctx, stagetest.Deliver(env, e)); err != nil {
				t.Fatal(err)
			}
		}
	}
	deadlineReports := func(envs []*eventsv1.Envelope) int {
		n := 0
		for _, e := range envs {
			for _, r := range e.GetPodStatusReport().GetEvents() {
				if r.GetReason() == eventsv1.ReasonDeadlineExceeded {
					n++
				}
			}
		}
		return n
	}
	final := func(envs []*eventsv1.Envelope) int {
		n := 0
		for _, e := range envs {
			if e.GetPodFailed().GetFinal() {
				n++
			}
		}
		return n
	}

	first := startAgent()
	if err := pub.Wait(ctx, func(envs []*eventsv1.Envelope) bool { return deadlineReports(envs) == 1 && final(envs) == 1 }); err != nil {
		t.Fatal(err)
	}
	// The agent stops before the status stage has applied its reports
	// (they wait in the stream): the store still shows the pod unfinished.
	first.Stop()
	startAgent()
	if err := pub.Wait(ctx, func(envs []*eventsv1.Envelope) bool { return deadlineReports(envs) == 2 && final(envs) == 2 }); err != nil {
		t.Fatalf("the restarted agent did not fail the pod again: %v", err)
	}
	applied()

	p, err := objects.Get[*corev1.Pod](ctx, store, "default", "deadline")
	if err != nil || p.GetStatus().GetPhase() != "Failed" || p.GetStatus().GetReason() != eventsv1.ReasonDeadlineExceeded {
		t.Fatalf("stored pod %v (%v), want Failed DeadlineExceeded", p.GetStatus(), err)
	}
	evs, _, err := objects.List[*corev1.Event](ctx, store, "default")
	if err != nil {
		t.Fatal(err)
	}
	var counts []int32
	for _, ev := range evs {
		if ev.GetReason() == eventsv1.ReasonDeadlineExceeded && ev.GetInvolvedObject().GetUid() == pod.Metadata.Uid {
			counts = append(counts, ev.GetCount())
		}
	}
	if len(counts) != 1 || counts[0] != 1 {
		t.Errorf("DeadlineExceeded Events' counts %v, want one Event of count 1", counts)
	}
}
