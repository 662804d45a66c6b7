package nodewire_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/bus/bustest"
	"github.com/podflow/podflow/nodeagent"
	"github.com/podflow/podflow/nodeagent/sim"
	"github.com/podflow/podflow/ops/processes/nodewire"
	corev1 "github.com/podflow/podflow/proto/corev1"
	eventsv1 "github.com/podflow/podflow/proto/eventsv1"
	"github.com/podflow/podflow/raftstore/raftstoretest"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/pipeline"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const node = "node-1"

// streamEvents reads every envelope about uid from the events stream.
func streamEvents(ctx context.Context, t *testing.T, js jetstream.JetStream, uid string) []*eventsv1.Envelope {
	t.Helper()
	s, err := js.Stream(ctx, bus.EventsStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []*eventsv1.Envelope
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && seq > 0; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		envs, err := bus.DecodeEvents(m.Data) // a report's steps are events too
		if err != nil {
			t.Fatal(err)
		}
		if envs[0].GetPodUid() == uid {
			out = append(out, envs...)
		}
	}
	return out
}

// startSimAgent starts an agent of cfg with the sim runtime over store and
// conn; both are stopped when the test ends.
func startSimAgent(ctx context.Context, t *testing.T, cfg nodeagent.Config, store *objects.Store, conn *bus.Conn) (*nodeagent.Agent, *sim.Runtime) {
	t.Helper()
	rt, err := sim.New(sim.DefaultConfig(cfg.PodCIDR))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rt.Close)
	agent, err := nodeagent.New(cfg, rt, nodewire.NewStore(store), nodewire.NewPublisher(conn))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(agent.Stop)
	if err := agent.Start(ctx); err != nil {
		t.Fatal(err)
	}
	return agent, rt
}

func count(envs []*eventsv1.Envelope, typ eventsv1.Type) int {
	n := 0
	for _, e := range envs {
		if e.Type() == typ {
			n++
		}
	}
	return n
}

