package stage

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go"
	"golang.org/x/sync/errgroup"

	"github.com/podflow/podflow/bus"
)

// Serve answers the requests on subject with workers goroutines of the
// queue group queue, shared by every replica that serves it; h gets each
// request. It returns once the server has the subscription (until then a
// request finds no replica and times out); the subscription and the
// workers stop with ctx, on g.
//
// A burst larger than the workers waits in the subscription's pending
// queue (the NATS client's pending limits, 512Ki messages and 64 MiB by
// default) until a worker is free: it is never dropped, which a requester
// would see only as its timeout.
func Serve(ctx context.Context, g *errgroup.Group, nc *nats.Conn, subject, queue string, workers int, h func(context.Context, *nats.Msg)) error {
	ch := make(chan *nats.Msg)
	// The subscription's one delivery goroutine hands each request to a
	// free worker and waits for one while all are busy; meanwhile the
	// client queues the next requests.
	sub, err := nc.QueueSubscribe(subject, queue, func(m *nats.Msg) {
		select {
		case ch <- m:
		case <-ctx.Done():
		}
	})
	if err != nil {
		return fmt.Errorf("subscribe %q: %w", subject, err)
	}
	if err := bus.Subscribed(ctx, nc, sub); err != nil {
		return err
	}
	g.Go(func() error {
		<-ctx.Done()
		return sub.Unsubscribe()
	})
	for range workers {
		g.Go(func() error {
			for {
				select {
				case <-ctx.Done():
					return nil
				case m := <-ch:
					h(ctx, m)
				}
			}
		})
	}
	return nil
}
