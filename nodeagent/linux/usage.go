package linux

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/podflow/podflow/nodeagent/linux/cgroups"
)

// UsageReading is a node's resource usage and its running containers', as
// the kubelet's summary gives it to metrics-server: CPU as a rate over
// the Window before Time, memory as the working set at Time.
type UsageReading struct {
	Time   time.Time
	Window time.Duration // 0: the first sample, no rate yet
	NodeUsage
	Pods []PodUsage // sorted by namespace and name
}

// NodeUsage is a CPU rate and a memory working set.
type NodeUsage struct {
	CPUNanoCores uint64
	MemoryBytes  uint64
}

// PodUsage is one pod's running containers'.
type PodUsage struct {
	UID, Namespace, Name string
	Containers           []ContainerUsage // sorted by name
}

// ContainerUsage is one running container's.
type ContainerUsage struct {
	Name string
	NodeUsage
}

// Meter turns the cgroups' cumulative CPU readings into rates, as cAdvisor
// and metrics-server do: it keeps each container instance's previous
// reading (a restarted container is a new instance, with a fresh cgroup)
// and the node's, and each Sample reports the rate since the previous one.
// A container seen for the first time is left out of that Sample's
// reading; one that exited is left out and forgotten.
//
// Concurrency: safe for concurrent use; Samples are serialized.
type Meter struct {
	rt *Runtime

	mu   sync.Mutex
	node sample
	ctrs map[string]sample // container instance ID → its previous reading
	last UsageReading
}

// sample is one cgroup reading and when it was taken.
type sample struct {
	at time.Time
	u  cgroups.Usage
}

// rate is the CPU rate between prev and cur in nanocores (ns of CPU per s);
// ok is false without a usable interval or when the counter went back (a
// recreated cgroup).
func rate(prev, cur sample) (nanocores uint64, ok bool) {
	d := cur.at.Sub(prev.at)
	if prev.at.IsZero() || d <= 0 || cur.u.CPUNanos < prev.u.CPUNanos {
		return 0, false
	}
	return uint64(float64(cur.u.CPUNanos-prev.u.CPUNanos) / d.Seconds()), true
}

// NewMeter returns a Meter of r's node.
func (r *Runtime) NewMeter() *Meter { return &Meter{rt: r, ctrs: map[string]sample{}} }

// running is a container instance whose cgroup a Sample reads.
type running struct {
	uid, namespace, pod, qos string
	id, name                 string
}

// runningContainers returns the running container instances, init ones
// included (a native sidecar, an init container still at work), as the
// kubelet's summary lists them to metrics-server.
func (r *Runtime) runningContainers() []running {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []running
	for _, p := range r.pods {
		for _, c := range p.ctrs {
			if c.known {
				continue
			}
			select {
			case <-c.c.Done():
				continue
			default:
			}
			out = append(out, running{uid: p.rec.UID, namespace: p.rec.Namespace, pod: p.rec.Name,
				qos: p.rec.QOS, id: c.meta.ID, name: c.meta.Name})
		}
	}
	return out
}

// Sample reads the node's cgroup and each running container's, and
// returns (and keeps, for Last) the rates since the previous Sample. A
// container whose cgroup went between listing and reading (it exited) is
// skipped; any other read failure fails the Sample.
func (m *Meter) Sample(ctx context.Context) (UsageReading, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	nu, err := m.rt.cg.NodeUsage()
	if err != nil {
		return UsageReading{}, fmt.Errorf("linux: node usage: %w", err)
	}
	node := sample{at: now, u: nu}
	rd := UsageReading{Time: now, NodeUsage: NodeUsage{MemoryBytes: nu.WorkingSetBytes}}
	if cpu, ok := rate(m.node, node); ok {
		rd.Window, rd.CPUNanoCores = node.at.Sub(m.node.at), cpu
	}
	m.node = node
	seen := map[string]sample{}
	pods := map[string]*PodUsage{}
	for _, c := range m.rt.runningContainers() {
		if err := ctx.Err(); err != nil {
			return UsageReading{}, err
		}
		u, err := m.rt.cg.ContainerUsage(c.uid, c.qos, c.name)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return UsageReading{}, fmt.Errorf("linux: usage of container %q of pod %s/%s: %w", c.name, c.namespace, c.pod, err)
		}
		cur := sample{at: time.Now(), u: u}
		seen[c.id] = cur
		cpu, ok := rate(m.ctrs[c.id], cur)
		if !ok {
			continue
		}
		p := pods[c.uid]
		if p == nil {
			p = &PodUsage{UID: c.uid, Namespace: c.namespace, Name: c.pod}
			pods[c.uid] = p
		}
		p.Containers = append(p.Containers, ContainerUsage{Name: c.name,
			NodeUsage: NodeUsage{CPUNanoCores: cpu, MemoryBytes: u.WorkingSetBytes}})
	}
	m.ctrs = seen
	for _, p := range pods {
		slices.SortFunc(p.Containers, func(a, b ContainerUsage) int { return strings.Compare(a.Name, b.Name) })
		rd.Pods = append(rd.Pods, *p)
	}
	slices.SortFunc(rd.Pods, func(a, b PodUsage) int {
		return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
	})
	m.last = rd
	return rd, nil
}

// Last returns the last Sample's reading (zero before the first).
func (m *Meter) Last() UsageReading {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.last
}