// TestAgentOverRealBusAndStore runs an agent with the sim runtime against an
// embedded NATS JetStream server and a raft store: PodScheduled in, status
// reports and lifecycle events out, deduplicated redelivery, deletion.
func TestAgentOverRealBusAndStore(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	srv := bustest.Server(t)
	conn := bustest.Connect(t, srv, node)
	rc := pipeline.NodeAgentRunnerConfig(node)
	rc.DrainTimeout = 2 * time.Second
	bustest.Provision(t, conn, rc.ConsumerSpec())
	cluster := raftstoretest.MakeCluster(t, 1)
	store := objects.New(cluster.Client(t))

	cfg := nodeagent.DefaultConfig(node, "10.244.1.0/24")
	cfg.SpecSecond = 10 * time.Millisecond
	cfg.NodeStatusReportFrequency = time.Nanosecond // every heartbeat reports the status
	agent, rt := startSimAgent(ctx, t, cfg, store, conn)
	if err := agent.Start(ctx); err != nil { // a restarted agent registers again
		t.Fatal(err)
	}
	if err := agent.Heartbeat(ctx); err != nil {
		t.Fatal(err)
	}
	n, err := objects.Get[*corev1.Node](ctx, store, "", node)
	if err != nil || n.GetSpec().GetPodCidr() != "10.244.1.0/24" || n.GetStatus().GetCapacity()["pods"] != "110" {
		t.Fatalf("node in store = %v, %v", n, err)
	}

	runner, err := bus.NewRunner(conn, rc, nodewire.Handler(store, agent, cfg.SpecSecond))
	if err != nil {
		t.Fatal(err)
	}
	rctx, stopRunner := context.WithCancel(ctx)
	runErr := make(chan error, 1)
	go func() { runErr <- runner.Run(rctx) }()
	defer func() {
		stopRunner()
		<-runErr
	}()

	// The scheduler's part: a bound pod in the store and PodScheduled.
	pod := &corev1.Pod{
		Metadata: &corev1.ObjectMeta{Name: "web", Namespace: "default", Uid: "uid-web"},
		Spec: &corev1.PodSpec{NodeName: node, Containers: []*corev1.Container{{Name: "app", Image: "nginx:1.27"}},
			Volumes: []*corev1.Volume{{Name: "cfg", ConfigMap: &corev1.ConfigMapVolumeSource{Name: "web-config"}}}},
	}
	if _, err := store.Create(ctx, proto.Clone(pod).(*corev1.Pod)); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Create(ctx, &corev1.ConfigMap{Metadata: &corev1.ObjectMeta{Name: "web-config", Namespace: "default"}, Data: map[string]string{"a": "b"}}); err != nil {
		t.Fatal(err)
	}
	scheduled := func() *eventsv1.Envelope {
		return &eventsv1.Envelope{PodUid: "uid-web", Namespace: "default", PodName: "web", NodeName: node,
			Stage: "scheduler", Replica: "s1", Attempt: 1, Generation: 1,
			Payload: &eventsv1.Envelope_PodScheduled{PodScheduled: &eventsv1.PodScheduled{NodeName: node}}}
	}
	for range 2 { // the second is a duplicate: same id, dropped by JetStream
		if _, err := conn.Publish(ctx, scheduled()); err != nil {
			t.Fatal(err)
		}
	}
	var envs []*eventsv1.Envelope
	bustest.Eventually(t, "PodReady in the stream", func() bool {
		envs = streamEvents(ctx, t, conn.JetStream(), "uid-web")
		return count(envs, "PodReady") == 1
	})
	var last *eventsv1.PodStatusReport
	var prev int64
	for _, e := range envs {
		if e.GetStage() != nodeagent.Stage {
			continue
		}
		// Reports carry increasing seqs; the events after a report carry
		// that report's seq.
		if r := e.GetPodStatusReport(); r != nil {
			if e.GetGeneration() <= prev {
				t.Errorf("report seq %d after %d", e.GetGeneration(), prev)
			}
			prev = e.GetGeneration()
			last = r
		} else if e.GetGeneration() != prev {
			t.Errorf("%s carries seq %d, its report %d", e.Type(), e.GetGeneration(), prev)
		}
	}
	if last.GetStatus().GetPhase() != "Running" || last.GetStatus().GetPodIp() == "" {
		t.Errorf("last report = %v", last)
	}

	// A redelivered PodScheduled (a new attempt, so not deduplicated by
	// the stream) changes nothing on the node.
	again := scheduled()
	again.Attempt = 2
	if _, err := conn.Publish(ctx, again); err != nil {
		t.Fatal(err)
	}

	// The api's part of a deletion: mark the pod terminating, then
	// PodDeleteRequested to the node.
	if _, err := objects.Mutate(ctx, store, "default", "web", func(p *corev1.Pod) error {
		p.Metadata.DeletionTimestamp = timestamppb.Now()
		p.Metadata.DeletionGracePeriodSeconds = proto.Int64(1)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	del := &eventsv1.Envelope{PodUid: "uid-web", Namespace: "default", PodName: "web", NodeName: node,
		Stage: "api", Replica: "a1", Attempt: 1, Generation: 1,
		Payload: &eventsv1.Envelope_PodDeleteRequested{PodDeleteRequested: &eventsv1.PodDeleteRequested{GracePeriodSeconds: proto.Int64(1)}}}
	if _, err := conn.Publish(ctx, del); err != nil {
		t.Fatal(err)
	}
	bustest.Eventually(t, "PodDeleted in the stream", func() bool {
		envs = streamEvents(ctx, t, conn.JetStream(), "uid-web")
		return count(envs, "PodDeleted") == 1
	})
	for _, typ := range []eventsv1.Type{"PodSandboxReady", "ContainerStarted", "PodRunning", "PodReady", "PodKilled"} {
		if n := count(envs, typ); n != 1 {
			t.Errorf("%s in the stream %d times, want 1", typ, n)
		}
	}
	if rt.IPAM().InUse() != 0 {
		t.Error("IP not released")
	}
	hb, err := conn.JetStream().Stream(ctx, bus.NodesStream)
	if err != nil {
		t.Fatal(err)
	}
	if info, err := hb.Info(ctx); err != nil || info.State.Msgs == 0 {
		t.Errorf("no heartbeat in %s: %v", bus.NodesStream, err)
	}
}
