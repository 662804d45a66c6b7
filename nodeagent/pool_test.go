package nodeagent_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/podflow/podflow/nodeagent"
	corev1 "github.com/podflow/podflow/proto/corev1"
	eventsv1 "github.com/podflow/podflow/proto/eventsv1"
)

// until polls cond until it holds or waitFor runs out (then the test
// fails): a wait for a state, not a timing.
func until(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: still not true after %s", what, waitFor)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func readyPods(all []*eventsv1.Envelope) int {
	n := 0
	for _, x := range all {
		if x.Type() == "PodReady" {
			n++
		}
	}
	return n
}

// TestIdlePodsHoldNoGoroutine: once its pods are Running and Ready and
// nothing happens to them, the agent holds no goroutine for them (its
// pool's goroutines end when no step is due); before, each pod's worker
// was a goroutine for the pod's whole life. The pods then still react:
// every one is deleted and torn down.
func TestIdlePodsHoldNoGoroutine(t *testing.T) {
	const n = 200
	e := newEnv(t)
	base := runtime.NumGoroutine()
	for i := range n {
		e.bind(newPod(fmt.Sprintf("idle-%d", i)))
	}
	if err := e.pub.Wait(e.ctx(), func(all []*eventsv1.Envelope) bool { return readyPods(all) >= n }); err != nil {
		t.Fatalf("waiting for %d pods Ready: %v", n, err)
	}
	if got := e.agent.RunningPods(); got != n {
		t.Fatalf("RunningPods = %d, want %d", got, n)
	}
	// A goroutine per pod would keep this at base+n or above for good.
	until(t, "the idle pods' goroutines to end", func() bool { return runtime.NumGoroutine()-base < n/10 })

	for i := range n {
		p := newPod(fmt.Sprintf("idle-%d", i))
		if err := e.agent.HandlePodDelete(e.ctx(), p, 0); err != nil {
			t.Fatal(err)
		}
	}
	until(t, "every pod torn down", func() bool { return e.agent.RunningPods() == 0 })
}

// gatedRuntime holds every RunPodSandbox until gate is closed, counting
// the calls under way.
type gatedRuntime struct {
	nodeagent.Runtime
	gate chan struct{}

	mu      sync.Mutex
	in, max int
}

func (g *gatedRuntime) RunPodSandbox(ctx context.Context, pod *corev1.Pod) (nodeagent.Sandbox, error) {
	g.mu.Lock()
	g.in++
	g.max = max(g.max, g.in)
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		g.in--
		g.mu.Unlock()
	}()
	select {
	case <-g.gate:
	case <-ctx.Done():
		return nodeagent.Sandbox{}, ctx.Err()
	}
	return g.Runtime.RunPodSandbox(ctx, pod)
}

func (g *gatedRuntime) counts() (in, most int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.in, g.max
}

// TestPoolBoundsStepsAtOnce: a Pool of 2 works on at most two pods at
// once; the others wait in its queue, first come first served, and each
// runs once a slot frees up.
func TestPoolBoundsStepsAtOnce(t *testing.T) {
	const n = 10
	e := newEnv(t)
	g := &gatedRuntime{Runtime: e.rt, gate: make(chan struct{})}
	pool := nodeagent.NewPool(2)
	cfg := fastConfig()
	cfg.Pool = pool
	e.replaceAgent(cfg, g, e.store)
	for i := range n {
		e.bind(newPod(fmt.Sprintf("queued-%d", i)))
	}
	until(t, "two sandboxes being created and eight pods queued", func() bool {
		in, _ := g.counts()
		return in == 2 && nodeagent.PoolPending(pool) == n-2
	})
	close(g.gate)
	if err := e.pub.Wait(e.ctx(), func(all []*eventsv1.Envelope) bool { return readyPods(all) >= n }); err != nil {
		t.Fatalf("waiting for %d pods Ready: %v", n, err)
	}
	if _, most := g.counts(); most != 2 {
		t.Errorf("sandboxes created at once: at most %d, want 2 (the pool's size)", most)
	}
}
