package trace_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/bus/bustest"
	"github.com/podflow/podflow/ops/trace"
	eventsv1 "github.com/podflow/podflow/proto/eventsv1"
)

// Records reads a batch fetched from the real events stream: envelopes
// become records with their stream sequence and time, a message that is
// no envelope is counted but skipped.
func TestRecords(t *testing.T) {
	srv := bustest.Server(t)
	conn := bustest.Connect(t, srv, "admin")
	bustest.Provision(t, conn)
	ctx, cancel := context.WithTimeout(context.Background(), bustest.Timeout)
	defer cancel()
	for _, id := range []string{"a", "b"} {
		env, err := bus.NewEnvelope(&eventsv1.PodAuthorized{})
		if err != nil {
			t.Fatal(err)
		}
		env.RequestId, env.PodUid, env.Namespace, env.PodName = id, "uid-"+id, "default", "web"
		if _, err := conn.Publish(ctx, env); err != nil {
			t.Fatal(err)
		}
	}
	junk, _ := bus.NewEnvelope(&eventsv1.PodAuthorized{})
	junk.RequestId, junk.PodUid, junk.Namespace, junk.PodName = "junk", "uid-junk", "default", "web"
	if _, err := conn.JetStream().Publish(ctx, bus.Subject(junk), []byte("not an envelope")); err != nil {
		t.Fatal(err)
	}
	cons, err := conn.JetStream().OrderedConsumer(ctx, bus.EventsStream, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.Fetch(10, jetstream.FetchMaxWait(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	recs, n, err := trace.Records(batch)
	if err != nil || n != 3 || len(recs) != 2 {
		t.Fatalf("Records = %d records of %d messages, err %v; want 2 of 3", len(recs), n, err)
	}
	for i, r := range recs {
		if r.Seq != uint64(i+1) || r.Stored.IsZero() || r.Env.GetRequestId() != []string{"a", "b"}[i] {
			t.Errorf("record %d = seq %d stored %v request %q", i, r.Seq, r.Stored, r.Env.GetRequestId())
		}
	}
}
