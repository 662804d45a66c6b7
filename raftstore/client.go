package raftstore

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/podflow/podflow/proto/storev1"
	"github.com/podflow/podflow/proto/vt"
	"google.golang.org/protobuf/proto"
)

// Client is the store's client over NATS request-reply. It is safe for
// concurrent use; it owns no goroutines except those of open Watches.
type Client struct {
	nc    *nats.Conn
	cfg   ClientConfig
	subj  subjects
	idPfx string
	idSeq atomic.Uint64
}

// NewClient returns a client of the store served on cfg.Subject. Zero fields
// of cfg take their DefaultClientConfig values. The caller owns nc.
func NewClient(nc *nats.Conn, cfg ClientConfig) (*Client, error) {
	if nc == nil {
		return nil, errors.New("raftstore: NewClient: nil NATS connection")
	}
	d := DefaultClientConfig()
	if cfg.Subject == "" {
		cfg.Subject = d.Subject
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = d.Timeout
	}
	if cfg.AttemptTimeout == 0 {
		cfg.AttemptTimeout = d.AttemptTimeout
	}
	if cfg.RetryBackoffMin == 0 {
		cfg.RetryBackoffMin = d.RetryBackoffMin
	}
	if cfg.RetryBackoffMax == 0 {
		cfg.RetryBackoffMax = max(d.RetryBackoffMax, cfg.RetryBackoffMin)
	}
	if cfg.WatchHeartbeatTimeout == 0 {
		cfg.WatchHeartbeatTimeout = d.WatchHeartbeatTimeout
	}
	if cfg.WatchBuffer == 0 {
		cfg.WatchBuffer = d.WatchBuffer
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("raftstore: invalid client config: %w", err)
	}
	var b [8]byte
	_, _ = crand.Read(b[:])
	return &Client{nc: nc, cfg: cfg, subj: subjectsFor(cfg.Subject), idPfx: hex.EncodeToString(b[:]) + "-"}, nil
}

// Get returns the key's current value; ErrNotFound if it does not exist.
func (c *Client) Get(ctx context.Context, key string, opts ...ReadOption) (*KV, error) {
	o := readOpts(opts)
	if err := validateKey(key); err != nil {
		return nil, err
	}
	resp, err := c.read(ctx, &storev1.ReadRequest{Key: key, Stale: o.stale, MinRevision: o.minRev}, o.stale)
	if err != nil {
		return nil, err
	}
	if len(resp.Kvs) != 1 {
		return nil, newError(storev1.Code_CODE_INTERNAL, key, "get returned %d keys", len(resp.Kvs))
	}
	return kvFromWire(resp.Kvs[0]), nil
}

// List returns the keys starting with prefix, sorted by key, and the
// revision the list was read at (watch from it to follow later changes).
// However many and large they are, they are the key space at that one
// revision: the replica streams the answer in chunks of a bus message at
// most, and List assembles them (a chunk lost or late makes it ask again).
func (c *Client) List(ctx context.Context, prefix string, opts ...ReadOption) ([]*KV, int64, error) {
	o := readOpts(opts)
	resp, err := c.readChunked(ctx, &storev1.ReadRequest{Key: prefix, Prefix: true, Stale: o.stale, Limit: int64(max(o.limit, 0)), ContinueAfter: o.after, MinRevision: o.minRev, Chunked: true}, o.stale)
	if err != nil {
		return nil, 0, err
	}
	out := make([]*KV, len(resp.Kvs))
	for i, kv := range resp.Kvs {
		out[i] = kvFromWire(kv)
	}
	return out, resp.Revision, nil
}

// Create writes key if it does not exist and returns the new revision;
// ErrAlreadyExists if it does.
func (c *Client) Create(ctx context.Context, key string, value []byte) (int64, error) {
	return c.write(ctx, &storev1.Command{
		Kind:     storev1.WriteKind_WRITE_KIND_CREATE,
		Compares: []*storev1.Compare{{Key: key, ModRevision: 0}},
		Ops:      []*storev1.Op{{Type: storev1.OpType_OP_TYPE_PUT, Key: key, Value: value}},
	})
}

