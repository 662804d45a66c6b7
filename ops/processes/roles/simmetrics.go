package roles

import (
	"context"
	"fmt"
	"time"

	"github.com/podflow/podflow/nodeagent/sim"
	"github.com/podflow/podflow/services/podmetrics"
)

// The simulated usage model: every running container uses simContainerUsage
// (1m of CPU and 4 MiB), and a node its containers' sum plus simNodeSystem
// (the system's share: 50m and 512 MiB), measured over simMetricsWindow as
// kubelet's summaries are.
var (
	simContainerUsage = podmetrics.Usage{CPUNanoCores: 1_000_000, MemoryBytes: 4 << 20}
	simNodeSystem     = podmetrics.Usage{CPUNanoCores: 50_000_000, MemoryBytes: 512 << 20}
)

const simMetricsWindow = 15 * time.Second

// simMetricsTimeout bounds one reading of a simulated node's runtime.
const simMetricsTimeout = 2 * time.Second

// simReading is node's reading under the simulated usage model.
func simReading(cl *sim.Cluster, node string, now time.Time) (podmetrics.Reading, error) {
	rt, ok := cl.Runtime(node)
	if !ok {
		return podmetrics.Reading{}, fmt.Errorf("no simulated node %q", node)
	}
	ctx, cancel := context.WithTimeout(context.Background(), simMetricsTimeout)
	defer cancel()
	sbs, err := rt.ListSandboxes(ctx)
	if err != nil {
		return podmetrics.Reading{}, err
	}
	rd := podmetrics.Reading{Node: node, Timestamp: now.UnixNano(), WindowNs: int64(simMetricsWindow), Usage: simNodeSystem}
	for _, sb := range sbs {
		cs, err := rt.ListContainers(ctx, sb.PodUID)
		if err != nil {
			return podmetrics.Reading{}, err
		}
		p := podmetrics.Pod{Namespace: sb.Namespace, Name: sb.Name}
		for _, c := range cs {
			if !c.Running || c.Init {
				continue
			}
			p.Containers = append(p.Containers, podmetrics.Container{Name: c.Name, Usage: simContainerUsage})
			rd.CPUNanoCores += simContainerUsage.CPUNanoCores
			rd.MemoryBytes += simContainerUsage.MemoryBytes
		}
		if len(p.Containers) > 0 {
			rd.Pods = append(rd.Pods, p)
		}
	}
	return rd, nil
}
