package stage

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"runtime"
	"runtime/debug"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"golang.org/x/sync/errgroup"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/services/pipeline"
)

// PingSubject is where every stage replica answers who it is and what it
// has done (scatter-gather: each replica replies). `podflow streams` uses
// it to show the replicas working on each stage.
const PingSubject = pipeline.PingSubject

// Pong is a replica's answer on PingSubject.
type Pong struct {
	Stage        string    `json:"stage"`
	Replica      string    `json:"replica"`
	PID          int       `json:"pid"`
	Started      time.Time `json:"started"`
	Handled      int64     `json:"handled"`
	Redelivered  int64     `json:"redelivered"`
	DeadLettered int64     `json:"deadLettered"`
	Failed       int64     `json:"failed"`
	// Version is the replica's podflow build (BuildVersion).
	Version string `json:"version,omitempty"`
}

// BuildVersion is the running binary's podflow version: its main
// module's version, or v0.0.0-dev for a development build, and the Go
// release it was built with.
func BuildVersion() string {
	v := "v0.0.0-dev"
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		v = bi.Main.Version
	}
	return v + " (" + runtime.Version() + ")"
}

// Metrics are a stage replica's Prometheus metrics and running counts. It
// is a bus.Observer.
type Metrics struct {
	Registry *prometheus.Registry
	stage    string
	handle   *prometheus.HistogramVec
	queue    *prometheus.HistogramVec
	settled  *prometheus.CounterVec
	redeliv  *prometheus.CounterVec
	dead     *prometheus.CounterVec

	handled, redelivered, deadLettered, failed atomic.Int64
}

var _ bus.Observer = (*Metrics)(nil)

// NewMetrics returns the metrics of a stage replica in a fresh registry
// (with the Go and process collectors).
func NewMetrics(stage string) *Metrics {
	r := prometheus.NewRegistry()
	r.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	buckets := prometheus.ExponentialBuckets(0.0001, 2, 18) // 100µs … 13s
	m := &Metrics{
		Registry: r,
		stage:    stage,
		handle: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "podflow_stage_handle_duration_seconds", Help: "Time a stage's handler took per event.", Buckets: buckets,
		}, []string{"stage", "event", "outcome"}),
		queue: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "podflow_stage_queue_duration_seconds", Help: "Time an event waited in the stream before its stage handled it.", Buckets: buckets,
		}, []string{"stage", "event"}),
		settled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "podflow_stage_events_total", Help: "Events settled by a stage, by outcome (Acked, Naked, DeadLettered, Released, AckFailed).",
		}, []string{"stage", "event", "outcome"}),
		redeliv: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "podflow_stage_redeliveries_total", Help: "Deliveries of an event after its first.",
		}, []string{"stage", "event"}),
		dead: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "podflow_stage_dead_letters_total", Help: "Events recorded on the dead-letter stream, by error code.",
		}, []string{"stage", "code"}),
	}
	r.MustRegister(m.handle, m.queue, m.settled, m.redeliv, m.dead)
	return m
}

// Observe records one settled message.
func (m *Metrics) Observe(o bus.Observation) {
	ev := string(o.Type)
	m.settled.WithLabelValues(m.stage, ev, string(o.Outcome)).Inc()
	if o.Handled > 0 {
		m.handle.WithLabelValues(m.stage, ev, string(o.Outcome)).Observe(o.Handled.Seconds())
	}
	if o.Queued > 0 {
		m.queue.WithLabelValues(m.stage, ev).Observe(o.Queued.Seconds())
	}
	if o.NumDelivered > 1 {
		m.redeliv.WithLabelValues(m.stage, ev).Inc()
		m.redelivered.Add(1)
	}
	switch o.Outcome {
	case bus.OutcomeAcked:
		m.handled.Add(1)
	case bus.OutcomeDeadLettered:
		m.dead.WithLabelValues(m.stage, o.Code).Inc()
		m.deadLettered.Add(1)
	case bus.OutcomeNaked, bus.OutcomeAckFailed:
		m.failed.Add(1)
	}
}

// serveMetrics serves /metrics on l until ctx is done; g owns it.
func serveMetrics(ctx context.Context, g *errgroup.Group, l net.Listener, reg *prometheus.Registry) {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	g.Go(func() error {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		return srv.Shutdown(sctx)
	})
	g.Go(func() error {
		if err := srv.Serve(l); !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("metrics: %w", err)
		}
		return nil
	})
}

// answerPings replies to PingSubject until ctx is done; g owns it.
func answerPings(ctx context.Context, g *errgroup.Group, nc *nats.Conn, env Env, m *Metrics, started time.Time) error {
	sub, err := nc.Subscribe(PingSubject, func(msg *nats.Msg) {
		if CheckReplySubject(msg.Reply) != nil {
			return // answer only an inbox, never an event subject
		}
		b, _ := json.Marshal(Pong{
			Stage: env.Stage, Replica: env.Replica, PID: os.Getpid(), Started: started,
			Handled: m.handled.Load(), Redelivered: m.redelivered.Load(), DeadLettered: m.deadLettered.Load(), Failed: m.failed.Load(),
			Version: BuildVersion(),
		})
		_ = msg.Respond(b)
	})
	if err == nil {
		err = bus.Subscribed(ctx, nc, sub) // answering from the stage's first moment
	}
	if err != nil {
		return fmt.Errorf("stage: subscribe %s: %w", PingSubject, err)
	}
	g.Go(func() error {
		<-ctx.Done()
		return sub.Unsubscribe()
	})
	return nil
}

// ServeMetrics serves m's /metrics on addr for a process that is not a
// stage (a node agent); it stops when ctx is done and returns the address.
func ServeMetrics(ctx context.Context, addr string, m *Metrics) (string, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("metrics: listen %s: %w", addr, err)
	}
	g, gctx := errgroup.WithContext(ctx)
	serveMetrics(gctx, g, l, m.Registry)
	go func() { _ = g.Wait() }() // ends with ctx
	return l.Addr().String(), nil
}

// AnswerPings answers PingSubject on conn for a process that is not a
// stage (a node agent; env names it) until ctx is done.
func AnswerPings(ctx context.Context, conn *bus.Conn, env Env, m *Metrics) error {
	g, gctx := errgroup.WithContext(ctx)
	if err := answerPings(gctx, g, conn.NATS(), env, m, time.Now()); err != nil {
		return err
	}
	go func() { _ = g.Wait() }() // ends with ctx
	return nil
}
