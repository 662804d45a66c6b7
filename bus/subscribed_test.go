package bus_test

import (
	"context"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/bus/bustest"
)

// TestSubscribedRegistersBeforeReturning: right after Subscribed returns,
// the server holds the subscription (a request from any connection finds
// it), for each of 40 subscriptions; one it cannot confirm is removed.
func TestSubscribedRegistersBeforeReturning(t *testing.T) {
	srv := bustest.Server(t)
	conn := bustest.Connect(t, srv, "svc")
	nc := conn.NATS()
	for i := range 40 {
		subj := "podflow.test.subscribed." + string(rune('a'+i%26))
		sub, err := nc.Subscribe(subj, func(*nats.Msg) {})
		if err != nil {
			t.Fatal(err)
		}
		if err := bus.Subscribed(context.Background(), nc, sub); err != nil {
			t.Fatal(err)
		}
		sz, err := srv.Server().Subsz(&server.SubszOptions{Subscriptions: true, Test: subj})
		if err != nil {
			t.Fatal(err)
		}
		if sz.Total != 1 {
			t.Errorf("%d: right after Subscribed(%q) the server holds %d subscriptions on it, want 1", i, subj, sz.Total)
		}
		if err := sub.Unsubscribe(); err != nil {
			t.Fatal(err)
		}
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	// A connection that cannot reach the server is not registered: an
	// error, and the subscription is gone.
	sub, err := nc.Subscribe("podflow.test.subscribed.closed", func(*nats.Msg) {})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := bus.Subscribed(ctx, nc, sub); err == nil {
		t.Fatal("Subscribed with a cancelled context: no error")
	}
	if sub.IsValid() {
		t.Error("the subscription of a failed Subscribed is still valid")
	}
}
