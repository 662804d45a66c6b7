package bus

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
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

// prepare fills env's id and time, and builds the message with every
// header of the publish: the event's type and traceparent, its
// Nats-Msg-Id and, when asked, the stream expected to store it.
func prepare(env *eventsv1.Envelope, opts []PublishOption) (*nats.Msg, error) {
	if err := ValidateEnvelope(env); err != nil {
		return nil, err
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
		return nil, fmt.Errorf("bus: marshal %s %q: %w", env.Type(), env.Id, err)
	}
	subj := o.subject
	if subj == "" {
		subj = Subject(env)
	}
	// The only headers are the Nats-Msg-Id and, when asked, the expected
	// stream; they share one array: one allocation, not one each. The type
	// is in the subject, the trace context in the envelope: a
	// "traceparent" header would also have the server parse every
	// message's headers for its own message tracing, which podflow does
	// not configure.
	h, vals := make(nats.Header, 2), make([]string, 0, 2)
	set := func(k, v string) {
		vals = append(vals, v)
		h[k] = vals[len(vals)-1 : len(vals) : len(vals)]
	}
	set(jetstream.MsgIDHeader, env.Id)
	if o.stream != "" {
		set(jetstream.ExpectedStreamHeader, o.stream)
	}
	return &nats.Msg{Subject: subj, Data: data, Header: h}, nil
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
	m, err := prepare(env, opts)
	if err != nil {
		return nil, err
	}
	return c.publishRetry(ctx, c.publishDeadline(ctx), m)
}

// publishDeadline is when a publish under ctx gives up: ctx's deadline,
// or Config.PublishTimeout from now when ctx has none.
func (c *Conn) publishDeadline(ctx context.Context) time.Time {
	if dl, ok := ctx.Deadline(); ok {
		return dl
	}
	return time.Now().Add(c.cfg.PublishTimeout)
}

// Backoff between the attempts of a publish or request that found nobody
// to answer (publishRetry, Request): doubled from the first up to the cap.
const (
	retryBackoffMin = 50 * time.Millisecond
	retryBackoffMax = time.Second
)

// publishRetry publishes m until a stream acknowledges it, ctx is done or
// deadline passes. A publish that no stream answered
// (ErrStreamUnavailable: the stream has no leader while its replicas
// elect one, the client's server is gone and it reconnects to another) is
// sent again after a backoff, each attempt bounded by
// Config.PublishAttemptTimeout: m's Nats-Msg-Id makes an attempt that was
// stored after all a duplicate, not a second event. Any other failure
// returns at once.
func (c *Conn) publishRetry(ctx context.Context, deadline time.Time, m *nats.Msg) (*jetstream.PubAck, error) {
	wait := retryBackoffMin
	for {
		ack, err := c.publishAttempt(ctx, deadline, m)
		if err == nil {
			return ack, nil
		}
		perr := publishError(m.Subject, err)
		if !errors.Is(perr, ErrStreamUnavailable) || !sleepUntil(ctx, deadline, wait) {
			return nil, perr
		}
		wait = min(2*wait, retryBackoffMax)
	}
}

// publishAttempt sends m once and waits for the stream's answer, until
// Config.PublishAttemptTimeout passes or deadline, whichever is first; a
// ctx that ends sooner ends it too. It is nats.go's JetStream PublishMsg
// without its options, its retries (publishRetry's) and, for a PubAck,
// its reflection (parsePubAck): the one context it makes is the
// attempt's.
func (c *Conn) publishAttempt(ctx context.Context, deadline time.Time, m *nats.Msg) (*jetstream.PubAck, error) {
	if attempt := time.Now().Add(c.cfg.PublishAttemptTimeout); attempt.Before(deadline) {
		deadline = attempt
	}
	if dl, ok := ctx.Deadline(); !ok || deadline.Before(dl) {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
	}
	resp, err := c.nc.RequestMsgWithContext(ctx, m)
	if err != nil {
		return nil, err
	}
	return parsePubAck(resp.Data)
}

