package bus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	eventsv1 "github.com/podflow/podflow/proto/eventsv1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Handler handles one delivery. Returning nil acknowledges the message,
// so the handler's side effects must be durable by then (the store
// write committed, the next event's PubAck received). Returning an
// error retries the message after a delay, unless the error is
// Permanent or the message is on its last delivery, in which case it is
// recorded on the dead-letter stream and terminated.
//
// Handlers run concurrently (up to RunnerConfig.Concurrency) and must
// be idempotent: a message may be delivered again after a crash or a
// lost ack. ctx is cancelled when the runner gives up waiting for
// in-flight handlers at shutdown (RunnerConfig.DrainTimeout).
type Handler func(ctx context.Context, d *Delivery) error

// Delivery is one delivery of an event to a stage.
type Delivery struct {
	// Envelope is the decoded event, decoded for this delivery alone: a
	// handler may take its payload's messages and change them (a
	// redelivery decodes its own).
	Envelope *eventsv1.Envelope
	// Subject the event was published on.
	Subject string
	// NumDelivered counts deliveries of this message, 1 on the first.
	NumDelivered uint64
	// StreamSeq is the message's sequence in its stream.
	StreamSeq uint64
	// Stored is when the stream stored the message.
	Stored time.Time
	// Received is when this runner started handling the delivery.
	Received time.Time
	// Stage and Replica handling it.
	Stage   string
	Replica string

	msg jetstream.Msg
}

// InProgress tells the server the handler is still working, resetting
// the message's AckWait. Long handlers call it periodically.
func (d *Delivery) InProgress() error {
	if d.msg == nil {
		return nil
	}
	return d.msg.InProgress()
}

// Next builds the event that handling this delivery produces: it copies
// the pod's identity (pod uid, request id, namespace, name, node,
// generation), continues the trace with a child span, and records the
// handling (stage, replica, caused_by, handled_start/end, redeliveries)
// so the pod's timeline can be rebuilt from the stream alone. Attempt is
// 1; a stage that retries a step with a new outcome (e.g. a scheduling
// attempt after a conflict) raises it, which changes the eventsv1.EventID.
//
// payload must be one of the Envelope's payload messages; anything else
// is a programming error and panics (use SetPayload to check).
func (d *Delivery) Next(payload proto.Message) *eventsv1.Envelope {
	p := d.Envelope
	env := &eventsv1.Envelope{
		PodUid:       p.GetPodUid(),
		RequestId:    p.GetRequestId(),
		Namespace:    p.GetNamespace(),
		PodName:      p.GetPodName(),
		NodeName:     p.GetNodeName(),
		Generation:   p.GetGeneration(),
		Stage:        d.Stage,
		Replica:      d.Replica,
		Attempt:      1,
		Traceparent:  ChildTraceparent(p.GetTraceparent()),
		CausedBy:     p.GetId(),
		HandledStart: timeOf(d.Received),
		HandledEnd:   timestamppb.Now(),
		Redeliveries: int32(min(d.NumDelivered-1, 1<<31-1)),
	}
	if err := SetPayload(env, payload); err != nil {
		panic(err)
	}
	return env
}

// Outcome is how the runner settled a message.
type Outcome string

const (
	// OutcomeAcked: the handler succeeded and the message was acked.
	OutcomeAcked Outcome = "Acked"
	// OutcomeNaked: the handler failed; the message will be redelivered
	// after the backoff delay.
	OutcomeNaked Outcome = "Naked"
	// OutcomeDeadLettered: the message was recorded on the dead-letter
	// stream and terminated (Permanent error, last delivery failed,
	// undecodable, or found by the max-deliveries advisory).
	OutcomeDeadLettered Outcome = "DeadLettered"
	// OutcomeReleased: the message was received but not handled because
	// the runner was shutting down; it was naked for immediate
	// redelivery.
	OutcomeReleased Outcome = "Released"
	// OutcomeAckFailed: the handler succeeded but the ack could not be
	// confirmed; the message may be delivered again.
	OutcomeAckFailed Outcome = "AckFailed"
	// OutcomeDeadLetterFailed: a max-deliveries advisory arrived but its
	// dead-letter record could not be stored (Err says why).
	OutcomeDeadLetterFailed Outcome = "DeadLetterFailed"
)

