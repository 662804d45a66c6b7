package raftstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"

	"github.com/podflow/podflow/proto/storev1"
	"github.com/podflow/podflow/raftstore"
)

// TestClientAcksOnlyStoreSubjects: a watch's client acknowledges a message
// that asks for it only on one of the store's acknowledgement subjects
// (<subject>.ack.…), never on any other reply subject, so whoever may
// publish into a client's inbox cannot make it publish where it likes. A
// fake replica (a unit test: the wire protocol by hand) starts the watch
// and sends two heartbeats, one asking for an answer elsewhere.
func TestClientAcksOnlyStoreSubjects(t *testing.T) {
	_, nc := startNATS(t)
	const subject = "fake.store"
	watchReq := make(chan *storev1.WatchRequest, 1)
	if _, err := nc.Subscribe(subject+".watch", func(m *nats.Msg) {
		var req storev1.WatchRequest
		if proto.Unmarshal(m.Data, &req) == nil {
			watchReq <- &req
		}
		data, _ := proto.Marshal(&storev1.WatchResponse{Replica: "fake"})
		_ = m.Respond(data)
	}); err != nil {
		t.Fatal(err)
	}
	answers := make(chan string, 4)
	for _, s := range []string{"elsewhere.>", subject + ".ack.>"} {
		if _, err := nc.Subscribe(s, func(m *nats.Msg) { answers <- m.Subject }); err != nil {
			t.Fatal(err)
		}
	}
	c, err := raftstore.NewClient(nc, raftstore.ClientConfig{Subject: subject, WatchHeartbeatTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	w, err := c.Watch(ctx, "/registry/", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	req := <-watchReq
	for i, reply := range []string{"elsewhere.x", subject + ".ack.r.s-2"} {
		data, _ := proto.Marshal(&storev1.WatchMessage{Seq: uint64(i + 1)})
		if err := nc.PublishMsg(&nats.Msg{Subject: req.Inbox, Reply: reply, Data: data}); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case got := <-answers:
		if got != subject+".ack.r.s-2" {
			t.Fatalf("the client answered on %q", got)
		}
	case <-ctx.Done():
		t.Fatal("the client did not acknowledge the store's heartbeat")
	}
	select {
	case got := <-answers:
		t.Fatalf("the client answered on %q too", got)
	case <-time.After(200 * time.Millisecond):
	}
}