// Update replaces key's value if its ModRevision is expectedModRev and
// returns the new revision; ErrConflict if it is not, ErrNotFound if the key
// does not exist.
func (c *Client) Update(ctx context.Context, key string, value []byte, expectedModRev int64) (int64, error) {
	if expectedModRev <= 0 {
		return 0, newError(storev1.Code_CODE_INVALID, key, "update needs an expected revision > 0, got %d", expectedModRev)
	}
	return c.write(ctx, &storev1.Command{
		Kind:     storev1.WriteKind_WRITE_KIND_UPDATE,
		Compares: []*storev1.Compare{{Key: key, ModRevision: expectedModRev}},
		Ops:      []*storev1.Op{{Type: storev1.OpType_OP_TYPE_PUT, Key: key, Value: value}},
	})
}

// Delete deletes key if its ModRevision is expectedModRev (0: whatever it
// is) and returns the delete's revision; ErrNotFound if the key does not
// exist, ErrConflict if the revision differs.
func (c *Client) Delete(ctx context.Context, key string, expectedModRev int64) (int64, error) {
	want := expectedModRev
	if want == 0 {
		want = -1
	}
	if want < -1 {
		return 0, newError(storev1.Code_CODE_INVALID, key, "delete expected revision %d", expectedModRev)
	}
	return c.write(ctx, &storev1.Command{
		Kind:     storev1.WriteKind_WRITE_KIND_DELETE,
		Compares: []*storev1.Compare{{Key: key, ModRevision: want}},
		Ops:      []*storev1.Op{{Type: storev1.OpType_OP_TYPE_DELETE, Key: key}},
	})
}

// Txn applies t atomically: when every Compare holds, every Op is applied at
// one new revision, which is returned (the current revision if the ops
// changed nothing). Otherwise it fails with ErrConflict and Error.Key names
// the first key whose compare failed.
func (c *Client) Txn(ctx context.Context, t Txn) (int64, error) {
	cmd := &storev1.Command{Kind: storev1.WriteKind_WRITE_KIND_TXN}
	for _, cmp := range t.Compares {
		cmd.Compares = append(cmd.Compares, &storev1.Compare{Key: cmp.Key, ModRevision: cmp.ModRevision})
	}
	for _, op := range t.Ops {
		var typ storev1.OpType
		switch op.Type {
		case OpPut:
			typ = storev1.OpType_OP_TYPE_PUT
		case OpDelete:
			typ = storev1.OpType_OP_TYPE_DELETE
		default:
			return 0, newError(storev1.Code_CODE_INVALID, op.Key, "op type %d", op.Type)
		}
		cmd.Ops = append(cmd.Ops, &storev1.Op{Type: typ, Key: op.Key, Value: op.Value})
	}
	return c.write(ctx, cmd)
}

// AddVoter adds (or re-addresses) a voting replica; it returns when the
// configuration change is committed.
func (c *Client) AddVoter(ctx context.Context, id, addr string) error {
	return c.admin(ctx, &storev1.AdminRequest{Action: &storev1.AdminRequest_AddVoter_{AddVoter: &storev1.AdminRequest_AddVoter{Id: id, Address: addr}}})
}

// AddNonvoter adds a non-voting replica (it receives the log and serves
// stale reads, but does not vote nor count for a quorum), or keeps one;
// a voter stays a voter. AddVoter promotes it.
func (c *Client) AddNonvoter(ctx context.Context, id, addr string) error {
	return c.admin(ctx, &storev1.AdminRequest{Action: &storev1.AdminRequest_AddVoter_{AddVoter: &storev1.AdminRequest_AddVoter{Id: id, Address: addr, Nonvoter: true}}})
}

// RemoveServer removes a replica from the cluster.
func (c *Client) RemoveServer(ctx context.Context, id string) error {
	return c.admin(ctx, &storev1.AdminRequest{Action: &storev1.AdminRequest_RemoveServer_{RemoveServer: &storev1.AdminRequest_RemoveServer{Id: id}}})
}

func (c *Client) admin(ctx context.Context, req *storev1.AdminRequest) error {
	data, err := proto.Marshal(req)
	if err != nil {
		return err
	}
	var resp storev1.AdminResponse
	// Membership changes are idempotent, so an unknown outcome is retried.
	return c.do(ctx, c.subj.admin, data, &resp, false, func() *storev1.Error { return resp.Error })
}

