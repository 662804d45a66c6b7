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
func Serve(ctx context.Context, g *errgroup.Group, nc *nats.Conn, subject, queue string, workers int, h func(context.Context, *nats.Msg)) error {
	ch := make(chan *nats.Msg, 4*workers)
	sub, err := nc.ChanQueueSubscribe(subject, queue, ch)
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
