package api

import (
	"context"

	"github.com/podflow/podflow/services/apiserver"
	"github.com/podflow/podflow/services/podmetrics"
)

var _ apiserver.MetricsBackend = (*Stage)(nil)

// NodeReading asks node's agent for its resource usage (metrics.k8s.io).
func (s *Stage) NodeReading(ctx context.Context, node string) (podmetrics.Reading, error) {
	return podmetrics.Ask(ctx, s.env.NATS, node)
}
