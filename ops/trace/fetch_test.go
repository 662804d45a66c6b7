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
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// fetch reads up to 10 messages of the events stream in one batch.
func fetch(ctx context.Context, t *testing.T, conn *bus.Conn) jetstream.MessageBatch {
	t.Helper()
	cons, err := conn.JetStream().OrderedConsumer(ctx, bus.EventsStream, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.Fetch(10, jetstream.FetchMaxWait(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	return batch
}

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
	recs, n, err := trace.Records(fetch(ctx, t, conn))
	if err != nil || n != 3 || len(recs) != 2 {
		t.Fatalf("Records = %d records of %d messages, err %v; want 2 of 3", len(recs), n, err)
	}
	for i, r := range recs {
		if r.Seq != uint64(i+1) || r.Stored.IsZero() || r.Env.GetRequestId() != []string{"a", "b"}[i] {
			t.Errorf("record %d = seq %d stored %v request %q", i, r.Seq, r.Stored, r.Env.GetRequestId())
		}
	}
}

// A node's PodStatusReport stored with its steps (PodSandboxReady,
// PodRunning inside it) reads as the report and each step, in order, each
// with its own id and time and the report's stored time and sequence; the
// timeline shows every step and says the pod is Running.
func TestRecordsUnfoldSteps(t *testing.T) {
	srv := bustest.Server(t)
	conn := bustest.Connect(t, srv, "admin")
	bustest.Provision(t, conn)
	ctx, cancel := context.WithTimeout(context.Background(), bustest.Timeout)
	defer cancel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	step := func(id string, at time.Duration, p proto.Message) *eventsv1.Envelope {
		e, _ := bus.NewEnvelope(p)
		return &eventsv1.Envelope{Id: id, Time: timestamppb.New(t0.Add(at)), Payload: e.Payload}
	}
	report, err := bus.NewEnvelope(&eventsv1.PodStatusReport{Seq: 7, Steps: []*eventsv1.Envelope{
		step("uid/u1/PodSandboxReady/g7/a1", time.Millisecond, &eventsv1.PodSandboxReady{PodIp: "10.244.0.9"}),
		step("uid/u1/PodRunning/g7/a1", 3*time.Millisecond, &eventsv1.PodRunning{PodIp: "10.244.0.9"}),
	}})
	if err != nil {
		t.Fatal(err)
	}
	report.Id, report.PodUid, report.Namespace, report.PodName, report.NodeName = "uid/u1/PodStatusReport/g7/a1", "u1", "default", "web", "n1"
	report.Stage, report.Replica, report.Generation, report.Time = "nodeagent", "n1", 7, timestamppb.New(t0.Add(4*time.Millisecond))
	if _, err := conn.Publish(ctx, report); err != nil {
		t.Fatal(err)
	}
	recs, n, err := trace.Records(fetch(ctx, t, conn))
	if err != nil || n != 1 || len(recs) != 3 {
		t.Fatalf("Records = %d records of %d messages, err %v; want 3 of 1", len(recs), n, err)
	}
	for i, want := range []string{"PodStatusReport", "PodSandboxReady", "PodRunning"} {
		r := recs[i]
		if string(r.Env.Type()) != want || r.Seq != 1 || !r.Stored.Equal(recs[0].Stored) || r.Env.GetPodUid() != "u1" || r.Env.GetNodeName() != "n1" {
			t.Errorf("record %d = %s seq %d stored %v uid %q node %q, want %s of the report's message", i, r.Env.Type(), r.Seq, r.Stored, r.Env.GetPodUid(), r.Env.GetNodeName(), want)
		}
	}
	tl := trace.Build("default", "web", recs, nil)
	if len(tl.Entries) != 3 || tl.Entries[1].Event != "PodSandboxReady" || !tl.Entries[1].Time.Equal(t0.Add(time.Millisecond)) ||
		tl.Entries[2].Event != "PodRunning" || !tl.Entries[2].Time.Equal(t0.Add(3*time.Millisecond)) || tl.Entries[2].Detail != "ip=10.244.0.9" {
		t.Errorf("timeline entries %+v, want the report, then each step at its own time", tl.Entries)
	}
	if tl.Verdict != "Running; waiting for readiness" {
		t.Errorf("verdict %q, want Running", tl.Verdict)
	}
}