// Observation describes one settled message.
type Observation struct {
	Stage, Replica string
	Outcome        Outcome
	Type           eventsv1.Type
	Subject        string
	StreamSeq      uint64
	NumDelivered   uint64
	// Queued is the time from storage to the start of handling.
	Queued time.Duration
	// Handled is the handler's run time (0 when it did not run).
	Handled time.Duration
	// Code is the error code of a failure ("" on success).
	Code string
	Err  error
}

// Observer receives an Observation for every message a runner settles.
// Observe is called concurrently from handler goroutines and must not
// block: hand the data to a metrics library or a buffered channel.
type Observer interface {
	Observe(Observation)
}

// ObserverFunc adapts a function to Observer.
type ObserverFunc func(Observation)

// Observe calls f(o).
func (f ObserverFunc) Observe(o Observation) { f(o) }

// RunnerConfig configures a stage runner.
type RunnerConfig struct {
	// Stream the consumer reads. Default EventsStream.
	Stream string
	// Consumer is the durable pull consumer shared by every replica of
	// the stage. It must exist (Provision creates it); the runner never
	// creates anything.
	Consumer string
	// Stage and Replica identify this runner in published events and
	// dead letters.
	Stage   string
	Replica string
	// Concurrency bounds handlers running at once (and messages buffered
	// by this replica). Default 16.
	Concurrency int
	// MaxDeliver must equal the consumer's MaxDeliver: the runner
	// dead-letters a message that fails on its MaxDeliver-th delivery.
	// Default 5.
	MaxDeliver int
	// Backoff is the nak delay after the n-th failed delivery
	// (Backoff[n-1], the last entry repeating). Default 100ms, 500ms,
	// 2s, 5s.
	Backoff []time.Duration
	// AckWait is the consumer's AckWait (used by ConsumerSpec). Default
	// 30s.
	AckWait time.Duration
	// MaxAckPending of the consumer (used by ConsumerSpec). Default 1024.
	MaxAckPending int
	// FilterSubjects of the consumer (used by ConsumerSpec).
	FilterSubjects []string
	// DrainTimeout bounds how long Run waits, after its ctx is done, for
	// in-flight handlers before cancelling their context. Default 10s.
	DrainTimeout time.Duration
	// DeadLetterSubject receives DeadLetter envelopes. Default
	// DLQSubject(Stage).
	DeadLetterSubject string
	// AsyncAck sends acks without waiting for the server's confirmation.
	// Default false: every ack is confirmed (DoubleAck), so a handled
	// message is not redelivered because an ack was lost.
	AsyncAck bool
	// Observer, if set, sees every settled message.
	Observer Observer
}

// DefaultRunnerConfig returns defaults for a stage whose replicas share
// the durable consumer named after the stage.
func DefaultRunnerConfig(stage string) RunnerConfig {
	host, _ := os.Hostname()
	return RunnerConfig{
		Stream:        EventsStream,
		Consumer:      stage,
		Stage:         stage,
		Replica:       host + "-" + strconv.Itoa(os.Getpid()),
		Concurrency:   16,
		MaxDeliver:    5,
		Backoff:       []time.Duration{100 * time.Millisecond, 500 * time.Millisecond, 2 * time.Second, 5 * time.Second},
		AckWait:       30 * time.Second,
		MaxAckPending: 1024,
		DrainTimeout:  10 * time.Second,
	}
}

