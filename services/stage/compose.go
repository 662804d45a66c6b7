package stage

import (
	"context"
	"errors"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/podflow/podflow/bus"
)

// Compose returns h with parts run beside it in the same replica: the
// background work of a stage's process that handles no events itself (a
// controller, a server in front of the stage). The result handles h's
// events; its Start starts h (when h is a Starter), then each part in
// order, and fails at the first that fails; its Reconcile reconciles h and
// every part that is a Reconciler; its RegisterMetrics registers h's
// metrics when h has any.
func Compose(h Handler, parts ...Starter) Handler {
	return &composed{h: h, parts: parts}
}

type composed struct {
	h     Handler
	parts []Starter
}

var (
	_ Starter    = (*composed)(nil)
	_ Reconciler = (*composed)(nil)
)

func (c *composed) Handle(ctx context.Context, d *bus.Delivery) error { return c.h.Handle(ctx, d) }

func (c *composed) Start(ctx context.Context, g *errgroup.Group) error {
	if s, ok := c.h.(Starter); ok {
		if err := s.Start(ctx, g); err != nil {
			return err
		}
	}
	for _, p := range c.parts {
		if err := p.Start(ctx, g); err != nil {
			return err
		}
	}
	return nil
}

func (c *composed) Reconcile(ctx context.Context) error {
	var errs []error
	if r, ok := c.h.(Reconciler); ok {
		errs = append(errs, r.Reconcile(ctx))
	}
	for _, p := range c.parts {
		if r, ok := p.(Reconciler); ok {
			errs = append(errs, r.Reconcile(ctx))
		}
	}
	return errors.Join(errs...)
}

// RegisterMetrics registers h's metrics in reg (none when h has none).
func (c *composed) RegisterMetrics(reg prometheus.Registerer) error {
	if r, ok := c.h.(interface {
		RegisterMetrics(prometheus.Registerer) error
	}); ok {
		return r.RegisterMetrics(reg)
	}
	return nil
}
