package stage_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/bus/bustest"
	"github.com/podflow/podflow/proto/apiv1"
	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/eventsv1"
	"github.com/podflow/podflow/services/stage"
	"github.com/podflow/podflow/services/stage/stagetest"
)

func recv(t *testing.T, ch chan *nats.Msg) *nats.Msg {
	t.Helper()
	select {
	case m := <-ch:
		return m
	case <-time.After(10 * time.Second):
		t.Fatal("nothing received within 10s")
	}
	return nil
}

// TestBusPublisher: the bus Publisher stores an event on its subject with
// the id Publish filled in, and a reply reaches the requester's inbox in
// the apiv1.Response shape Reply builds.
func TestBusPublisher(t *testing.T) {
	srv := bustest.Server(t)
	conn := bustest.Connect(t, srv, "publisher-test")
	bustest.Provision(t, conn)
	env := stage.NewEnv(conn, nil, "persistence", "persistence-1", nil)

	e, err := bus.NewEnvelope(&eventsv1.PodPersisted{})
	if err != nil {
		t.Fatal(err)
	}
	e.Namespace, e.PodName, e.RequestId = "ns", "web", "r1"
	events := make(chan *nats.Msg, 1)
	sub, err := conn.NATS().ChanSubscribe(bus.Subject(e), events)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := env.Pub.Publish(ctx, e); err != nil {
		t.Fatal(err)
	}
	if e.Id != eventsv1.EventID(e) {
		t.Errorf("Publish left id %q, want eventsv1.EventID's %q", e.Id, eventsv1.EventID(e))
	}
	got := &eventsv1.Envelope{}
	if err := proto.Unmarshal(recv(t, events).Data, got); err != nil || got.GetId() != e.Id {
		t.Errorf("stored event %v (%v), want id %q", got, err, e.Id)
	}

	inbox := conn.NATS().NewInbox()
	replies := make(chan *nats.Msg, 1)
	rsub, err := conn.NATS().ChanSubscribe(inbox, replies)
	if err != nil {
		t.Fatal(err)
	}
	defer rsub.Unsubscribe()
	pod := &corev1.Pod{Metadata: &corev1.ObjectMeta{Namespace: "ns", Name: "web"}}
	if err := stage.Reply(env, inbox, stage.Success(201, "pods", "web"), pod); err != nil {
		t.Fatal(err)
	}
	fake := &stagetest.Publisher{}
	if err := stage.Reply(stage.Env{Pub: fake}, inbox, stage.Success(201, "pods", "web"), pod); err != nil {
		t.Fatal(err)
	}
	if b := recv(t, replies).Data; !proto.Equal(fake.Replies()[0].Response, decode(t, b)) {
		t.Errorf("the bus reply %v differs from the recorded one %v", decode(t, b), fake.Replies()[0].Response)
	}
	if err := stage.Reply(stage.Env{Pub: fake}, "", stage.Success(201, "pods", "web"), nil); err != nil || len(fake.Replies()) != 1 {
		t.Errorf("Reply without a reply subject sent something (%v)", err)
	}
}

func decode(t *testing.T, b []byte) *apiv1.Response {
	t.Helper()
	r := &apiv1.Response{}
	if err := proto.Unmarshal(b, r); err != nil {
		t.Fatal(err)
	}
	return r
}
