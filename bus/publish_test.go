package bus_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/bus/bustest"
	eventsv1 "github.com/podflow/podflow/proto/eventsv1"
)

func TestPublishDeduplicates(t *testing.T) {
	srv := bustest.Server(t)
	conn := bustest.Connect(t, srv, "pub")
	bustest.Provision(t, conn)
	ctx, cancel := context.WithTimeout(context.Background(), bustest.Timeout)
	defer cancel()

	env := podEvent("u1", "web.example", 3)
	env.Traceparent = bus.NewTraceparent()
	first, err := conn.Publish(ctx, env)
	if err != nil {
		t.Fatalf("publish: %v", err)
	}
	if first.Duplicate || first.Stream != bus.EventsStream {
		t.Fatalf("first publish ack %+v", first)
	}
	if env.Id != eventsv1.EventID(env) || env.Time == nil {
		t.Fatalf("publish did not fill id/time: id %q time %v", env.Id, env.Time)
	}
	// A retry of the same event — a fresh envelope from a redelivered
	// handler, with its own time and trace span — is a duplicate.
	retry := podEvent("u1", "web.example", 3)
	retry.Traceparent = bus.ChildTraceparent(env.Traceparent)
	second, err := conn.Publish(ctx, retry)
	if err != nil {
		t.Fatalf("republish: %v", err)
	}
	if !second.Duplicate || second.Sequence != first.Sequence {
		t.Fatalf("republish ack %+v, want duplicate of seq %d", second, first.Sequence)
	}
	// A new generation is a new event.
	third, err := conn.Publish(ctx, podEvent("u1", "web.example", 4))
	if err != nil || third.Duplicate {
		t.Fatalf("next generation: ack %+v, err %v", third, err)
	}

	st, err := conn.JetStream().Stream(ctx, bus.EventsStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 2 {
		t.Fatalf("stream holds %d messages, want 2", info.State.Msgs)
	}
	raw, err := st.GetMsg(ctx, first.Sequence)
	if err != nil {
		t.Fatal(err)
	}
	if raw.Subject != "podflow.pod.PodPersisted.~.default.web_example" {
		t.Fatalf("subject %q", raw.Subject)
	}
	// The message id is its only header: the type is in the subject, the
	// trace context in the envelope.
	if got := raw.Header.Get(jetstream.MsgIDHeader); got != env.Id || len(raw.Header) != 1 {
		t.Errorf("headers %v, want only %s: %s", raw.Header, jetstream.MsgIDHeader, env.Id)
	}
	got, err := bus.DecodeEnvelope(raw.Data)
	if err != nil || got.Id != env.Id || got.GetPodPersisted().GetRevision() != 3 || got.Traceparent != env.Traceparent {
		t.Fatalf("stored envelope %v, %v", got, err)
	}
}

func TestPublishAsync(t *testing.T) {
	srv := bustest.Server(t)
	conn := bustest.Connect(t, srv, "pub-async")
	bustest.Provision(t, conn)
	ctx, cancel := context.WithTimeout(context.Background(), bustest.Timeout)
	defer cancel()

	envs := podEvents(500)
	futures := make([]*bus.PubFuture, 0, len(envs))
	for _, e := range envs {
		f, err := conn.PublishAsync(e)
		if err != nil {
			t.Fatalf("publish async: %v", err)
		}
		futures = append(futures, f)
	}
	// Re-publishing half of them is deduplicated.
	for _, e := range podEvents(250) {
		if _, err := conn.PublishAsync(e); err != nil {
			t.Fatal(err)
		}
	}
	if err := conn.PublishAsyncComplete(ctx); err != nil {
		t.Fatal(err)
	}
	seqs := map[uint64]bool{}
	for _, f := range futures {
		ack, err := f.Wait(ctx)
		if err != nil {
			t.Fatalf("async ack: %v", err)
		}
		seqs[ack.Sequence] = true
	}
	st, _ := conn.JetStream().Stream(ctx, bus.EventsStream)
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(seqs) != 500 || info.State.Msgs != 500 {
		t.Fatalf("%d distinct sequences, %d stored; want 500", len(seqs), info.State.Msgs)
	}
}

func TestPublishErrors(t *testing.T) {
	srv := bustest.Server(t)
	conn := bustest.Connect(t, srv, "pub-errors")
	ctx, cancel := context.WithTimeout(context.Background(), bustest.Timeout)
	defer cancel()

	// Nothing is provisioned yet: no stream captures the subject. A
	// publish is sent again until its deadline, then fails.
	short := func() context.Context {
		c, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		t.Cleanup(cancel)
		return c
	}
	if _, err := conn.Publish(short(), podEvent("u1", "web", 1)); !errors.Is(err, bus.ErrStreamUnavailable) {
		t.Fatalf("publish without stream: %v, want ErrStreamUnavailable", err)
	}
	f, err := conn.PublishAsync(podEvent("u1", "web", 1))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Wait(short()); !errors.Is(err, bus.ErrStreamUnavailable) {
		t.Fatalf("async publish without stream: %v, want ErrStreamUnavailable", err)
	}

	bustest.Provision(t, conn)
	// Reserved request-reply prefixes are never captured by a stream.
	for _, subj := range []string{bus.APIPrefix + ".create", bus.StorePrefix + ".get"} {
		if _, err := conn.Publish(short(), podEvent("u1", "web", 1), bus.WithSubject(subj)); !errors.Is(err, bus.ErrStreamUnavailable) {
			t.Errorf("publish on %q: %v, want ErrStreamUnavailable", subj, err)
		}
	}
	// An expectation that fails is not "unavailable".
	if _, err := conn.Publish(ctx, podEvent("u2", "web", 1), bus.WithExpectStream(bus.DLQStream)); err == nil || errors.Is(err, bus.ErrStreamUnavailable) {
		t.Fatalf("publish expecting the wrong stream: %v", err)
	}
	for name, env := range map[string]*eventsv1.Envelope{
		"nil":                       nil,
		"no payload":                {PodUid: "u1"},
		"heartbeat without node":    {Payload: &eventsv1.Envelope_NodeHeartbeat{NodeHeartbeat: &eventsv1.NodeHeartbeat{}}},
		"dead letter without stage": {Payload: &eventsv1.Envelope_DeadLetter{DeadLetter: &eventsv1.DeadLetter{}}},
	} {
		if _, err := conn.Publish(ctx, env); !errors.Is(err, bus.ErrInvalid) {
			t.Errorf("%s: publish error %v, want ErrInvalid", name, err)
		}
	}
}

func TestHeartbeatsKeepHistoryPerNode(t *testing.T) {
	srv := bustest.Server(t)
	conn := bustest.Connect(t, srv, "hb")
	bustest.Provision(t, conn)
	ctx, cancel := context.WithTimeout(context.Background(), bustest.Timeout)
	defer cancel()
	history := bus.DefaultStreamsConfig().NodeHistory
	for _, node := range []string{"n1", "n2"} {
		for seq := int64(1); seq <= 3*history; seq++ {
			hb := &eventsv1.Envelope{NodeName: node, Generation: seq, Payload: &eventsv1.Envelope_NodeHeartbeat{NodeHeartbeat: &eventsv1.NodeHeartbeat{RunningPods: int32(seq)}}}
			ack, err := conn.Publish(ctx, hb)
			if err != nil || ack.Stream != bus.NodesStream {
				t.Fatalf("heartbeat: ack %+v, err %v", ack, err)
			}
		}
	}
	st, _ := conn.JetStream().Stream(ctx, bus.NodesStream)
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(bus.TypeFilter("NodeHeartbeat")))
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != uint64(2*history) || len(info.State.Subjects) != 2 {
		t.Fatalf("nodes stream holds %d messages on %v; want %d on 2 subjects", info.State.Msgs, info.State.Subjects, 2*history)
	}
	last, err := st.GetLastMsgForSubject(ctx, bus.TypeNodeFilter("NodeHeartbeat", "n2"))
	if err != nil {
		t.Fatal(err)
	}
	env, err := bus.DecodeEnvelope(last.Data)
	if err != nil || env.GetNodeHeartbeat().GetRunningPods() != int32(3*history) {
		t.Fatalf("last heartbeat of n2: %v, %v", env, err)
	}
}

