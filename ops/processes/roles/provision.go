package roles

import (
	"context"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/services/pipeline"
)

// Provision declares podflow's streams and stage consumers; it is
// idempotent, so every process that needs them calls it at start-up.
func Provision(ctx context.Context, conn *bus.Conn, streams bus.StreamsConfig) error {
	t, err := pipeline.Topology(streams)
	if err != nil {
		return err
	}
	return bus.Provision(ctx, conn.JetStream(), t)
}
