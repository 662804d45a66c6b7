package bus

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	eventsv1 "github.com/podflow/podflow/proto/eventsv1"
	"github.com/podflow/podflow/proto/vt"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// PublishOption adjusts one publish.
type PublishOption func(*publishOpts)

type publishOpts struct {
	subject string
	stream  string
}

// WithSubject publishes on subject instead of Subject(env).
func WithSubject(subject string) PublishOption {
	return func(o *publishOpts) { o.subject = subject }
}

// WithExpectStream makes the publish fail unless stream stores it.
func WithExpectStream(stream string) PublishOption {
	return func(o *publishOpts) { o.stream = stream }
}

// prepare fills env's id and time, and builds the message.
func prepare(env *eventsv1.Envelope, opts []PublishOption) (*nats.Msg, []jetstream.PublishOpt, error) {
	if err := ValidateEnvelope(env); err != nil {
		return nil, nil, err
	}
	var o publishOpts
	for _, opt := range opts {
		opt(&o)
	}
	if env.Id == "" {
		env.Id = eventsv1.EventID(env)
	}
	if env.Time == nil {
		env.Time = timestamppb.Now()
	}
	data, err := vt.Marshal(env)
	if err != nil {
		return nil, nil, fmt.Errorf("bus: marshal %s %q: %w", env.Type(), env.Id, err)
	}
	subj := o.subject
	if subj == "" {
		subj = Subject(env)
	}
	// The only header is the Nats-Msg-Id (WithMsgID). The type is in
	// the subject, the trace context in the envelope: a "traceparent"
	// header would also have the server parse every message's headers
	// for its own message tracing, which podflow does not configure.
	m := &nats.Msg{Subject: subj, Data: data}
	jsOpts := []jetstream.PublishOpt{jetstream.WithMsgID(env.Id)}
	if o.stream != "" {
		jsOpts = append(jsOpts, jetstream.WithExpectStream(o.stream))
	}
	return m, jsOpts, nil
}

// Publish stores env in its stream and waits for the PubAck. It fills
// env.Id with eventsv1.EventID(env) when empty (so a retried publish of the same
// event is deduplicated: the PubAck then says Duplicate) and env.Time
// with the current time when unset; env is modified in place.
//
// A ctx without deadline is bounded by Config.PublishTimeout. A publish
// no stream answers is retried until ctx is done (see publishRetry), so a
// stream electing a new leader, or a server failing over, is not seen;
// what still fails to reach a stream by then matches ErrStreamUnavailable.
func (c *Conn) Publish(ctx context.Context, env *eventsv1.Envelope, opts ...PublishOption) (*jetstream.PubAck, error) {
	m, jsOpts, err := prepare(env, opts)
	if err != nil {
		return nil, err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.cfg.PublishTimeout)
		defer cancel()
	}
	return c.publishRetry(ctx, m, jsOpts)
}

// Backoff between the attempts of a publish or request that found nobody
// to answer (publishRetry, Request): doubled from the first up to the cap.
const (
	retryBackoffMin = 50 * time.Millisecond
	retryBackoffMax = time.Second
)

// publishRetry publishes m until a stream acknowledges it or ctx is done.
// A publish that no stream answered (ErrStreamUnavailable: the stream has
// no leader while its replicas elect one, the client's server is gone
// and it reconnects to another) is sent again after a backoff, each
// attempt bounded by Config.PublishAttemptTimeout: m's Nats-Msg-Id makes
// an attempt that was stored after all a duplicate, not a second event.
// Any other failure returns at once.
func (c *Conn) publishRetry(ctx context.Context, m *nats.Msg, jsOpts []jetstream.PublishOpt) (*jetstream.PubAck, error) {
	wait := retryBackoffMin
	for {
		actx, cancel := context.WithTimeout(ctx, c.cfg.PublishAttemptTimeout)
		ack, err := c.js.PublishMsg(actx, m, jsOpts...)
		cancel()
		if err == nil {
			return ack, nil
		}
		perr := publishError(m.Subject, err)
		if !errors.Is(perr, ErrStreamUnavailable) || !sleepCtx(ctx, wait) {
			return nil, perr
		}
		wait = min(2*wait, retryBackoffMax)
	}
}

// sleepCtx waits d, or less when ctx ends first; it reports whether ctx
// still leaves time for another attempt.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < d {
		d = time.Until(dl)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return ctx.Err() == nil
	}
}

// publishError classifies a publish failure: "nobody stored it" becomes
// ErrStreamUnavailable; anything else (a rejected expectation, a closed
// connection) is wrapped as is.
func publishError(subject string, err error) error {
	var apiErr *jetstream.APIError
	switch {
	case errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamMessageExceedsMaximum,
		errors.Is(err, nats.ErrMaxPayload):
		return &Error{Code: CodeMessageTooLarge, Message: fmt.Sprintf("publish to %q: %v", subject, err), err: err}
	case errors.As(err, &apiErr) && apiErr.ErrorCode == jsErrStoreFailed && streamFull(apiErr.Description):
		streamFullRefusals.Add(1)
		return &Error{Code: CodeStreamFull, Message: fmt.Sprintf("publish to %q: the stream is full (%s) and refuses new messages rather than evict unprocessed ones", subject, apiErr.Description), err: err}
	case errors.Is(err, jetstream.ErrNoStreamResponse),
		errors.Is(err, nats.ErrNoResponders),
		errors.Is(err, nats.ErrTimeout),
		errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, jetstream.ErrStreamNotFound):
		return unavailable(subject, err)
	case errors.As(err, &apiErr) && apiErr.Code == 503:
		return unavailable(subject, err)
	}
	return fmt.Errorf("bus: publish to %q: %w", subject, err)
}