// RewriteEncrypted has the leader rewrite every value under the store's
// encryption configuration that is not sealed with its first provider's
// key (see Encryption: the step of a key rotation before the old key is
// dropped), and returns how many it rewrote. It waits for the whole
// rewrite, within ctx (without a deadline: ClientConfig.Timeout); an
// interrupted rewrite is completed by calling it again.
func (c *Client) RewriteEncrypted(ctx context.Context) (int64, error) {
	data, err := proto.Marshal(&storev1.AdminRequest{Action: &storev1.AdminRequest_RewriteEncrypted_{RewriteEncrypted: &storev1.AdminRequest_RewriteEncrypted{}}})
	if err != nil {
		return 0, err
	}
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	deadline, _ := ctx.Deadline()
	var resp storev1.AdminResponse
	// One attempt may take the whole deadline: a rewrite of many keys
	// outlasts AttemptTimeout, and a second one meanwhile would only
	// compete with it.
	err = c.doAttempts(ctx, c.subj.admin, data, &resp, false, time.Until(deadline), func() *storev1.Error { return resp.Error })
	return resp.Rewritten, err
}

// Status collects every reachable replica's status: it waits until every
// member of the configuration reported, or wait elapsed after the first
// answer, or ctx ends. Sorted by ID.
func (c *Client) Status(ctx context.Context, wait time.Duration) ([]*Status, error) {
	return c.status(ctx, wait, nil)
}

// StatusWithHash is Status with each replica's ContentHash: a hash of its
// whole key space at ContentHashRevision (a scan of every key on every
// replica: for checks, not for polling).
func (c *Client) StatusWithHash(ctx context.Context, wait time.Duration) ([]*Status, error) {
	body, err := proto.Marshal(&storev1.StatusRequest{ContentHash: true})
	if err != nil {
		return nil, err
	}
	return c.status(ctx, wait, body)
}