func TestProvisionIsIdempotent(t *testing.T) {
	srv := bustest.Server(t)
	conn := bustest.Connect(t, srv, "prov")
	ctx, cancel := context.WithTimeout(context.Background(), bustest.Timeout)
	defer cancel()
	rc := bus.DefaultRunnerConfig("scheduler")
	rc.FilterSubjects = []string{bus.TypeFilter("PodPersisted")}
	topo := bus.Topology{Streams: bus.DefaultStreams(bus.DefaultStreamsConfig()), Consumers: []bus.ConsumerSpec{rc.ConsumerSpec()}}
	js := conn.JetStream()
	if err := bus.Provision(ctx, js, topo); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Publish(ctx, podEvent("u1", "web", 1)); err != nil {
		t.Fatal(err)
	}
	cons, err := js.Consumer(ctx, bus.EventsStream, "scheduler")
	if err != nil {
		t.Fatal(err)
	}
	// The server acks a publish once the stream holds it and tells its
	// consumers afterwards, from the stream's signal loop: wait until
	// the consumer counts the event before provisioning again.
	var before *jetstream.ConsumerInfo
	bustest.Eventually(t, "the consumer to count the published event", func() bool {
		before, err = cons.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return before.NumPending == 1
	})
	stBefore, _ := js.Stream(ctx, bus.EventsStream)
	sb, _ := stBefore.Info(ctx)

	if err := bus.Provision(ctx, js, topo); err != nil {
		t.Fatalf("second provision: %v", err)
	}
	after, err := cons.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	stAfter, _ := js.Stream(ctx, bus.EventsStream)
	sa, _ := stAfter.Info(ctx)
	if !after.Created.Equal(before.Created) || after.NumPending != 1 {
		t.Fatalf("consumer changed: created %v→%v pending %d→%d", before.Created, after.Created, before.NumPending, after.NumPending)
	}
	if !sa.Created.Equal(sb.Created) || sa.State.Msgs != 1 || sa.Config.Duplicates != sb.Config.Duplicates {
		t.Fatalf("stream changed: %+v → %+v", sb.State, sa.State)
	}
	names := map[string]bool{}
	for n := range js.StreamNames(ctx).Name() {
		names[n] = true
	}
	if len(names) != 4 || !names[bus.EventsStream] || !names[bus.NodesStream] || !names[bus.DLQStream] || !names[bus.AdvisoriesStream] {
		t.Fatalf("streams %v", names)
	}
	// Subscribing never creates anything: a runner over a missing
	// consumer fails.
	missing := bus.DefaultRunnerConfig("nobody")
	r, err := bus.NewRunner(conn, missing, func(context.Context, *bus.Delivery) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Run(ctx); !errors.Is(err, jetstream.ErrConsumerNotFound) {
		t.Fatalf("runner over a missing consumer: %v, want ErrConsumerNotFound", err)
	}
}

// TestPublishWaitsForTheStream: a publish, synchronous or not, made while
// no stream captures its subject is sent again until one does (as while a
// stream elects a leader), within its deadline; the event is stored once.
func TestPublishWaitsForTheStream(t *testing.T) {
	srv := bustest.Server(t)
	conn := bustest.Connect(t, srv, "pub-wait")
	ctx, cancel := context.WithTimeout(context.Background(), bustest.Timeout)
	defer cancel()
	f, err := conn.PublishAsync(podEvent("u2", "web", 1))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 2)
	go func() { _, err := conn.Publish(ctx, podEvent("u1", "web", 1)); done <- err }()
	go func() { _, err := f.Wait(ctx); done <- err }()
	time.Sleep(500 * time.Millisecond) // both found no stream, at least once
	bustest.Provision(t, conn)
	for range 2 {
		if err := <-done; err != nil {
			t.Fatalf("publish made before the stream existed: %v", err)
		}
	}
	st, _ := conn.JetStream().Stream(ctx, bus.EventsStream)
	if info, err := st.Info(ctx); err != nil || info.State.Msgs != 2 {
		t.Fatalf("the stream holds %v messages (%v), want 2", info.State.Msgs, err)
	}
}

// TestRequestWaitsForAResponder: a request nobody serves yet is sent again
// until a responder subscribes, within its deadline; without one by then
// it fails with no responders, not a timeout of its own.
func TestRequestWaitsForAResponder(t *testing.T) {
	srv := bustest.Server(t)
	conn := bustest.Connect(t, srv, "req-wait")
	ctx, cancel := context.WithTimeout(context.Background(), bustest.Timeout)
	defer cancel()
	short, cancelShort := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancelShort()
	if _, err := conn.Request(short, "podflow.api.test", []byte("x")); !errors.Is(err, nats.ErrNoResponders) {
		t.Fatalf("request with nobody serving: %v, want no responders", err)
	}
	got := make(chan error, 1)
	go func() {
		m, err := conn.Request(ctx, "podflow.api.test", []byte("ping"))
		if err == nil && string(m.Data) != "pong" {
			err = fmt.Errorf("answer %q", m.Data)
		}
		got <- err
	}()
	time.Sleep(500 * time.Millisecond)
	sub, err := conn.NATS().Subscribe("podflow.api.test", func(m *nats.Msg) { _ = m.Respond([]byte("pong")) })
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := <-got; err != nil {
		t.Fatalf("request made before the responder: %v", err)
	}
}