// jsErrStoreFailed is JetStream's "storing a message failed" error code
// (JSStreamStoreFailedF); its description is the store's error.
const jsErrStoreFailed jetstream.ErrorCode = 10077

// streamFull reports whether a store failure is a DiscardNew stream at its
// limits: the description is one of nats-server's own limit errors.
func streamFull(desc string) bool {
	return desc == server.ErrMaxBytes.Error() || desc == server.ErrMaxMsgs.Error() || desc == server.ErrMaxMsgsPerSubject.Error()
}

// streamFullRefusals counts publishes refused by a full stream, in this
// process: the alarm (see StreamFullRefusals).
var streamFullRefusals atomic.Int64

// StreamFullRefusals returns how many publishes of this process a full
// stream refused (ErrStreamFull): an alarm for metrics; any increase
// means the pipeline is refusing work.
func StreamFullRefusals() int64 { return streamFullRefusals.Load() }

// PubFuture is the pending result of PublishAsync.
type PubFuture struct {
	subject string
	f       jetstream.PubAckFuture
	conn    *Conn
	opts    []jetstream.PublishOpt
}

// Wait blocks until the PubAck arrives, the publish fails, or ctx is done.
// A publish that no stream answered is sent again, as Publish does, until
// a stream acknowledges it or ctx is done (without a deadline, for
// Config.PublishTimeout more).
func (p *PubFuture) Wait(ctx context.Context) (*jetstream.PubAck, error) {
	select {
	case ack := <-p.f.Ok():
		return ack, nil
	case err := <-p.f.Err():
		perr := publishError(p.subject, err)
		if !errors.Is(perr, ErrStreamUnavailable) {
			return nil, perr
		}
		if _, ok := ctx.Deadline(); !ok {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, p.conn.cfg.PublishTimeout)
			defer cancel()
		}
		if !sleepCtx(ctx, retryBackoffMin) {
			return nil, perr
		}
		return p.conn.publishRetry(ctx, p.f.Msg(), p.opts)
	case <-ctx.Done():
		return nil, publishError(p.subject, ctx.Err())
	}
}

// PublishAsync is Publish without waiting for the PubAck: it returns as
// soon as the message is queued (blocking briefly when
// Config.AsyncMaxPending PubAcks are outstanding). Call Wait on the
// result, or PublishAsyncComplete, before relying on the event being
// stored.
func (c *Conn) PublishAsync(env *eventsv1.Envelope, opts ...PublishOption) (*PubFuture, error) {
	m, jsOpts, err := prepare(env, opts)
	if err != nil {
		return nil, err
	}
	f, err := c.js.PublishMsgAsync(m, append(slices.Clip(jsOpts), jetstream.WithStallWait(c.cfg.PublishTimeout))...)
	if err != nil {
		return nil, publishError(m.Subject, err)
	}
	return &PubFuture{subject: m.Subject, f: f, conn: c, opts: jsOpts}, nil
}

// PublishAsyncComplete waits until every PublishAsync of this connection
// has its PubAck or error, or ctx is done.
func (c *Conn) PublishAsyncComplete(ctx context.Context) error {
	select {
	case <-c.js.PublishAsyncComplete():
		return nil
	case <-ctx.Done():
		return fmt.Errorf("bus: %d async publishes pending: %w", c.js.PublishAsyncPending(), ctx.Err())
	}
}

// DecodeEnvelope unmarshals a message body. Errors match ErrDecode.
func DecodeEnvelope(data []byte) (*eventsv1.Envelope, error) {
	env := &eventsv1.Envelope{}
	if err := vt.Unmarshal(data, env); err != nil {
		return nil, &Error{Code: CodeDecode, Message: err.Error(), err: err}
	}
	if env.Type() == "" {
		return nil, &Error{Code: CodeDecode, Message: "envelope has no payload"}
	}
	return env, nil
}

// DecodeEvents unmarshals a message body into the events it stands for:
// the envelope and, for a node's PodStatusReport, the steps it carries
// (eventsv1.Unfold), in order. What reads the stream as a flight recorder
// (trace, the console, streams, the bench) reads it through this.
func DecodeEvents(data []byte) ([]*eventsv1.Envelope, error) {
	env, err := DecodeEnvelope(data)
	if err != nil {
		return nil, err
	}
	return eventsv1.Unfold(env), nil
}

// timeOf converts a possibly-zero time to a timestamp (nil when zero).
func timeOf(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

// Request sends data on subject and waits for the first answer, as nats'
// RequestWithContext, bounded by ctx. While nobody serves the subject
// (nats.ErrNoResponders: the servers are failing over, or the only
// replicas of a service restart) it sends the request again after a
// backoff until ctx is done: nobody received it, so a second send is
// never a second request. Any other failure returns at once.
func (c *Conn) Request(ctx context.Context, subject string, data []byte) (*nats.Msg, error) {
	wait := retryBackoffMin
	var noResponders error
	for {
		msg, err := c.nc.RequestWithContext(ctx, subject, data)
		switch {
		case err == nil:
			return msg, nil
		case errors.Is(err, nats.ErrNoResponders):
			noResponders = err
			if !sleepCtx(ctx, wait) {
				return nil, err
			}
			wait = min(2*wait, retryBackoffMax)
		case noResponders != nil && ctx.Err() != nil:
			return nil, noResponders // ctx ended while sending again
		default:
			return nil, err
		}
	}
}
