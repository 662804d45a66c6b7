package nodeagent_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/podflow/podflow/nodeagent"
	"github.com/podflow/podflow/nodeagent/nodeagenttest"
	"github.com/podflow/podflow/nodeagent/sim"
	eventsv1 "github.com/podflow/podflow/proto/eventsv1"
)

// readyCounter is a Publisher that only counts PodReady events.
type readyCounter struct {
	mu    sync.Mutex
	ready int
	all   int
	cond  *sync.Cond
}

func (r *readyCounter) Publish(_ context.Context, env *eventsv1.Envelope) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.all++
	if env.Type() == "PodReady" {
		r.ready++
		r.cond.Broadcast()
	}
	return nil
}

// BenchmarkPodToReady measures the agent core's cost of taking a pod from
// HandlePodBound to PodReady on an instant simulated runtime (no delays, a
// publisher that only counts): the kubelet's bookkeeping, status building and
// envelope construction, per pod.
func BenchmarkPodToReady(b *testing.B) {
	rt, err := sim.New(sim.DefaultConfig("10.0.0.0/8"))
	if err != nil {
		b.Fatal(err)
	}
	defer rt.Close()
	pub := &readyCounter{}
	pub.cond = sync.NewCond(&pub.mu)
	cfg := nodeagent.DefaultConfig(node, "10.0.0.0/8")
	a, err := nodeagent.New(cfg, rt, nodeagenttest.NewStore(), pub)
	if err != nil {
		b.Fatal(err)
	}
	defer a.Stop()
	ctx := context.Background()
	if err := a.Start(ctx); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	start := time.Now()
	b.ResetTimer()
	for i := range b.N {
		if err := a.HandlePodBound(ctx, newPod(fmt.Sprintf("p%d", i))); err != nil {
			b.Fatal(err)
		}
	}
	pub.mu.Lock()
	for pub.ready < b.N {
		pub.cond.Wait()
	}
	envs := pub.all
	pub.mu.Unlock()
	b.StopTimer()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "pods/s")
	b.ReportMetric(float64(envs)/float64(b.N), "envelopes/pod")
}