// Validate checks the configuration.
func (c RunnerConfig) Validate() error {
	switch {
	case c.Stream == "":
		return invalidf("runner: Stream is required")
	case c.Consumer == "":
		return invalidf("runner: Consumer is required")
	case c.Stage == "":
		return invalidf("runner: Stage is required")
	case c.Concurrency < 1:
		return invalidf("runner: Concurrency (%d) must be at least 1", c.Concurrency)
	case c.MaxDeliver < 1:
		return invalidf("runner: MaxDeliver (%d) must be at least 1: a stage needs a bounded number of deliveries to dead-letter", c.MaxDeliver)
	case len(c.Backoff) == 0:
		return invalidf("runner: Backoff is empty")
	case c.AckWait <= 0:
		return invalidf("runner: AckWait (%s) must be positive", c.AckWait)
	case c.DrainTimeout <= 0:
		return invalidf("runner: DrainTimeout (%s) must be positive", c.DrainTimeout)
	case c.MaxAckPending < 0:
		return invalidf("runner: MaxAckPending (%d) is negative", c.MaxAckPending)
	}
	for i, b := range c.Backoff {
		if b < 0 {
			return invalidf("runner: Backoff[%d] (%s) is negative", i, b)
		}
	}
	return nil
}

// ConsumerSpecs returns ConsumerSpec and AdvisoryConsumerSpec: what to
// provision for this stage.
func (c RunnerConfig) ConsumerSpecs() []ConsumerSpec {
	return []ConsumerSpec{c.ConsumerSpec(), c.AdvisoryConsumerSpec()}
}

// AdvisoryConsumerSpec is the stage's durable consumer of its
// max-deliveries advisories on AdvisoriesStream. When it exists, the
// runner records messages whose handler never returned even if every
// replica was down when their last delivery expired; without it the
// runner falls back to a core NATS subscription.
func (c RunnerConfig) AdvisoryConsumerSpec() ConsumerSpec {
	return ConsumerSpec{
		Stream:         AdvisoriesStream,
		Durable:        c.Consumer + "-maxdeliver",
		Description:    "podflow stage " + c.Stage + ": max-deliveries advisories",
		FilterSubjects: []string{MaxDeliveriesSubject(c.Stream, c.Consumer)},
		AckWait:        c.AckWait,
		MaxDeliver:     -1,
		MaxAckPending:  64,
	}
}

// ConsumerSpec returns the consumer this runner expects, for Provision.
func (c RunnerConfig) ConsumerSpec() ConsumerSpec {
	return ConsumerSpec{
		Stream:         c.Stream,
		Durable:        c.Consumer,
		Description:    "podflow stage " + c.Stage,
		FilterSubjects: c.FilterSubjects,
		AckWait:        c.AckWait,
		MaxDeliver:     c.MaxDeliver,
		MaxAckPending:  c.MaxAckPending,
	}
}

func (c RunnerConfig) backoff(numDelivered uint64) time.Duration {
	i := int(min(numDelivered, uint64(len(c.Backoff)))) - 1
	return c.Backoff[max(i, 0)]
}

// Runner runs a Handler over a durable pull consumer: one replica of a
// stage.
type Runner struct {
	conn    *Conn
	cfg     RunnerConfig
	h       Handler
	started atomic.Bool
	dlqSubj string

	mu      sync.Mutex
	streams map[string]jetstream.Stream // for the advisory path
}