func (c *Client) status(ctx context.Context, wait time.Duration, body []byte) ([]*Status, error) {
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	inbox := c.nc.NewInbox()
	ch := make(chan *nats.Msg, 64)
	sub, err := c.nc.ChanSubscribe(inbox, ch)
	if err != nil {
		return nil, fmt.Errorf("raftstore: status: %w", err)
	}
	defer sub.Unsubscribe()
	if err := c.nc.PublishRequest(c.subj.status, inbox, body); err != nil {
		return nil, fmt.Errorf("raftstore: status: %w", err)
	}
	byID := map[string]*Status{}
	var members int
	var timeout <-chan time.Time
	for members == 0 || len(byID) < members {
		select {
		case m := <-ch:
			var w storev1.ReplicaStatus
			if proto.Unmarshal(m.Data, &w) != nil {
				continue
			}
			s := statusFromWire(&w)
			byID[s.ID] = s
			members = max(members, len(s.Servers))
			if timeout == nil {
				timeout = time.After(wait)
			}
		case <-timeout:
			members = len(byID)
		case <-ctx.Done():
			if len(byID) == 0 {
				return nil, fmt.Errorf("%w: status: %w", ErrUnavailable, ctx.Err())
			}
			members = len(byID)
		}
	}
	out := make([]*Status, 0, len(byID))
	for _, s := range byID {
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b *Status) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

// ack acknowledges a replica's message that asks for it: an empty message
// to its reply subject, when that is one of the store's acknowledgement
// subjects (acks.go). Any other reply subject is left alone, so whoever
// can publish into the client's inbox cannot make it publish elsewhere.
func (c *Client) ack(m *nats.Msg) {
	if strings.HasPrefix(m.Reply, c.subj.ack+".") {
		_ = m.Respond(nil)
	}
}

func readOpts(opts []ReadOption) readOptions {
	var o readOptions
	for _, f := range opts {
		f(&o)
	}
	return o
}

// named is subject followed by the client's User, if any (see
// ClientConfig.User).
func (c *Client) named(subject string) string {
	if c.cfg.User == "" {
		return subject
	}
	return subject + "." + c.cfg.User
}

func (c *Client) read(ctx context.Context, req *storev1.ReadRequest, stale bool) (*storev1.ReadResponse, error) {
	data, err := vt.Marshal(req)
	if err != nil {
		return nil, err
	}
	subject := c.named(c.subj.read)
	if stale {
		subject = c.named(c.subj.stale)
	}
	var resp storev1.ReadResponse
	if err := c.do(ctx, subject, data, &resp, false, func() *storev1.Error { return resp.Error }); err != nil {
		return nil, err
	}
	return &resp, nil
}

// readChunked sends a chunked read (a list) and assembles its answer,
// retrying as do does: no responders, NotLeader, Unavailable, and a chunk
// missing, out of order or later than AttemptTimeout after the previous
// one start the list again, until the deadline.
func (c *Client) readChunked(ctx context.Context, req *storev1.ReadRequest, stale bool) (*storev1.ReadResponse, error) {
	data, err := vt.Marshal(req)
	if err != nil {
		return nil, err
	}
	subject := c.named(c.subj.read)
	if stale {
		subject = c.named(c.subj.stale)
	}
	if len(data) > int(c.nc.MaxPayload()) {
		return nil, newError(storev1.Code_CODE_TOO_LARGE, "", "request is too large: %d bytes, more than the bus carries (%d)", len(data), c.nc.MaxPayload())
	}
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	backoff := c.cfg.RetryBackoffMin
	var last error
	for ctx.Err() == nil {
		resp, err := c.listAttempt(ctx, subject, data)
		switch {
		case err == nil:
			return resp, nil
		case errors.Is(err, ErrNotLeader), errors.Is(err, ErrUnavailable):
			last = err
		default:
			return nil, err
		}
		t := time.NewTimer(backoff/2 + rand.N(backoff/2+1))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
		backoff = min(2*backoff, c.cfg.RetryBackoffMax)
	}
	return nil, fmt.Errorf("%w: %w (last error: %v)", ErrUnavailable, ctx.Err(), last)
}

// listAttempt is one chunked read: its request on subject with a fresh
// inbox as the reply subject, and the chunks gathered from that inbox.
// Errors that are worth another attempt are ErrUnavailable or ErrNotLeader.
func (c *Client) listAttempt(ctx context.Context, subject string, data []byte) (*storev1.ReadResponse, error) {
	inbox := c.nc.NewInbox()
	// The replica sends at most a window of chunks ahead of our
	// acknowledgements, so a small channel holds them (SubscribeSync's
	// would be 64k entries, allocated for every list: 10 times the cost
	// of a small list). Were it full, the chunk is dropped and the gap
	// starts the list again.
	ch := make(chan *nats.Msg, 4*listWindowChunks)
	sub, err := c.nc.ChanSubscribe(inbox, ch)
	if err != nil {
		return nil, fmt.Errorf("%w: list subscribe: %w", ErrUnavailable, err)
	}
	defer sub.Unsubscribe()
	_ = sub.SetPendingLimits(-1, -1)
	if err := c.nc.PublishRequest(subject, inbox, data); err != nil {
		if errors.Is(err, nats.ErrConnectionClosed) {
			return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		return nil, newError(storev1.Code_CODE_UNAVAILABLE, "", "request %q: %v", subject, err)
	}
	var out *storev1.ReadResponse
	for seq := uint64(1); ; seq++ {
		var m *nats.Msg
		t := time.NewTimer(c.cfg.AttemptTimeout)
		select {
		case m = <-ch:
			t.Stop()
		case <-t.C:
			return nil, newError(storev1.Code_CODE_UNAVAILABLE, "", "no answer on %q within %s (chunk %d)", subject, c.cfg.AttemptTimeout, seq)
		case <-ctx.Done():
			t.Stop()
			return nil, newError(storev1.Code_CODE_UNAVAILABLE, "", "list on %q: %v", subject, ctx.Err())
		}
		if len(m.Data) == 0 && m.Header.Get("Status") == "503" {
			return nil, newError(storev1.Code_CODE_UNAVAILABLE, "", "no replica serves %q", subject)
		}
		var resp storev1.ReadResponse
		if err := vt.Unmarshal(m.Data, &resp); err != nil {
			return nil, newError(storev1.Code_CODE_INTERNAL, "", "decode response on %q: %v", subject, err)
		}
		c.ack(m) // the replica may send the next window
		if werr := fromWire(resp.Error); werr != nil {
			return nil, werr
		}
		if resp.Chunk != seq || (out != nil && resp.Revision != out.Revision) {
			return nil, newError(storev1.Code_CODE_UNAVAILABLE, "", "list on %q: chunk %d at revision %d, want chunk %d (a message was lost)", subject, resp.Chunk, resp.Revision, seq)
		}
		if out == nil {
			out = &resp
		} else {
			out.Kvs = append(out.Kvs, resp.Kvs...)
			out.More = resp.More
		}
		if resp.Last {
			return out, nil
		}
	}
}

func (c *Client) write(ctx context.Context, cmd *storev1.Command) (int64, error) {
	if err := validateCommand(&storev1.Command{IdempotencyKey: "x", Compares: cmd.Compares, Ops: cmd.Ops}); err != nil {
		return 0, err
	}
	cmd.IdempotencyKey = c.idPfx + strconv.FormatUint(c.idSeq.Add(1), 36)
	data, err := vt.Marshal(cmd)
	if err != nil {
		return 0, err
	}
	var resp storev1.WriteResponse
	if err := c.do(ctx, c.named(c.subj.write), data, &resp, true, func() *storev1.Error { return resp.Error }); err != nil {
		return 0, err
	}
	return resp.Revision, nil
}

func (c *Client) withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, c.cfg.Timeout)
}

