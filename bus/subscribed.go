package bus

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
)

// SubscribeTimeout bounds Subscribed's round trip.
const SubscribeTimeout = 10 * time.Second

// Subscribed returns once the server has registered sub, which nc made.
// nats.go sends a subscription to the server asynchronously, so a request
// from another connection sent right after Subscribe returns may find no
// one there and fail, or time out: a service that answers requests
// serves, and says so, only once it is registered. It flushes nc (one
// round trip, bounded by ctx and SubscribeTimeout); on failure it
// unsubscribes sub.
func Subscribed(ctx context.Context, nc *nats.Conn, sub *nats.Subscription) error {
	fctx, cancel := context.WithTimeout(ctx, SubscribeTimeout)
	defer cancel()
	if err := nc.FlushWithContext(fctx); err != nil {
		_ = sub.Unsubscribe()
		return fmt.Errorf("bus: subscribe %s: %w", sub.Subject, err)
	}
	return nil
}