// NewRunner returns a runner; it connects to nothing until Run.
func NewRunner(conn *Conn, cfg RunnerConfig, h Handler) (*Runner, error) {
	if conn == nil || h == nil {
		return nil, invalidf("runner: nil connection or handler")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	r := &Runner{conn: conn, cfg: cfg, h: h, dlqSubj: cfg.DeadLetterSubject, streams: map[string]jetstream.Stream{}}
	if r.dlqSubj == "" {
		r.dlqSubj = DLQSubject(cfg.Stage)
	}
	return r, nil
}

// Run pulls and handles messages until ctx is done, then drains: it
// stops pulling, releases (naks) messages received but not started,
// waits up to DrainTimeout for in-flight handlers, settles what they
// return, and flushes the acks. A message still unacked when Run
// returns is redelivered to another replica after AckWait. Run returns
// nil after a drain, or an error if the consumer is missing, differs
// from the configuration, or is deleted while running. Run may be
// called once.
func (r *Runner) Run(ctx context.Context) error {
	if !r.started.CompareAndSwap(false, true) {
		return ErrRunnerStarted
	}
	js := r.conn.JetStream()
	cons, err := js.Consumer(ctx, r.cfg.Stream, r.cfg.Consumer)
	if err != nil {
		return fmt.Errorf("bus: runner %q: consumer %q on stream %q: %w", r.cfg.Stage, r.cfg.Consumer, r.cfg.Stream, err)
	}
	ci := cons.CachedInfo().Config
	if ci.AckPolicy != jetstream.AckExplicitPolicy || ci.MaxDeliver != r.cfg.MaxDeliver {
		return invalidf("runner %q: consumer %q has ack policy %s and MaxDeliver %d; want explicit and %d",
			r.cfg.Stage, r.cfg.Consumer, ci.AckPolicy, ci.MaxDeliver, r.cfg.MaxDeliver)
	}

	// Handlers outlive ctx by up to DrainTimeout.
	hctx, cancelHandlers := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelHandlers()

	// Messages whose last delivery was never acked (the replica died)
	// are reported by the server's max-deliveries advisory; one replica
	// of the stage records each in the dead-letter stream.
	stopAdvisories, err := r.watchMaxDeliveries(ctx, hctx)
	if err != nil {
		return err
	}
	defer stopAdvisories()

	iter, err := cons.Messages(jetstream.PullMaxMessages(r.cfg.Concurrency))
	if err != nil {
		return fmt.Errorf("bus: runner %q: pull: %w", r.cfg.Stage, err)
	}

	// Pulling stops when ctx is done or the connection is closed for
	// good (reconnects gave up, or Close was called under us).
	pullCtx, stopPull := context.WithCancel(ctx)
	defer stopPull()
	nc := r.conn.NATS()
	closedCh := nc.StatusChanged(nats.CLOSED)
	var connClosed atomic.Bool
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		select {
		case _, ok := <-closedCh:
			if ok {
				connClosed.Store(true)
				stopPull()
			}
		case <-pullCtx.Done():
		}
	}()
	defer func() {
		stopPull()
		<-watched
		nc.RemoveStatusListener(closedCh)
	}()
	if nc.IsClosed() {
		connClosed.Store(true)
		stopPull()
	}

	// Concurrency workers, started once, handle what the loop pulls: a
	// goroutine per message would grow a fresh stack through the decode,
	// the handler and the ack every time (4-10% of a stage's CPU at
	// saturation); a worker's stack stays grown.
	var (
		wg      sync.WaitGroup
		sem     = make(chan struct{}, r.cfg.Concurrency)
		work    = make(chan jetstream.Msg, r.cfg.Concurrency)
		workers sync.WaitGroup
		runErr  error
	)
	for range r.cfg.Concurrency {
		workers.Add(1)
		go func() {
			defer workers.Done()
			// A worker's handlers derive their contexts (a publish's, a
			// store call's) from the worker's own: they join and leave
			// its small set of children, not one every worker locks
			// and churns.
			wctx, cancel := context.WithCancel(hctx)
			defer cancel()
			for msg := range work {
				r.handle(wctx, msg)
				wg.Done()
				<-sem
			}
		}()
	}
	defer func() {
		close(work)
		workers.Wait()
	}()
loop:
	for {
		// Take a slot before pulling, so no message waits on us while
		// all handlers are busy.
		select {
		case sem <- struct{}{}:
		case <-pullCtx.Done():
			break loop
		}
		msg, err := iter.Next(jetstream.NextContext(pullCtx))
		if err != nil {
			<-sem
			switch {
			case pullCtx.Err() != nil:
				break loop
			case errors.Is(err, jetstream.ErrMsgIteratorClosed), errors.Is(err, jetstream.ErrConsumerDeleted),
				errors.Is(err, jetstream.ErrConsumerNotFound):
				runErr = fmt.Errorf("bus: runner %q: %w", r.cfg.Stage, err)
				break loop
			}
			// Anything else (a missed heartbeat, a reconnect) is
			// recovered by the iterator; pause briefly not to spin.
			select {
			case <-pullCtx.Done():
				break loop
			case <-time.After(100 * time.Millisecond):
			}
			continue
		}
		wg.Add(1)
		work <- msg // never blocks: a slot is held for it
	}

	if connClosed.Load() && runErr == nil {
		runErr = fmt.Errorf("bus: runner %q: %w", r.cfg.Stage, nats.ErrConnectionClosed)
	}

	// Drain: stop pulling; what the iterator already buffered is
	// released for immediate redelivery — except a message on its last
	// delivery, which a nak would exhaust unhandled: that one is handled
	// here like an in-flight message.
	iter.Drain()
	released := time.Now().Add(r.cfg.DrainTimeout)
	for time.Now().Before(released) {
		msg, err := iter.Next(jetstream.NextMaxWait(time.Until(released)))
		if err != nil {
			break
		}
		if meta, err := msg.Metadata(); err == nil && meta.NumDelivered >= uint64(r.cfg.MaxDeliver) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r.handle(hctx, msg)
			}()
			continue
		}
		_ = msg.Nak()
		r.observe(Observation{Outcome: OutcomeReleased, Subject: msg.Subject()}, msg)
	}
	iter.Stop()

	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(r.cfg.DrainTimeout):
		cancelHandlers()
		<-done
	}
	fctx, cancel := context.WithTimeout(context.Background(), r.cfg.DrainTimeout)
	defer cancel()
	if err := r.conn.NATS().FlushWithContext(fctx); err != nil && runErr == nil && !r.conn.NATS().IsClosed() {
		runErr = fmt.Errorf("bus: runner %q: flush acks: %w", r.cfg.Stage, err)
	}
	return runErr
}

