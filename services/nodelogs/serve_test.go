package nodelogs_test

import (
	"context"
	"testing"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/podflow/podflow/bus/bustest"
	"github.com/podflow/podflow/services/nodelogs"
	"github.com/podflow/podflow/services/podmetrics"
)

// TestServeRegistersBeforeReturning: right after nodelogs.Serve and
// podmetrics.Serve return, the server holds their subscription, so a
// request from another connection (the api stage's) finds the node agent.
func TestServeRegistersBeforeReturning(t *testing.T) {
	srv := bustest.Server(t)
	conn := bustest.Connect(t, srv, "node")
	ctx := context.Background()
	held := func(i int, subj string) {
		t.Helper()
		sz, err := srv.Server().Subsz(&server.SubszOptions{Subscriptions: true, Test: subj})
		if err != nil {
			t.Fatal(err)
		}
		if sz.Total != 1 {
			t.Errorf("%d: right after serving, the server holds %d subscriptions on %s, want 1", i, sz.Total, subj)
		}
	}
	for i := range 20 {
		logs, err := nodelogs.Serve(ctx, conn.NATS(), "n1", func(nodelogs.Request, int) (nodelogs.Reply, error) { return nodelogs.Reply{}, nil })
		if err != nil {
			t.Fatal(err)
		}
		held(i, nodelogs.Subject("n1"))
		metrics, err := podmetrics.Serve(ctx, conn.NATS(), "n1", func(string) (podmetrics.Reading, error) { return podmetrics.Reading{}, nil })
		if err != nil {
			t.Fatal(err)
		}
		held(i, podmetrics.Subject("n1"))
		_ = logs.Unsubscribe()
		_ = metrics.Unsubscribe()
		if err := conn.NATS().Flush(); err != nil {
			t.Fatal(err)
		}
	}
}
