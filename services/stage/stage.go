package stage

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"golang.org/x/sync/errgroup"
	"google.golang.org/protobuf/proto"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/proto/apiv1"
	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/eventsv1"
	"github.com/podflow/podflow/proto/vt"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/objects"
)

// Env is what every stage replica is given: the roles it plays on the bus
// and the store, and its name.
type Env struct {
	// Pub publishes the stage's events and replies (NewPublisher over the
	// bus; stagetest.Publisher in unit tests).
	Pub Publisher
	// Store is the object store (objects.New over raftstore;
	// objects.FromKV(objectstest.New()) in unit tests).
	Store *objects.Store
	// NATS is core NATS, for a stage that serves request-reply subjects or
	// asks nodes (api); only its Start uses it, and it is nil in unit tests.
	NATS    *nats.Conn
	Stage   string
	Replica string
	Log     *slog.Logger
}

// NewEnv returns the Env of a stage replica on a bus connection and a
// store.
func NewEnv(c *bus.Conn, st *objects.Store, stage, replica string, log *slog.Logger) Env {
	return Env{Pub: NewPublisher(c), NATS: c.NATS(), Store: st, Stage: stage, Replica: replica, Log: log}
}

// Handler handles one delivery of the stage's input events.
type Handler interface {
	Handle(ctx context.Context, d *bus.Delivery) error
}

// Starter is implemented by stages with background work (informers,
// request-reply subscriptions). Start launches it on g and returns once
// the stage is ready to handle events (caches synced).
type Starter interface {
	Start(ctx context.Context, g *errgroup.Group) error
}

// Reconciler is implemented by stages that heal from the store: Reconcile
// is called once the stage started and then every ResyncPeriod, so that a
// lost event is healed.
type Reconciler interface {
	Reconcile(ctx context.Context) error
}

// Config configures a stage replica.
type Config struct {
	Runner       bus.RunnerConfig
	ResyncPeriod time.Duration // 0 disables periodic reconciliation
	// MetricsAddr serves Prometheus /metrics when set ("127.0.0.1:0"
	// picks a port; OnMetrics learns which).
	MetricsAddr string
	OnMetrics   func(addr string)
	// Metrics, when set, is used instead of fresh metrics (a stage adds
	// its own collectors to its Registry).
	Metrics *Metrics
	// Tracing, when set, puts an OpenTelemetry span around each handling.
	Tracing *Tracing
	// NoConsumer runs a controller stage, which consumes no events: Run
	// starts no runner (Runner is not used) and runs the stage's Start,
	// its Reconcile every ResyncPeriod and the pings.
	NoConsumer bool
}

// Validate checks the Config.
func (c Config) Validate() error {
	if c.ResyncPeriod < 0 {
		return fmt.Errorf("stage: ResyncPeriod (%s) is negative", c.ResyncPeriod)
	}
	if c.NoConsumer {
		return nil
	}
	return c.Runner.Validate()
}