// do sends req to subject until a definitive answer or the deadline. It
// retries no responders, NotLeader, Unavailable and Indeterminate answers;
// for a write (same bytes, so the same idempotency key) it also retries
// attempt timeouts, and reports ErrIndeterminate if the deadline ends the
// retries after the write may have been applied. What is not a write is
// safe to ask again: a read, or an idempotent membership change.
func (c *Client) do(ctx context.Context, subject string, req []byte, resp proto.Message, write bool, wireErr func() *storev1.Error) error {
	return c.doAttempts(ctx, subject, req, resp, write, c.cfg.AttemptTimeout, wireErr)
}

// doAttempts is do with attempts of the given timeout.
func (c *Client) doAttempts(ctx context.Context, subject string, req []byte, resp proto.Message, write bool, attempt time.Duration, wireErr func() *storev1.Error) error {
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	backoff := c.cfg.RetryBackoffMin
	maybeApplied := false
	var last error
	for ctx.Err() == nil {
		actx, acancel := context.WithTimeout(ctx, attempt)
		msg, err := c.nc.RequestWithContext(actx, subject, req)
		acancel()
		switch {
		case err == nil:
			if err := vt.Unmarshal(msg.Data, resp); err != nil {
				return newError(storev1.Code_CODE_INTERNAL, "", "decode response on %q: %v", subject, err)
			}
			werr := fromWire(wireErr())
			switch {
			case werr == nil:
				return nil
			case errors.Is(werr, ErrNotLeader), errors.Is(werr, ErrUnavailable):
				last = werr
			case errors.Is(werr, ErrIndeterminate) && write:
				maybeApplied, last = true, werr
			case errors.Is(werr, ErrIndeterminate):
				// Not a write (a read, or an idempotent admin action such
				// as a join): asking again is safe.
				last = werr
			default:
				return werr
			}
		case errors.Is(err, nats.ErrMaxPayload):
			return newError(storev1.Code_CODE_TOO_LARGE, "", "request is too large: %d bytes, more than the bus carries (%d)", len(req), c.nc.MaxPayload())
		case errors.Is(err, nats.ErrNoResponders):
			last = newError(storev1.Code_CODE_UNAVAILABLE, "", "no replica serves %q", subject)
		case ctx.Err() != nil:
			// The deadline ended this attempt; a write may have been applied.
			maybeApplied = maybeApplied || write
		case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout):
			maybeApplied = maybeApplied || write
			last = newError(storev1.Code_CODE_UNAVAILABLE, "", "no answer on %q within %s", subject, attempt)
		case errors.Is(err, nats.ErrConnectionClosed), errors.Is(err, nats.ErrBadSubscription):
			return fmt.Errorf("%w: %w", ErrUnavailable, err)
		default:
			last = fmt.Errorf("request %q: %w", subject, err)
		}
		if ctx.Err() != nil {
			break
		}
		t := time.NewTimer(backoff/2 + rand.N(backoff/2+1))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
		backoff = min(2*backoff, c.cfg.RetryBackoffMax)
	}
	if maybeApplied {
		return fmt.Errorf("%w: %w (last error: %v)", ErrIndeterminate, ctx.Err(), last)
	}
	return fmt.Errorf("%w: %w (last error: %v)", ErrUnavailable, ctx.Err(), last)
}
