package bus_test

import (
	"context"
	"fmt"
	"sort"
	"sync/atomic"
	"testing"
	"time"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/bus/bustest"
	eventsv1 "github.com/podflow/podflow/proto/eventsv1"
)

// Run with: go test -run '^$' -bench . -benchtime 2000x ./
// Figures on the 2-core development VM (shared with other builds, load
// average ~10) are quoted in doc.go, Durability.

func benchServer(b *testing.B, syncAlways bool) *bus.Conn {
	cfg := bus.DefaultEmbeddedConfig(b.TempDir())
	cfg.SyncAlways = syncAlways
	srv := bustest.ServerAt(b, cfg)
	conn := bustest.Connect(b, srv, "bench")
	return conn
}

// BenchmarkPublish measures publishing PodPersisted events (about 150
// bytes) into PODFLOW_EVENTS: waiting for each PubAck (sync) or
// pipelining them (async), with nats-server's default fsync interval or
// SyncAlways.
func BenchmarkPublish(b *testing.B) {
	for _, syncAlways := range []bool{false, true} {
		for _, mode := range []string{"sync", "async"} {
			b.Run(fmt.Sprintf("%s/SyncAlways=%v", mode, syncAlways), func(b *testing.B) {
				conn := benchServer(b, syncAlways)
				bustest.Provision(b, conn)
				envs := podEvents(b.N)
				ctx := context.Background()
				b.ResetTimer()
				start := time.Now()
				for _, e := range envs {
					if mode == "sync" {
						if _, err := conn.Publish(ctx, e); err != nil {
							b.Fatal(err)
						}
					} else if _, err := conn.PublishAsync(e); err != nil {
						b.Fatal(err)
					}
				}
				if err := conn.PublishAsyncComplete(ctx); err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msgs/s")
			})
		}
	}
}

// BenchmarkStageLatency measures one event's trip publish → runner →
// handler → confirmed ack, one event at a time, and reports p50/p99.
func BenchmarkStageLatency(b *testing.B) {
	for _, syncAlways := range []bool{false, true} {
		b.Run(fmt.Sprintf("SyncAlways=%v", syncAlways), func(b *testing.B) {
			conn := benchServer(b, syncAlways)
			rc := bus.DefaultRunnerConfig("bench")
			rc.FilterSubjects = []string{bus.TypeFilter("PodPersisted")}
			acked := make(chan struct{}, 1)
			rc.Observer = bus.ObserverFunc(func(o bus.Observation) {
				if o.Outcome == bus.OutcomeAcked {
					acked <- struct{}{}
				}
			})
			bustest.Provision(b, conn, rc.ConsumerSpec())
			r, err := bus.NewRunner(conn, rc, func(context.Context, *bus.Delivery) error { return nil })
			if err != nil {
				b.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- r.Run(ctx) }()
			defer func() { cancel(); <-done }()

			envs := podEvents(b.N)
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for _, e := range envs {
				t0 := time.Now()
				if _, err := conn.Publish(ctx, e); err != nil {
					b.Fatal(err)
				}
				select {
				case <-acked:
				case <-time.After(bustest.Timeout):
					b.Fatal("no ack")
				}
				lat = append(lat, time.Since(t0))
			}
			b.StopTimer()
			sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
		})
	}
}

// BenchmarkStageThroughput measures events per second through one stage
// runner (Concurrency 16, a no-op handler) after an async burst, with
// confirmed (DoubleAck) and fire-and-forget acks.
func BenchmarkStageThroughput(b *testing.B) {
	for _, asyncAck := range []bool{false, true} {
		b.Run(fmt.Sprintf("AsyncAck=%v", asyncAck), func(b *testing.B) {
			conn := benchServer(b, false)
			rc := bus.DefaultRunnerConfig("bench")
			rc.FilterSubjects = []string{bus.TypeFilter("PodPersisted")}
			rc.AsyncAck = asyncAck
			acks := countAcks(b, &rc)
			bustest.Provision(b, conn, rc.ConsumerSpec())
			envs := podEvents(b.N)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			b.ResetTimer()
			start := time.Now()
			for _, e := range envs {
				if _, err := conn.PublishAsync(e); err != nil {
					b.Fatal(err)
				}
			}
			r, err := bus.NewRunner(conn, rc, func(context.Context, *bus.Delivery) error { return nil })
			if err != nil {
				b.Fatal(err)
			}
			acks.run(ctx, cancel, r, start)
		})
	}
}

// BenchmarkStageHop measures the bus's share of every stage's work per
// event: the runner consumes a PodPersisted, the handler publishes the
// event it causes (Delivery.Next, Publish waiting for the PubAck) and the
// runner confirms the ack, Concurrency 16, after an async burst. The
// embedded server runs in the process, so allocs/op counts its
// allocations too.
func BenchmarkStageHop(b *testing.B) {
	conn := benchServer(b, false)
	rc := bus.DefaultRunnerConfig("bench")
	rc.FilterSubjects = []string{bus.TypeFilter("PodPersisted")}
	acks := countAcks(b, &rc)
	bustest.Provision(b, conn, rc.ConsumerSpec())
	envs := podEvents(b.N)
	for _, e := range envs {
		if _, err := conn.PublishAsync(e); err != nil {
			b.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := conn.PublishAsyncComplete(ctx); err != nil {
		b.Fatal(err)
	}
	r, err := bus.NewRunner(conn, rc, func(ctx context.Context, d *bus.Delivery) error {
		_, err := conn.Publish(ctx, d.Next(&eventsv1.PodScheduled{Revision: 2}))
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	acks.run(ctx, cancel, r, time.Now())
}

// ackCounter counts a benchmark runner's acked deliveries (countAcks).
type ackCounter struct {
	b   *testing.B
	n   atomic.Int64
	all chan struct{} // closed at b.N acks
}

// countAcks makes rc's observer count acks towards b.N.
func countAcks(b *testing.B, rc *bus.RunnerConfig) *ackCounter {
	c := &ackCounter{b: b, all: make(chan struct{})}
	target := int64(b.N)
	rc.Observer = bus.ObserverFunc(func(o bus.Observation) {
		if o.Outcome == bus.OutcomeAcked && c.n.Add(1) == target {
			close(c.all)
		}
	})
	return c
}

// run runs r until b.N deliveries are acked (at most 2 minutes), reports
// msgs/s since start, then stops r (cancel) and waits for it.
func (c *ackCounter) run(ctx context.Context, cancel context.CancelFunc, r *bus.Runner, start time.Time) {
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	select {
	case <-c.all:
	case <-time.After(2 * time.Minute):
		c.b.Fatalf("only %d of %d acked", c.n.Load(), c.b.N)
	}
	c.b.ReportMetric(float64(c.b.N)/time.Since(start).Seconds(), "msgs/s")
	c.b.StopTimer()
	cancel()
	<-done
}