// Run runs the stage replica on conn (its durable consumer, and the
// answers to PingSubject) until ctx is done or a part of it fails; it
// drains the runner before returning.
func Run(ctx context.Context, conn *bus.Conn, env Env, h Handler, cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	log := env.Log
	if log == nil {
		log = slog.Default()
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	g, gctx := errgroup.WithContext(ctx)
	fail := func(err error) error {
		cancel()
		return errors.Join(err, g.Wait())
	}
	m := cfg.Metrics
	if m == nil {
		m = NewMetrics(env.Stage)
	}
	if cfg.Runner.Observer == nil {
		cfg.Runner.Observer = m
	}
	if cfg.MetricsAddr != "" {
		l, err := net.Listen("tcp", cfg.MetricsAddr)
		if err != nil {
			return fmt.Errorf("stage %s: metrics: %w", env.Stage, err)
		}
		serveMetrics(gctx, g, l, m.Registry)
		if cfg.OnMetrics != nil {
			cfg.OnMetrics(l.Addr().String())
		}
	}
	if s, ok := h.(Starter); ok {
		if err := s.Start(gctx, g); err != nil {
			return fail(fmt.Errorf("stage %s: start: %w", env.Stage, err))
		}
	}
	// Answered once started (caches synced, the api process's bootstrap
	// pass made): `podflow up` takes an answer for ready.
	if err := answerPings(gctx, g, conn.NATS(), env, m, time.Now()); err != nil {
		return fail(err)
	}
	if !cfg.NoConsumer {
		handle := bus.Handler(h.Handle)
		if cfg.Tracing != nil {
			handle = cfg.Tracing.wrap(env.Stage, handle)
		}
		runner, err := bus.NewRunner(conn, cfg.Runner, handle)
		if err != nil {
			return fail(err)
		}
		g.Go(func() error { return runner.Run(gctx) })
	}
	if r, ok := h.(Reconciler); ok {
		g.Go(func() error { return reconcileLoop(gctx, r, cfg.ResyncPeriod, log.With("stage", env.Stage)) })
	}
	err := g.Wait()
	if ctx.Err() != nil && (err == nil || errors.Is(err, context.Canceled)) {
		return nil
	}
	return err
}

func reconcileLoop(ctx context.Context, r Reconciler, period time.Duration, log *slog.Logger) error {
	for {
		if err := r.Reconcile(ctx); err != nil && ctx.Err() == nil {
			log.Warn("reconcile failed", "err", err)
		}
		if period <= 0 {
			<-ctx.Done()
			return nil
		}
		select {
		case <-time.After(period):
		case <-ctx.Done():
			return nil
		}
	}
}

// Reject ends a pod request that a stage refuses: PodRejected with st on
// the stream (the flight recorder), then st as the answer to replyTo. The
// api, admission and persistence stages all end a request this way.
func Reject(ctx context.Context, env Env, d *bus.Delivery, st *corev1.Status, replyTo string) error {
	if err := env.Pub.Publish(ctx, d.Next(&eventsv1.PodRejected{Status: st, ReplyTo: replyTo})); err != nil {
		return err
	}
	return Reply(env, replyTo, st, nil)
}

// Reply sends the outcome of a request to its reply subject (no-op when
// there is none). Replying twice is harmless: the requester takes the
// first answer.
//
// replyTo must be an inbox (CheckReplySubject): a stage answers with its
// own bus permissions, so a reply subject the requester chose must never
// make it publish on an event subject. Any other subject is dropped and
// logged, not an error (the outcome is recorded; there is nobody to tell).
func Reply(env Env, replyTo string, st *corev1.Status, obj proto.Message) error {
	if replyTo == "" {
		return nil
	}
	if err := CheckReplySubject(replyTo); err != nil {
		if env.Log != nil {
			env.Log.Warn("reply dropped", "err", err, "status", st.GetCode())
		}
		return nil
	}
	// vt.Marshal takes and refuses what proto.Marshal does, without its
	// reflection: every pod a client creates is answered here.
	resp := &apiv1.Response{Status: st}
	if obj != nil {
		b, err := vt.Marshal(obj)
		if err != nil {
			return err
		}
		resp.Kind = string(obj.ProtoReflect().Descriptor().Name())
		resp.Object = b
	}
	b, err := vt.Marshal(resp)
	if err != nil {
		return err
	}
	return env.Pub.Reply(replyTo, b)
}

// ErrReplySubject is wrapped by CheckReplySubject.
var ErrReplySubject = errors.New("stage: reply subject is not an inbox")

// InboxPrefix starts every reply subject a stage answers on (bus gives
// each user's connections _INBOX.<user>.; a plain connection _INBOX.).
const InboxPrefix = "_INBOX."

// CheckReplySubject returns nil for an inbox subject: "_INBOX." and one or
// more non-empty tokens, none a wildcard or holding white space.
func CheckReplySubject(subject string) error {
	rest, ok := strings.CutPrefix(subject, InboxPrefix)
	if !ok || rest == "" {
		return fmt.Errorf("%w: %q", ErrReplySubject, subject)
	}
	for _, tok := range strings.Split(rest, ".") {
		if tok == "" || tok == "*" || tok == ">" || strings.ContainsAny(tok, " \t\r\n") {
			return fmt.Errorf("%w: %q", ErrReplySubject, subject)
		}
	}
	return nil
}

// Transient reports whether a store error is worth retrying (the store is
// between leaders, or the outcome of a write is unknown).
func Transient(err error) bool {
	return errors.Is(err, raftstore.ErrUnavailable) || errors.Is(err, raftstore.ErrNotLeader) ||
		errors.Is(err, raftstore.ErrIndeterminate) || errors.Is(err, context.DeadlineExceeded)
}
