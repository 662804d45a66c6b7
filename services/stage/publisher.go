package stage

import (
	"context"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/proto/eventsv1"
)

// Publisher is what a stage sends on the bus: its next events and the
// answers to requests. NewPublisher is the bus's; stagetest.Publisher
// records what a stage under test sends. Implementations are safe for
// concurrent use.
type Publisher interface {
	// Publish stores e in its stream and returns once the stream has it.
	// It fills e.Id (eventsv1.EventID) and e.Time when unset, so a retried
	// publish of the same event is stored once.
	Publish(ctx context.Context, e *eventsv1.Envelope) error
	// Reply sends data to a request's reply subject (core NATS, fire and
	// forget: the requester may be gone).
	Reply(subject string, data []byte) error
}

type busPublisher struct{ c *bus.Conn }

var _ Publisher = busPublisher{}

// NewPublisher returns the Publisher of a bus connection.
func NewPublisher(c *bus.Conn) Publisher { return busPublisher{c} }

func (p busPublisher) Publish(ctx context.Context, e *eventsv1.Envelope) error {
	_, err := p.c.Publish(ctx, e)
	return err
}

func (p busPublisher) Reply(subject string, data []byte) error {
	return p.c.NATS().Publish(subject, data)
}
