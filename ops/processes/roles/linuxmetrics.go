package roles

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/podflow/podflow/nodeagent/linux"
	"github.com/podflow/podflow/services/podmetrics"
)

// linuxMetricsInterval is how often a Linux node agent samples its cgroups
// (cAdvisor's housekeeping interval for the kubelet); a metrics request is
// answered with the rates between the last two samples, so kubectl top
// answers a node from linuxMetricsInterval after its agent started.
const linuxMetricsInterval = 10 * time.Second

// errNoReading answers a metrics request before the second sample.
var errNoReading = errors.New("no usage reading yet: the node agent has sampled its cgroups once")

// linuxReading is rd as node's podmetrics.Reading.
func linuxReading(node string, rd linux.UsageReading) (podmetrics.Reading, error) {
	if rd.Window <= 0 {
		return podmetrics.Reading{Node: node}, errNoReading
	}
	out := podmetrics.Reading{Node: node, Timestamp: rd.Time.UnixNano(), WindowNs: int64(rd.Window),
		Usage: podmetrics.Usage{CPUNanoCores: rd.CPUNanoCores, MemoryBytes: rd.MemoryBytes}}
	for _, p := range rd.Pods {
		mp := podmetrics.Pod{Namespace: p.Namespace, Name: p.Name}
		for _, c := range p.Containers {
			mp.Containers = append(mp.Containers, podmetrics.Container{Name: c.Name,
				Usage: podmetrics.Usage{CPUNanoCores: c.CPUNanoCores, MemoryBytes: c.MemoryBytes}})
		}
		out.Pods = append(out.Pods, mp)
	}
	return out, nil
}

// sampleUsage samples m now and every linuxMetricsInterval until ctx is
// done.
func sampleUsage(ctx context.Context, m *linux.Meter, log *slog.Logger) {
	t := time.NewTicker(linuxMetricsInterval)
	defer t.Stop()
	for {
		if _, err := m.Sample(ctx); err != nil && ctx.Err() == nil {
			log.Warn("usage sample", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
