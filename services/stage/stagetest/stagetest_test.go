package stagetest_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/eventsv1"
	"github.com/podflow/podflow/services/stage"
	"github.com/podflow/podflow/services/stage/stagetest"
)

// TestPublisher: the fake fills ids as the bus does, records copies in
// order, refuses what the bus refuses, and fails on demand.
func TestPublisher(t *testing.T) {
	env, pub, _ := stagetest.NewEnv("admission")
	ctx := context.Background()
	d := stagetest.Deliver(env, &eventsv1.Envelope{
		RequestId: "r1", Namespace: "ns", PodName: "web",
		Payload: &eventsv1.Envelope_PodAuthorized{PodAuthorized: &eventsv1.PodAuthorized{}},
	})
	next := d.Next(&eventsv1.PodAdmitted{Pod: &corev1.Pod{}})
	if err := env.Pub.Publish(ctx, next); err != nil {
		t.Fatal(err)
	}
	if next.Id != eventsv1.EventID(next) {
		t.Errorf("id %q, want eventsv1.EventID's %q", next.Id, eventsv1.EventID(next))
	}
	next.PodName = "changed-after-publish"
	if got := pub.Events()[0]; got.GetPodName() != "web" || got.GetCausedBy() != d.Envelope.GetId() || got.GetStage() != "admission" {
		t.Errorf("recorded %v, want a copy of the event caused by the delivery, from admission", got)
	}
	if err := env.Pub.Publish(ctx, &eventsv1.Envelope{}); err == nil {
		t.Error("an envelope without payload was published")
	}
	boom := errors.New("stream unavailable")
	pub.Fail(boom)
	if err := env.Pub.Publish(ctx, d.Next(&eventsv1.PodRejected{})); !errors.Is(err, boom) {
		t.Errorf("Publish after Fail: %v, want %v", err, boom)
	}
	pub.Fail(nil)
	if err := env.Pub.Publish(ctx, d.Next(&eventsv1.PodRejected{})); err != nil {
		t.Fatal(err)
	}
	if got := pub.Types(); !slices.Equal(got, []eventsv1.Type{"PodAdmitted", "PodRejected"}) {
		t.Errorf("Types = %v", got)
	}
	if err := stage.Reply(env, "_INBOX.x", stage.NotFound("pods", "web"), nil); err != nil {
		t.Fatal(err)
	}
	r := pub.Replies()
	if len(r) != 1 || r[0].Subject != "_INBOX.x" || r[0].Response.GetStatus().GetCode() != 404 {
		t.Errorf("Replies = %v, want one 404 to _INBOX.x", r)
	}
	pub.Reset()
	if len(pub.Events())+len(pub.Replies()) != 0 {
		t.Error("Reset kept records")
	}
}