// handle runs the handler on one message and settles it.
func (r *Runner) handle(ctx context.Context, msg jetstream.Msg) {
	d := &Delivery{Subject: msg.Subject(), Received: time.Now(), Stage: r.cfg.Stage, Replica: r.cfg.Replica, msg: msg}
	if meta, err := msg.Metadata(); err == nil {
		d.NumDelivered, d.StreamSeq, d.Stored = meta.NumDelivered, meta.Sequence.Stream, meta.Timestamp
	}
	ob := Observation{Subject: d.Subject, StreamSeq: d.StreamSeq, NumDelivered: d.NumDelivered}
	if !d.Stored.IsZero() {
		ob.Queued = d.Received.Sub(d.Stored)
	}
	env, err := DecodeEnvelope(msg.Data())
	if err != nil {
		r.deadLetter(ctx, msg, d, nil, CodeDecode, err, &ob)
		return
	}
	d.Envelope = env
	ob.Type = env.Type()

	err = r.call(ctx, d)
	ob.Handled = time.Since(d.Received)
	switch {
	case err == nil:
		ob.Outcome = OutcomeAcked
		if aerr := r.ack(msg); aerr != nil {
			ob.Outcome, ob.Err = OutcomeAckFailed, aerr
		}
		r.observe(ob, msg)
	case IsPermanent(err):
		r.deadLetter(ctx, msg, d, env, CodeOf(err), err, &ob) // Permanent or Forbidden
	case d.NumDelivered >= uint64(r.cfg.MaxDeliver):
		r.deadLetter(ctx, msg, d, env, CodeMaxDeliver, err, &ob)
	default:
		_ = msg.NakWithDelay(r.cfg.backoff(d.NumDelivered))
		ob.Outcome, ob.Code, ob.Err = OutcomeNaked, CodeOf(err), err
		r.observe(ob, msg)
	}
}

// call runs the handler, turning a panic into an error.
func (r *Runner) call(ctx context.Context, d *Delivery) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = &Error{Code: CodePanic, Message: fmt.Sprintf("handler panic: %v\n%s", p, debug.Stack())}
		}
	}()
	return r.h(ctx, d)
}

func (r *Runner) ack(msg jetstream.Msg) error {
	if r.cfg.AsyncAck {
		return msg.Ack()
	}
	// jetstream.Msg.DoubleAck as nats.go's request with a timeout, which
	// waits on a pooled timer where DoubleAck's context costs a timer
	// and its allocations per message. The ack goes out even when the
	// handlers' context was cancelled at the end of a drain: the
	// handler's work is done.
	reply := msg.Reply()
	if reply == "" {
		return jetstream.ErrMsgNoReply
	}
	_, err := r.conn.NATS().Request(reply, ackBody, r.cfg.AckWait)
	return err
}

