package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/pipeline"
)

// runningPods counts the stored pods whose name starts with prefix and
// that are Running.
func (c *cluster) runningPods(prefix string) (running, total int) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	pods, _, err := objects.List[*corev1.Pod](ctx, c.store, "default")
	if err != nil {
		return 0, 0
	}
	for _, p := range pods {
		if !strings.HasPrefix(p.GetMetadata().GetName(), prefix) {
			continue
		}
		total++
		if p.GetStatus().GetPhase() == "Running" {
			running++
		}
	}
	return running, total
}

// streamCounts counts, per pod name with prefix, the events of type t in
// the events stream.
func (c *cluster) streamCounts(t, prefix string) map[string]int {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cons, err := c.conn.JetStream().OrderedConsumer(ctx, bus.EventsStream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{bus.PodPrefix + "." + t + ".>"},
	})
	if err != nil {
		c.t.Fatal(err)
	}
	info, err := cons.Info(ctx)
	if err != nil {
		c.t.Fatal(err)
	}
	pending := int(info.NumPending)
	counts := map[string]int{}
	for pending > 0 {
		batch, err := cons.Fetch(min(pending, 500), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			c.t.Fatal(err)
		}
		n := 0
		for m := range batch.Messages() {
			n++
			env, err := bus.DecodeEnvelope(m.Data())
			if err != nil {
				c.t.Fatal(err)
			}
			if strings.HasPrefix(env.GetPodName(), prefix) {
				counts[env.GetPodName()]++
			}
		}
		if n == 0 {
			break
		}
		pending -= n
	}
	return counts
}

func (c *cluster) assertEachOnce(prefix string, n int, types ...string) {
	c.t.Helper()
	for _, ty := range types {
		counts := c.streamCounts(ty, prefix)
		if len(counts) != n {
			c.t.Errorf("%s: %d pods have the event, want %d", ty, len(counts), n)
		}
		for name, k := range counts {
			if k != 1 {
				c.t.Errorf("%s published %d times for %s", ty, k, name)
			}
		}
	}
}

// TestThousandPods publishes 1,000 PodRequested events on the bus: every
// pod reaches Running, and each passes every stage exactly once.
func TestThousandPods(t *testing.T) {
	parallel(t, heavyLoad)
	c := startCluster(t, "--nodes", "20")
	const n = 1000
	f := writeTemp(t, pod("bulk", "default", "bulk", "", ""))
	out := c.mustPodflow("publish", "-f", f, "--count", fmt.Sprint(n))
	if !strings.Contains(out, fmt.Sprintf("%d PodRequested events published", n)) {
		t.Fatalf("publish: %s", out)
	}
	eventually(t, 3*time.Minute, fmt.Sprintf("%d pods Running", n), func() (bool, string) {
		r, total := c.runningPods("bulk-")
		return r == n, fmt.Sprintf("%d/%d stored pods Running", r, total)
	})
	c.assertEachOnce("bulk-", n, "PodAuthorized", "PodAdmitted", "PodPersisted", "PodScheduled")
}

// TestStageKilledMidBurst SIGKILLs a replica of each pre-persistence stage
// while a burst is in flight: the supervisor restarts it, what it had not
// acked is redelivered, and every pod still runs, persisted exactly once.
func TestStageKilledMidBurst(t *testing.T) {
	parallel(t, heavyLoad)
	c := startCluster(t, "--nodes", "10", "--replicas", "admission=2,persistence=2")
	const n = 400
	f := writeTemp(t, pod("burst", "default", "burst", "", ""))
	done := make(chan string, 1)
	go func() {
		out, _ := c.podflow("publish", "-f", f, "--count", fmt.Sprint(n))
		done <- out
	}()
	// Kill as soon as the burst is moving.
	eventually(t, 30*time.Second, "the burst to start", func() (bool, string) {
		_, total := c.runningPods("burst-")
		return total > 20, fmt.Sprint(total)
	})
	killed := 0
	for _, ch := range c.children() {
		if ch.Name == "admission-1" || ch.Name == "persistence-2" || ch.Name == "scheduler-1" {
			if ch.PID == 0 {
				t.Fatalf("%s is not running", ch.Name)
			}
			if err := syscall.Kill(ch.PID, syscall.SIGKILL); err != nil {
				t.Fatalf("kill %s (pid %d): %v", ch.Name, ch.PID, err)
			}
			killed++
		}
	}
	if killed != 3 {
		t.Fatalf("killed %d processes, want 3: %+v", killed, c.children())
	}
	if out := <-done; !strings.Contains(out, "published") {
		t.Fatalf("publish: %s", out)
	}
	eventually(t, 3*time.Minute, fmt.Sprintf("%d pods Running", n), func() (bool, string) {
		r, total := c.runningPods("burst-")
		return r == n, fmt.Sprintf("%d/%d stored pods Running", r, total)
	})
	c.assertEachOnce("burst-", n, "PodPersisted", "PodScheduled")
	restarted := 0
	for _, ch := range c.children() {
		if ch.Restarts > 0 {
			restarted++
		}
	}
	if restarted < 3 {
		t.Errorf("%d children were restarted, want at least 3", restarted)
	}
}

