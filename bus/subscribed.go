package bus

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
)

// SubscribeTimeout bounds one of Subscribed's round trips on a connection
// that is up.
const SubscribeTimeout = 10 * time.Second

// reconnectPoll is how often Subscribed looks again while nc reconnects.
const reconnectPoll = 100 * time.Millisecond

// Subscribed returns once the server has registered sub, which nc made.
// nats.go sends a subscription to the server asynchronously, so a request
// from another connection sent right after Subscribe returns may find no
// one there and fail, or time out: a service that answers requests serves,
// and says so, only once it is registered. It flushes nc (one round trip,
// at most SubscribeTimeout). While nc is not connected (not yet, or
// reconnecting: nats.go sends its subscriptions again once it is back) it
// waits for it, as long as ctx allows; a process that needs the bus to
// serve waits for the bus. On failure it unsubscribes sub.
func Subscribed(ctx context.Context, nc *nats.Conn, sub *nats.Subscription) error {
	// A flush under a done context may still see its pong first (the
	// select between them picks either when both are ready): a caller
	// that gave up gets its error whatever the race.
	if err := ctx.Err(); err != nil {
		_ = sub.Unsubscribe()
		return fmt.Errorf("bus: subscribe %s: %w", sub.Subject, err)
	}
	for {
		fctx, cancel := context.WithTimeout(ctx, SubscribeTimeout)
		err := nc.FlushWithContext(fctx)
		cancel()
		if err == nil {
			return nil
		}
		down := !nc.IsClosed() && (!nc.IsConnected() || errors.Is(err, nats.ErrConnectionClosed))
		if !down || ctx.Err() != nil {
			_ = sub.Unsubscribe()
			return fmt.Errorf("bus: subscribe %s: %w", sub.Subject, err)
		}
		select { // the flush was cut by a disconnect, or waited on one
		case <-ctx.Done():
		case <-time.After(reconnectPoll):
		}
	}
}