// ackBody is JetStream's ack of a message (what Msg.Ack sends).
var ackBody = []byte("+ACK")

// deadLetter records msg on the dead-letter stream, then terminates it.
// If the record cannot be stored the message is naked instead, so it is
// never dropped silently.
func (r *Runner) deadLetter(ctx context.Context, msg jetstream.Msg, d *Delivery, env *eventsv1.Envelope, code string, cause error, ob *Observation) {
	stream := r.cfg.Stream
	if meta, err := msg.Metadata(); err == nil {
		stream = meta.Stream
	}
	dl := &eventsv1.DeadLetter{
		Stream: stream, Consumer: r.cfg.Consumer, StreamSeq: d.StreamSeq, Subject: d.Subject,
		Deliveries: d.NumDelivered, Error: cause.Error(), Code: code, Data: msg.Data(),
	}
	ob.Code, ob.Err = code, cause
	if err := r.publishDeadLetter(ctx, dl, env); err != nil {
		_ = msg.NakWithDelay(r.cfg.backoff(d.NumDelivered))
		ob.Outcome, ob.Err = OutcomeNaked, fmt.Errorf("dead-letter %s/%d: %w (cause: %v)", stream, d.StreamSeq, err, cause)
		r.observe(*ob, msg)
		return
	}
	_ = msg.TermWithReason(code)
	ob.Outcome = OutcomeDeadLettered
	r.observe(*ob, msg)
}

// publishDeadLetter stores a DeadLetter envelope. Its id is derived from
// the stream, consumer and sequence, so the runner and the advisory path
// record one message once.
func (r *Runner) publishDeadLetter(ctx context.Context, dl *eventsv1.DeadLetter, orig *eventsv1.Envelope) error {
	env := &eventsv1.Envelope{
		Id:      fmt.Sprintf("dlq/%s/%s/%d", dl.Stream, dl.Consumer, dl.StreamSeq),
		Stage:   r.cfg.Stage,
		Replica: r.cfg.Replica,
		Attempt: 1,
	}
	if orig != nil {
		env.PodUid, env.RequestId, env.Namespace, env.PodName, env.NodeName = orig.GetPodUid(), orig.GetRequestId(), orig.GetNamespace(), orig.GetPodName(), orig.GetNodeName()
		env.Generation, env.CausedBy = orig.GetGeneration(), orig.GetId()
		env.Traceparent = ChildTraceparent(orig.GetTraceparent())
	}
	env.Payload = &eventsv1.Envelope_DeadLetter{DeadLetter: dl}
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.conn.cfg.PublishTimeout)
	defer cancel()
	_, err := r.conn.Publish(pctx, env, WithSubject(r.dlqSubj))
	return err
}

// maxDeliveriesAdvisory is the server's
// io.nats.jetstream.advisory.v1.max_deliver event.
type maxDeliveriesAdvisory struct {
	Stream     string `json:"stream"`
	Consumer   string `json:"consumer"`
	StreamSeq  uint64 `json:"stream_seq"`
	Deliveries uint64 `json:"deliveries"`
}