// parsePubAck reads a stream's answer to a publish as nats.go's
// PublishMsg does: a PubAck, or the stream's error as a
// *jetstream.APIError, or jetstream.ErrInvalidJSAck. The PubAck the
// server writes is read without encoding/json (scanPubAck); anything
// else goes through it.
func parsePubAck(data []byte) (*jetstream.PubAck, error) {
	if ack, ok := scanPubAck(data); ok {
		return ack, nil
	}
	var resp struct {
		Error *jetstream.APIError `json:"error,omitempty"`
		*jetstream.PubAck
	}
	if err := json.Unmarshal(data, &resp); err != nil {
		return nil, jetstream.ErrInvalidJSAck
	}
	if resp.Error != nil {
		return nil, fmt.Errorf("nats: %w", resp.Error)
	}
	if resp.PubAck == nil || resp.PubAck.Stream == "" {
		return nil, jetstream.ErrInvalidJSAck
	}
	return resp.PubAck, nil
}

// scanPubAck reads a PubAck as nats-server writes it: one JSON object of
// the fields "stream", "seq", "duplicate" and "domain", without white
// space, escapes or non-ASCII bytes, the stream named. ok is false for
// anything else (an error, another field, another spelling), which
// parsePubAck leaves to encoding/json: what scanPubAck reads,
// encoding/json reads alike (FuzzScanPubAck).
func scanPubAck(b []byte) (ack *jetstream.PubAck, ok bool) {
	if len(b) < 2 || b[0] != '{' || b[len(b)-1] != '}' {
		return nil, false
	}
	ack = &jetstream.PubAck{}
	b = b[1 : len(b)-1]
	for len(b) > 0 {
		key, rest, ok := scanString(b)
		if !ok || len(rest) == 0 || rest[0] != ':' {
			return nil, false
		}
		b = rest[1:]
		switch string(key) {
		case "stream", "domain":
			var v []byte
			if v, b, ok = scanString(b); !ok {
				return nil, false
			}
			switch {
			case string(key) == "domain":
				ack.Domain = string(v)
			case string(v) == EventsStream:
				ack.Stream = EventsStream // most publishes': not allocated again
			default:
				ack.Stream = string(v)
			}
		case "seq":
			var n int
			for n < len(b) && b[n] >= '0' && b[n] <= '9' {
				n++
			}
			if n == 0 || n > 19 || (n > 1 && b[0] == '0') {
				return nil, false // none, maybe too large, or not JSON
			}
			var seq uint64 // < 10^19 < 2^64
			for _, c := range b[:n] {
				seq = seq*10 + uint64(c-'0')
			}
			ack.Sequence, b = seq, b[n:]
		case "duplicate":
			switch {
			case bytes.HasPrefix(b, []byte("true")):
				ack.Duplicate, b = true, b[4:]
			case bytes.HasPrefix(b, []byte("false")):
				ack.Duplicate, b = false, b[5:]
			default:
				return nil, false
			}
		default:
			return nil, false
		}
		switch {
		case len(b) == 0:
		case b[0] == ',' && len(b) > 1:
			b = b[1:]
		default:
			return nil, false
		}
	}
	return ack, ack.Stream != ""
}

// scanString reads a JSON string of printable ASCII without escapes at
// the start of b and returns its bytes and what follows.
func scanString(b []byte) (s, rest []byte, ok bool) {
	if len(b) == 0 || b[0] != '"' {
		return nil, nil, false
	}
	for i := 1; i < len(b); i++ {
		switch c := b[i]; {
		case c == '"':
			return b[1:i], b[i+1:], true
		case c < 0x20 || c >= 0x7f || c == '\\':
			return nil, nil, false
		}
	}
	return nil, nil, false
}

// sleepUntil waits d, or less when ctx ends or deadline comes first; it
// reports whether time is left for another attempt.
func sleepUntil(ctx context.Context, deadline time.Time, d time.Duration) bool {
	d = min(d, time.Until(deadline))
	if d <= 0 {
		return false
	}
	if !sleepCtx(ctx, d) {
		return false
	}
	return time.Now().Before(deadline)
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
		deadline := p.conn.publishDeadline(ctx)
		if !sleepUntil(ctx, deadline, retryBackoffMin) {
			return nil, perr
		}
		return p.conn.publishRetry(ctx, deadline, p.f.Msg())
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
	m, err := prepare(env, opts)
	if err != nil {
		return nil, err
	}
	f, err := c.js.PublishMsgAsync(m, jetstream.WithStallWait(c.cfg.PublishTimeout))
	if err != nil {
		return nil, publishError(m.Subject, err)
	}
	return &PubFuture{subject: m.Subject, f: f, conn: c}, nil
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
	if env.Payload == nil { // Type "": decoded payloads are never nil
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
