package bus_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/proto/eventsv1"
)

// TestScaledUpConsumersSurviveTheirLeaderOnceCurrent (issue 39, as
// `podflow up` grows to three servers): streams and consumers made R1 on
// one server, with runners pulling, are scaled up to R3. Once
// ReplicasBehind reports every replica current, the first server is cut
// off as a machine that dies: every consumer elects a leader among the
// two others and a runner there handles an event published after the
// cut. (Cut before the new replicas are current, the consumers stay
// without a leader until the server comes back: the new replicas never
// heard from a leader and do not elect one of their own.)
func TestScaledUpConsumersSurviveTheirLeaderOnceCurrent(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test in -short mode")
	}
	relays := map[[2]int]*relay{}
	sc := bus.DefaultStreamsConfig()
	sc.Replicas, sc.PlacementTags = 1, []string{"first"}
	servers, admin := startClusterWith(t, func(i, j, port int) string {
		r := newRelay(t, fmt.Sprintf("127.0.0.1:%d", port))
		relays[[2]int{i, j}] = r
		return r.Addr()
	}, func(i int) []string {
		if i == 0 {
			return []string{"first"}
		}
		return nil
	}, sc)
	var cfgs []bus.RunnerConfig
	var specs []bus.ConsumerSpec
	for _, typ := range []eventsv1.Type{"PodRequested", "PodAuthorized", "PodAdmitted", "PodPersisted", "PodScheduled", "PodStatusReport"} {
		cfg := bus.DefaultRunnerConfig(strings.ToLower(string(typ)))
		cfg.FilterSubjects = []string{bus.TypeFilter(typ)}
		cfgs = append(cfgs, cfg)
		specs = append(specs, cfg.ConsumerSpecs()...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := bus.Provision(ctx, admin.JetStream(), bus.Topology{Streams: bus.DefaultStreams(sc), Consumers: specs}); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	handled := map[string]string{} // pod -> replica
	rctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { stop(); wg.Wait() }()
	for i := range servers {
		conn := connectTo(t, servers[i], servers[i])
		for _, cfg := range cfgs {
			cfg.Replica = fmt.Sprintf("%s-n%d", cfg.Stage, i)
			r, err := bus.NewRunner(conn, cfg, func(ctx context.Context, d *bus.Delivery) error {
				mu.Lock()
				handled[d.Envelope.PodName] = d.Replica
				mu.Unlock()
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			wg.Add(1)
			go func() { defer wg.Done(); _ = r.Run(rctx) }()
		}
	}
	for i := range 10 {
		if err := publishRequested(admin, i, 10*time.Second); err != nil {
			t.Fatal(err)
		}
	}

	sc.Replicas, sc.PlacementTags = 3, nil
	streams := []string{bus.EventsStream, bus.AdvisoriesStream}
	eventually(t, 60*time.Second, "the streams and their consumers R3 with every replica current", func() (bool, string) {
		pctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := bus.Provision(pctx, admin.JetStream(), bus.Topology{Streams: bus.DefaultStreams(sc)}); err != nil {
			return false, err.Error()
		}
		behind, err := bus.ReplicasBehind(pctx, admin.JetStream(), streams...)
		if err != nil {
			return false, err.Error()
		}
		return len(behind) == 0, strings.Join(behind, "\n")
	})

	first := servers[0].Server().Name()
	for link, r := range relays {
		if link[0] == 0 || link[1] == 0 {
			r.Cut()
		}
	}
	obs := connectTo(t, servers[1], servers[1])
	eventually(t, 60*time.Second, "every consumer led by a server left", func() (bool, string) {
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		var without []string
		for _, st := range streams {
			for _, spec := range specs {
				if spec.Stream != st {
					continue
				}
				c, err := obs.JetStream().Consumer(cctx, st, spec.Durable)
				if err != nil {
					without = append(without, fmt.Sprintf("%s > %s: %v", st, spec.Durable, err))
					continue
				}
				if l := c.CachedInfo().Cluster.Leader; l == "" || l == first {
					without = append(without, fmt.Sprintf("%s > %s: leader %q", st, spec.Durable, l))
				}
			}
		}
		return len(without) == 0, strings.Join(without, "\n")
	})
	pub := connectTo(t, servers[2], servers[2])
	if err := publishRequested(pub, 10, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "p10 handled on a server left", func() (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		r, ok := handled["p10"]
		return ok && !strings.HasSuffix(r, "-n0"), r
	})
}

// eventually polls cond every 100ms until it holds or d passes; cond
// says what it saw.
func eventually(t *testing.T, d time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		ok, last := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s; last:\n%s", d, what, last)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