// watchMaxDeliveries starts handling max-deliveries advisories: from
// the stage's durable consumer on AdvisoriesStream when it is
// provisioned (advisories wait there while no replica is alive), else
// from a core NATS queue subscription (advisories published while no
// replica listens are lost). It returns the function that stops it.
func (r *Runner) watchMaxDeliveries(ctx, hctx context.Context) (func(), error) {
	spec := r.cfg.AdvisoryConsumerSpec()
	cons, err := r.conn.JetStream().Consumer(ctx, spec.Stream, spec.Durable)
	switch {
	case err == nil:
		cc, err := cons.Consume(func(m jetstream.Msg) {
			if err := r.onMaxDeliveries(hctx, m.Data()); err != nil {
				_ = m.NakWithDelay(r.cfg.backoff(uint64(len(r.cfg.Backoff))))
				return
			}
			_ = m.Ack()
		}, jetstream.PullMaxMessages(16))
		if err != nil {
			return nil, fmt.Errorf("bus: runner %q: consume %q: %w", r.cfg.Stage, spec.Durable, err)
		}
		return func() {
			cc.Stop()
			<-cc.Closed()
		}, nil
	case errors.Is(err, jetstream.ErrConsumerNotFound), errors.Is(err, jetstream.ErrStreamNotFound):
		subj := MaxDeliveriesSubject(r.cfg.Stream, r.cfg.Consumer)
		sub, err := r.conn.NATS().QueueSubscribe(subj, "podflow-dlq-"+r.cfg.Consumer, func(m *nats.Msg) {
			_ = r.onMaxDeliveries(hctx, m.Data)
		})
		if err != nil {
			return nil, fmt.Errorf("bus: runner %q: subscribe %q: %w", r.cfg.Stage, subj, err)
		}
		return func() { _ = sub.Unsubscribe() }, nil
	default:
		return nil, fmt.Errorf("bus: runner %q: advisory consumer %q: %w", r.cfg.Stage, spec.Durable, err)
	}
}

// onMaxDeliveries records a message whose deliveries ran out without
// the runner settling it (its handler never returned: the replica died
// or hung past AckWait). It returns an error when the record could not
// be stored (a malformed advisory is dropped: nil).
func (r *Runner) onMaxDeliveries(ctx context.Context, data []byte) error {
	var a maxDeliveriesAdvisory
	if err := json.Unmarshal(data, &a); err != nil || a.StreamSeq == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, r.conn.cfg.PublishTimeout)
	defer cancel()
	ob := Observation{Outcome: OutcomeDeadLettered, Code: CodeMaxDeliver, StreamSeq: a.StreamSeq, NumDelivered: a.Deliveries}
	dl := &eventsv1.DeadLetter{
		Stream: a.Stream, Consumer: a.Consumer, StreamSeq: a.StreamSeq, Deliveries: a.Deliveries, Code: CodeMaxDeliver,
		Error: fmt.Sprintf("no ack after %d deliveries (handler never returned)", a.Deliveries),
	}
	var orig *eventsv1.Envelope
	stream, err := r.stream(ctx, a.Stream)
	if err == nil {
		var raw *jetstream.RawStreamMsg
		raw, err = stream.GetMsg(ctx, a.StreamSeq)
		if err == nil {
			dl.Subject, dl.Data, ob.Subject = raw.Subject, raw.Data, raw.Subject
			if env, err := DecodeEnvelope(raw.Data); err == nil {
				orig, ob.Type = env, env.Type()
			}
		}
	}
	if err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
		// The message may still exist: try again later rather than
		// record it without its data.
		ob.Outcome, ob.Err = OutcomeDeadLetterFailed, err
		r.observe(ob, nil)
		return err
	}
	ob.Err = &Error{Code: CodeMaxDeliver, Message: dl.Error}
	if err := r.publishDeadLetter(ctx, dl, orig); err != nil {
		ob.Outcome, ob.Err = OutcomeDeadLetterFailed, err
		r.observe(ob, nil)
		return err
	}
	r.observe(ob, nil)
	return nil
}

func (r *Runner) stream(ctx context.Context, name string) (jetstream.Stream, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if s, ok := r.streams[name]; ok {
		return s, nil
	}
	s, err := r.conn.JetStream().Stream(ctx, name)
	if err != nil {
		return nil, err
	}
	r.streams[name] = s
	return s, nil
}

func (r *Runner) observe(o Observation, msg jetstream.Msg) {
	if r.cfg.Observer == nil {
		return
	}
	o.Stage, o.Replica = r.cfg.Stage, r.cfg.Replica
	if msg != nil && o.NumDelivered == 0 {
		if meta, err := msg.Metadata(); err == nil {
			o.StreamSeq, o.NumDelivered = meta.Sequence.Stream, meta.NumDelivered
		}
	}
	r.cfg.Observer.Observe(o)
}