// TestScaleLive scales a stage up and down under a running system between
// bursts: the new replicas take work from the shared consumer, removed ones
// drain, and every pod is admitted exactly once.
func TestScaleLive(t *testing.T) {
	parallel(t, simulated)
	c := startCluster(t, "--nodes", "10")
	out := c.mustPodflow("scale", "admission=3")
	if !strings.Contains(out, "stage/admission scaled to 3 (admission-1, admission-2, admission-3)") {
		t.Fatalf("scale: %s", out)
	}
	eventually(t, 30*time.Second, "3 admission replicas pulling", func() (bool, string) {
		s := c.mustPodflow("streams")
		return strings.Contains(s, "3 (admission-1: "), s
	})
	const n = 300
	c.mustPodflow("publish", "-f", writeTemp(t, pod("scaled", "default", "scaled", "", "")), "--count", fmt.Sprint(n))
	out = c.mustPodflow("scale", "admission=1")
	if !strings.Contains(out, "stage/admission scaled to 1 (admission-1)") {
		t.Fatalf("scale down: %s", out)
	}
	c.mustPodflow("publish", "-f", writeTemp(t, pod("after", "default", "after", "", "")), "--count", "50")
	eventually(t, 2*time.Minute, "every pod Running", func() (bool, string) {
		a, _ := c.runningPods("scaled-")
		b, _ := c.runningPods("after-")
		return a == n && b == 50, fmt.Sprintf("%d/%d and %d/50", a, n, b)
	})
	c.assertEachOnce("scaled-", n, "PodAdmitted")
	c.assertEachOnce("after-", 50, "PodAdmitted")
}

// TestChaos is the bounded chaos run of `make test`: a few hundred pods
// while every kind of process is SIGKILLed (stage replicas, the store,
// the node agent, a NATS server of the 3-server cluster) and some are
// paused; podflow chaos checks the invariants and exits non-zero on any
// violation. `make chaos` soaks longer.
func TestChaos(t *testing.T) {
	parallel(t, heavyLoad)
	c := startCluster(t, "--cluster", "--nodes", "20", "--replicas", "admission=2,persistence=2,scheduler=2")
	out, code := c.podflowTimeout(6*time.Minute, "chaos", "--config", c.config, "--pods", "300", "--duration", "45s",
		"--kill-interval", "3s", "--targets", "stages,store,nodeagent,nats", "--pause", "--seed", "42")
	t.Log(out)
	if code != 0 || !strings.Contains(out, "0 violations") {
		t.Fatalf("chaos exit %d", code)
	}
	for _, kind := range []string{"SIGKILL stage", "SIGKILL store-", "SIGKILL nodeagent", "SIGKILL nats"} {
		name := strings.TrimPrefix(kind, "SIGKILL ")
		if name == "stage" {
			if !slices.ContainsFunc(pipeline.Stages, func(s string) bool { return strings.Contains(out, "SIGKILL "+s+"-") }) {
				t.Errorf("no stage replica was killed")
			}
			continue
		}
		if !strings.Contains(out, kind) {
			t.Errorf("no %q in the chaos run", kind)
		}
	}
}
