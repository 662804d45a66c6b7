package raftstore

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	metrics "github.com/hashicorp/go-metrics"
	"github.com/hashicorp/raft"
	wal "github.com/hashicorp/raft-wal"
	walmetrics "github.com/hashicorp/raft-wal/metrics"
	"github.com/nats-io/nats.go"
	"github.com/podflow/podflow/proto/storev1"
	"github.com/podflow/podflow/proto/vt"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// queueGroup is the NATS queue group of the subjects every replica serves.
const queueGroup = "raftstore"

// Node is one store replica: a raft server over a raft-wal log, serving the
// store's NATS subjects. Create it with NewNode, run it with Start and stop
// it with Shutdown.
type Node struct {
	cfg  Config
	subj subjects
	fsm  *fsm
	log  hclog.Logger

	store    *walStore
	walStats *walmetrics.AtomicCollector
	unlock   func() // releases the data dir's LOCK
	count    counters
	// wire holds the encodings of recent events for the watch streams.
	wire wireCache
	// wake wakes the watch streams (watchWake).
	wake   wake
	trans  *guardedTransport
	raft   *raft.Raft
	ctx    context.Context // cancelled by Shutdown
	cancel context.CancelFunc
	wg     sync.WaitGroup // every goroutine the node starts but request handlers
	sem    chan struct{}  // bounds in-flight requests
	idle   chan func()    // request workers waiting for a request (dispatch)
	// reqs counts request handlers; Shutdown waits for them while raft still
	// runs, because raft leaves futures buffered in its apply channel
	// (BatchApplyCh) unanswered forever once it is shut down.
	reqs      sync.WaitGroup
	reqMu     sync.RWMutex
	reqClosed bool
	verify    *verifier
	// ackPrefix is where this replica receives its streams'
	// acknowledgements (acks.go), routed by acks.
	ackPrefix string
	acks      acks

	mu         sync.Mutex
	subs       []*nats.Subscription // served by every replica
	leaderSubs []*nats.Subscription // served while leader
	// servingTerm is the term in which this replica, as leader, completed a
	// Barrier (so its state holds every earlier committed write); 0 when it
	// is not serving leader subjects.
	servingTerm atomic.Uint64

	started  atomic.Bool
	shutdown atomic.Bool
	// noSpace is the NOSPACE alarm: raised when this replica, as leader,
	// refused a write for the quota; lowered when a write fits again.
	noSpace atomic.Bool
}

// NewNode validates cfg and returns an unstarted Node.
func NewNode(cfg Config) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("raftstore: invalid config: %w", err)
	}
	out := cfg.LogOutput
	if out == nil {
		out = os.Stderr
	}
	level := cfg.LogLevel
	if level == "" {
		level = "warn"
	}
	f := newFSM(cfg.HistoryRevisions, cfg.HistoryBytes, cfg.DedupEntries)
	f.enc = cfg.Encryption
	subj := subjectsFor(cfg.Subject)
	return &Node{
		cfg:       cfg,
		subj:      subj,
		fsm:       f,
		log:       hclog.New(&hclog.LoggerOptions{Name: "raftstore/" + cfg.ID, Output: out, Level: hclog.LevelFromString(level)}),
		sem:       make(chan struct{}, cfg.MaxInFlight),
		idle:      make(chan func()),
		ackPrefix: newAckPrefix(subj),
		acks:      acks{waiting: map[string]chan *nats.Msg{}},
	}, nil
}

// Start opens the data directory, starts raft (bootstrapping a new cluster
// from Config.Bootstrap when the directory is empty), serves the store's
// subjects, and with Config.Join asks the cluster to add this replica. ctx
// bounds the start-up only; the node runs until Shutdown.
func (n *Node) Start(ctx context.Context) (err error) {
	if !n.started.CompareAndSwap(false, true) {
		return errors.New("raftstore: node already started")
	}
	n.ctx, n.cancel = context.WithCancel(context.Background())
	defer func() {
		if err != nil {
			_ = n.Shutdown()
			if n.trans == nil && n.cfg.RaftListener != nil { // not yet the transport's to close
				_ = n.cfg.RaftListener.Close()
			}
		}
	}()
	if err := os.MkdirAll(n.cfg.DataDir, privateDirMode); err != nil {
		return fmt.Errorf("raftstore: create data dir %q: %w", n.cfg.DataDir, err)
	}
	if err := securePrivateTree(n.cfg.DataDir, n.log, true); err != nil {
		return fmt.Errorf("raftstore: data dir: %w", err)
	}
	if n.unlock, err = lockDataDir(n.cfg.DataDir); err != nil {
		return fmt.Errorf("raftstore: %w", err)
	}
	n.walStats = walmetrics.NewAtomicCollector(wal.MetricDefinitions)
	n.store, err = openLogStore(n.cfg.DataDir, n.cfg.NoSync, n.cfg.LogSegmentBytes, n.log.Named("wal"), n.walStats)
	if err != nil {
		return fmt.Errorf("raftstore: open log store: %w", err)
	}
	files, err := raft.NewFileSnapshotStoreWithLogger(n.cfg.DataDir, n.cfg.SnapshotRetain, n.log.Named("snapshots"))
	if err != nil {
		return fmt.Errorf("raftstore: open snapshot store: %w", err)
	}
	snaps := &privateSnapshots{FileSnapshotStore: files, dir: filepath.Join(n.cfg.DataDir, "snapshots"), log: n.log}
	// raft-wal's meta database and raft's snapshots directory were just
	// created with modes open to others: close them before anything is
	// written there.
	if err := securePrivateTree(n.cfg.DataDir, n.log, false); err != nil {
		return fmt.Errorf("raftstore: data dir: %w", err)
	}
	var advertise net.Addr
	if n.cfg.AdvertiseAddr != "" {
		if advertise, err = net.ResolveTCPAddr("tcp", n.cfg.AdvertiseAddr); err != nil {
			return fmt.Errorf("raftstore: advertise address %q: %w", n.cfg.AdvertiseAddr, err)
		}
	}
	stream, err := n.streamLayer(advertise)
	if err != nil {
		return fmt.Errorf("raftstore: raft transport on %q: %w", n.cfg.RaftAddr, err)
	}
	trans := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream: stream, MaxPool: 4, Timeout: 10 * time.Second, Logger: n.log.Named("transport"),
		ServerAddressProvider: n.cfg.peerAddrs(),
	})
	n.trans = &guardedTransport{NetworkTransport: trans}
	existing, err := raft.HasExistingState(n.store, n.store, snaps)
	if err != nil {
		return fmt.Errorf("raftstore: inspect raft state: %w", err)
	}
	rc := n.cfg.raftConfig()
	rc.Logger = n.log.Named("raft")
	if !existing && len(n.cfg.Bootstrap) > 0 {
		var conf raft.Configuration
		for _, p := range n.cfg.Bootstrap {
			addr := p.Address
			if p.ID == n.cfg.ID {
				addr = string(n.trans.LocalAddr())
			}
			conf.Servers = append(conf.Servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(p.ID), Address: raft.ServerAddress(addr)})
		}
		if err := raft.BootstrapCluster(rc, n.store, n.store, snaps, n.trans, conf); err != nil {
			return fmt.Errorf("raftstore: bootstrap: %w", err)
		}
	}
	logs, err := newLogCache(logCacheEntries, logCacheBytes, n.store)
	if err != nil {
		return fmt.Errorf("raftstore: log cache: %w", err)
	}
	n.raft, err = raft.NewRaft(rc, n.fsm, logs, n.store, snaps, n.trans)
	if err != nil {
		return fmt.Errorf("raftstore: start raft: %w", err)
	}
	n.verify = &verifier{r: n.raft, goFunc: n.goFunc}
	if n.cfg.WatchCoalesce > 0 { // before any watch stream starts
		next := n.fsm.changes()
		n.goFunc(func() { n.coalesceWakes(next) })
	}

	for _, s := range []struct {
		subject, queue string
		h              func(*nats.Msg)
	}{
		{n.subj.stale, queueGroup, n.async(n.handleStaleRead)},
		{n.subj.stale + ".*", queueGroup, n.async(n.ownReplies(n.handleStaleRead))}, // named readers
		{n.subj.watch, queueGroup, n.async(n.handleWatch)},
		{n.subj.watch + ".*", queueGroup, n.async(n.ownReplies(n.handleWatch))},
		{n.subj.status, "", n.handleStatus},
		{n.ackPrefix + ".>", "", n.acks.deliver},
	} {
		sub, err := n.cfg.Conn.QueueSubscribe(s.subject, s.queue, s.h)
		if err != nil {
			return fmt.Errorf("raftstore: subscribe %q: %w", s.subject, err)
		}
		_ = sub.SetPendingLimits(-1, -1)
		n.mu.Lock()
		n.subs = append(n.subs, sub)
		n.mu.Unlock()
	}
	n.goFunc(n.leadership)
	n.goFunc(n.paceSnapshots)

	if n.cfg.Join && !existing {
		if err := n.join(ctx); err != nil {
			return err
		}
	}
	return nil
}

// join asks the leader to add this replica as a voter, retrying until it
// succeeds or ctx ends.
func (n *Node) join(ctx context.Context) error {
	c, err := NewClient(n.cfg.Conn, ClientConfig{
		Subject: n.cfg.Subject, Timeout: time.Minute, AttemptTimeout: 5 * time.Second,
		RetryBackoffMin: 50 * time.Millisecond, RetryBackoffMax: time.Second,
		WatchHeartbeatTimeout: time.Second, WatchBuffer: 1,
	})
	if err != nil {
		return err
	}
	if err := c.AddVoter(ctx, n.cfg.ID, string(n.trans.LocalAddr())); err != nil {
		return fmt.Errorf("raftstore: join as %q: %w", n.cfg.ID, err)
	}
	return nil
}

// Shutdown stops serving, ends watches, and stops raft. It is idempotent.
func (n *Node) Shutdown() error {
	if !n.started.Load() || !n.shutdown.CompareAndSwap(false, true) {
		return nil
	}
	n.cancel()
	n.mu.Lock()
	for _, s := range append(n.subs, n.leaderSubs...) {
		_ = s.Unsubscribe()
	}
	n.subs, n.leaderSubs = nil, nil
	n.mu.Unlock()
	n.servingTerm.Store(0)
	// Let in-flight requests finish while raft runs: raft answers every
	// enqueued write (committed, or NotLeader after stepping down).
	n.reqMu.Lock()
	n.reqClosed = true
	n.reqMu.Unlock()
	n.reqs.Wait()
	if n.verify != nil {
		n.verify.stop() // while raft runs, so its round is answered
	}
	var errs []error
	if n.raft != nil {
		if err := n.raft.Shutdown().Error(); err != nil {
			errs = append(errs, fmt.Errorf("raft shutdown: %w", err))
		}
	}
	n.wg.Wait()
	if n.trans != nil {
		n.trans.quiesce() // no heartbeat may touch the log store once it closes
		// Close pooled outbound connections too, so that peers' connection
		// handlers see EOF instead of waiting for the next RPC.
		n.trans.CloseStreams()
		if err := n.trans.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close transport: %w", err))
		}
	}
	if n.store != nil {
		if err := n.store.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close log store: %w", err))
		}
	}
	if n.unlock != nil {
		n.unlock()
	}
	return errors.Join(errs...)
}

// goFunc runs f on a goroutine counted by the node's WaitGroup.
func (n *Node) goFunc(f func()) {
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		f()
	}()
}

// async returns a message handler that serves each message on its own
// goroutine, at most MaxInFlight at once; when the limit is reached it blocks
// the subscription, so NATS buffers the excess.
func (n *Node) async(h func(*nats.Msg)) func(*nats.Msg) {
	return func(m *nats.Msg) {
		select {
		case n.sem <- struct{}{}:
		case <-n.ctx.Done():
			return
		}
		n.reqMu.RLock()
		defer n.reqMu.RUnlock()
		if n.reqClosed {
			<-n.sem
			return
		}
		n.reqs.Add(1)
		n.dispatch(func() {
			defer func() { <-n.sem; n.reqs.Done() }()
			h(m)
		})
	}
}

// workerIdle is how long a request worker waits for the next request
// before it exits.
const workerIdle = 10 * time.Second

// dispatch runs f on an idle request worker, or on a new one. Workers are
// kept, not a goroutine started per request: a new goroutine grows its
// stack through the decode and the handler every time, which was 7% of a
// busy leader's CPU. They are counted by the node's WaitGroup and exit
// when idle for workerIdle or at shutdown. Called under reqMu's read lock
// before reqClosed, so the WaitGroup's Add precedes Shutdown's Wait.
func (n *Node) dispatch(f func()) {
	select {
	case n.idle <- f:
		return
	default:
	}
	n.goFunc(func() {
		t := time.NewTimer(workerIdle)
		defer t.Stop()
		for {
			f()
			t.Reset(workerIdle)
			select {
			case f = <-n.idle:
			case <-t.C:
				return
			case <-n.ctx.Done():
				return
			}
		}
	})
}

// leadership subscribes to the leader-only subjects after winning an
// election and completing a Barrier in the new term, and unsubscribes when
// leadership is lost. It polls as well as listening to LeaderCh, which keeps
// only the latest value.
func (n *Node) leadership() {
	tick := time.NewTicker(min(n.cfg.HeartbeatTimeout/2, 250*time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-n.raft.LeaderCh():
		case <-tick.C:
		}
		term := n.raft.CurrentTerm()
		leader := n.raft.State() == raft.Leader
		switch {
		case leader && n.servingTerm.Load() != term:
			if err := n.waitFuture(n.raft.Barrier(n.cfg.ElectionTimeout * 5)); err != nil {
				n.log.Warn("barrier after election failed", "term", term, "error", err)
				continue
			}
			if n.raft.CurrentTerm() != term {
				continue
			}
			n.servingTerm.Store(term)
			if err := n.subscribeLeader(); err != nil {
				n.log.Error("subscribe leader subjects", "error", err)
				n.servingTerm.Store(0)
			}
		case !leader && n.servingTerm.Load() != 0:
			n.servingTerm.Store(0)
			n.unsubscribeLeader()
		}
	}
}

// waitFuture waits for f until the node shuts down. hashicorp/raft leaves
// a barrier unanswered when it shuts down after committing it and before
// its FSM goroutine took it (the future has no shutdown channel), and
// Shutdown waits for the goroutine that asked: so the answer is awaited
// apart, and given up with the node. That waiter then stays parked on the
// dead future, once, as the node ends.
func (n *Node) waitFuture(f raft.Future) error {
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	select {
	case err := <-done:
		return err
	case <-n.ctx.Done():
		return n.ctx.Err()
	}
}

func (n *Node) subscribeLeader() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.leaderSubs) > 0 || n.shutdown.Load() {
		return nil
	}
	for _, s := range []struct {
		subject string
		h       func(*nats.Msg)
	}{
		{n.subj.write, n.async(n.handleWrite)},
		{n.subj.write + ".*", n.async(n.ownReplies(n.handleWrite))}, // named writers
		{n.subj.read, n.async(n.handleRead)},
		{n.subj.read + ".*", n.async(n.ownReplies(n.handleRead))},
		{n.subj.admin, n.async(n.handleAdmin)},
	} {
		sub, err := n.cfg.Conn.QueueSubscribe(s.subject, queueGroup, s.h)
		if err != nil {
			return fmt.Errorf("subscribe %q: %w", s.subject, err)
		}
		_ = sub.SetPendingLimits(-1, -1)
		n.leaderSubs = append(n.leaderSubs, sub)
	}
	// Make sure the server has the interest before clients are told (by a
	// NotLeader from the old leader) to retry.
	return n.cfg.Conn.Flush()
}

func (n *Node) unsubscribeLeader() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, s := range n.leaderSubs {
		_ = s.Unsubscribe()
	}
	n.leaderSubs = nil
}

// linearize returns nil when a read served now from local state is
// linearizable: this replica is the leader of a term in which it completed a
// Barrier, confirmed by a (coalesced) VerifyLeader that started after the
// read arrived.
func (n *Node) linearize(ctx context.Context) error {
	term := n.raft.CurrentTerm()
	if n.servingTerm.Load() != term {
		return ErrNotLeader
	}
	if err := n.verify.verify(ctx); err != nil {
		if errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) || errors.Is(err, raft.ErrRaftShutdown) {
			return ErrNotLeader
		}
		return newError(storev1.Code_CODE_UNAVAILABLE, "", "verify leader: %v", err)
	}
	if n.raft.CurrentTerm() != term {
		return ErrNotLeader
	}
	return nil
}

// verifier coalesces concurrent VerifyLeader calls: callers that arrive
// while a round is running join the next round, which starts after it.
type verifier struct {
	r      *raft.Raft
	goFunc func(func())

	mu      sync.Mutex
	next    *verifyRound
	running bool
	stopped bool          // stop was called: no round starts any more
	idle    chan struct{} // closed when the loop returns (nil: not running)
}

// stop refuses new rounds and waits for the loop's round in flight. It
// must be called while raft still runs: a VerifyLeader future raft has
// queued but not handled when it shuts down is never answered (its run
// loop exits without draining verifyCh), and the loop would wait for it
// for ever (Shutdown hung in TestLinearizable).
func (v *verifier) stop() {
	v.mu.Lock()
	v.stopped = true
	idle := v.idle
	v.mu.Unlock()
	if idle != nil {
		<-idle
	}
}

type verifyRound struct {
	done chan struct{}
	err  error
}

func (v *verifier) verify(ctx context.Context) error {
	v.mu.Lock()
	if v.next == nil {
		v.next = &verifyRound{done: make(chan struct{})}
	}
	if v.stopped {
		v.mu.Unlock()
		return ErrNotLeader
	}
	round := v.next
	if !v.running {
		v.running = true
		v.idle = make(chan struct{})
		v.goFunc(v.loop)
	}
	v.mu.Unlock()
	select {
	case <-round.done:
		return round.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (v *verifier) loop() {
	for {
		v.mu.Lock()
		round := v.next
		v.next = nil
		if round == nil || v.stopped {
			if round != nil {
				round.err = ErrNotLeader
				close(round.done)
			}
			v.running = false
			close(v.idle)
			v.mu.Unlock()
			return
		}
		v.mu.Unlock()
		round.err = v.r.VerifyLeader().Error()
		close(round.done)
	}
}

// requestCtx is the context of one request: the node's lifetime bounded by
// the apply timeout.
func (n *Node) requestCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(n.ctx, n.cfg.ApplyTimeout)
}

func (n *Node) respond(m *nats.Msg, resp proto.Message) {
	if m.Reply == "" {
		return
	}
	data, err := vt.Marshal(resp)
	if err != nil {
		n.log.Error("marshal response", "error", err)
		return
	}
	if err := m.Respond(data); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
		n.log.Warn("respond", "subject", m.Subject, "error", err)
	}
}

func (n *Node) handleWrite(m *nats.Msg) {
	n.count.writes.Add(1)
	if len(m.Data) > n.cfg.MaxRequestBytes {
		n.respond(m, &storev1.WriteResponse{Error: toWire(newError(storev1.Code_CODE_TOO_LARGE, "",
			"request is too large: %d bytes (MaxRequestBytes %d)", len(m.Data), n.cfg.MaxRequestBytes))})
		return
	}
	// Decoded as a follower decodes the entry (values and keys alias
	// m.Data, which raft is given as the entry), and handed over.
	var cmd storev1.Command
	if err := decodeCommand(m.Data, &cmd); err != nil {
		n.respond(m, &storev1.WriteResponse{Error: toWire(newError(storev1.Code_CODE_INVALID, "", "decode command: %v", err))})
		return
	}
	if err := validateCommand(&cmd); err != nil {
		n.respond(m, &storev1.WriteResponse{Error: toWire(err)})
		return
	}
	if writer, named := n.requester(m.Subject); named && n.cfg.WriteACL != nil {
		for _, op := range cmd.GetOps() {
			if !n.cfg.WriteACL(writer, op.GetKey()) {
				n.log.Warn("write refused", "writer", writer, "key", op.GetKey())
				n.respond(m, &storev1.WriteResponse{Error: toWire(newError(storev1.Code_CODE_FORBIDDEN, op.GetKey(),
					"writer %q may not write %q", writer, op.GetKey()))})
				return
			}
		}
	}
	if err := n.checkCompares(m.Subject, &cmd); err != nil {
		n.respond(m, &storev1.WriteResponse{Error: toWire(err)})
		return
	}
	had := len(cmd.Compares)
	if err := n.confine(m.Subject, &cmd); err != nil {
		n.respond(m, &storev1.WriteResponse{Error: toWire(err)})
		return
	}
	data, err := m.Data, error(nil)
	if pins := cmd.Compares[had:]; len(pins) > 0 {
		if data, err = appendCompares(data, pins); err != nil {
			n.respond(m, &storev1.WriteResponse{Error: toWire(newError(storev1.Code_CODE_INTERNAL, "", "encode pinned command: %v", err))})
			return
		}
	}
	data, err = n.seal(&cmd, data)
	if err != nil {
		n.respond(m, &storev1.WriteResponse{Error: toWire(err)})
		return
	}
	if err := n.checkQuota(&cmd, len(data)); err != nil {
		n.respond(m, &storev1.WriteResponse{Error: toWire(err)})
		return
	}
	n.fsm.handed.hand(data, &cmd)
	f := n.raft.Apply(data, n.cfg.ApplyTimeout)
	err = f.Error()
	n.fsm.handed.release(data)
	if err != nil {
		n.respond(m, &storev1.WriteResponse{Error: toWire(applyError(err))})
		return
	}
	res, ok := f.Response().(*storev1.WriteResult)
	if !ok {
		n.respond(m, &storev1.WriteResponse{Error: toWire(newError(storev1.Code_CODE_INTERNAL, "", "unexpected apply response %T", f.Response()))})
		return
	}
	n.respond(m, &storev1.WriteResponse{Revision: res.Revision, Error: res.Error})
}

// checkQuota refuses a write that puts anything while the store would hold
// more than Config.QuotaBackendBytes with it, as etcd's backend quota:
// writes made only of deletes always pass, so space can be freed. It is
// checked by the leader before the entry is proposed (concurrent writes can
// pass it together: the quota is soft by at most their size), never in the
// state machine, so replicas with different quotas cannot diverge.
func (n *Node) checkQuota(cmd *storev1.Command, size int) error {
	puts := false
	for _, op := range cmd.GetOps() {
		puts = puts || op.GetType() == storev1.OpType_OP_TYPE_PUT
	}
	if !puts {
		return nil
	}
	used := n.fsm.size()
	if used+int64(size) <= n.cfg.QuotaBackendBytes {
		if n.noSpace.CompareAndSwap(true, false) {
			n.log.Info("NOSPACE alarm cleared", "used_bytes", used, "quota_bytes", n.cfg.QuotaBackendBytes)
			metrics.SetGauge([]string{"raftstore", "alarm", "nospace"}, 0)
		}
		return nil
	}
	if n.noSpace.CompareAndSwap(false, true) {
		n.log.Error("NOSPACE alarm raised: the store is at its quota; writes that add data are refused until deletes free space",
			"used_bytes", used, "quota_bytes", n.cfg.QuotaBackendBytes)
		metrics.SetGauge([]string{"raftstore", "alarm", "nospace"}, 1)
	}
	return newError(storev1.Code_CODE_NO_SPACE, "", "database space exceeded: %d bytes used, this write adds up to %d, quota %d (QuotaBackendBytes)",
		used, size, n.cfg.QuotaBackendBytes)
}

// requester is the user a named request's subject ends with
// (<base>.<user>, base one of the store's request subjects), if any.
func (n *Node) requester(subject string) (string, bool) {
	for _, base := range []string{n.subj.write, n.subj.read, n.subj.stale, n.subj.watch} {
		if user, ok := strings.CutPrefix(subject, base+"."); ok {
			return user, true
		}
	}
	return "", false
}

// ownReplies drops, unanswered, a named request whose reply subject
// Config.ReplyACL refuses: the store answers only into the requester's own
// inboxes.
func (n *Node) ownReplies(h func(*nats.Msg)) func(*nats.Msg) {
	if n.cfg.ReplyACL == nil {
		return h
	}
	return func(m *nats.Msg) {
		if user, named := n.requester(m.Subject); named && m.Reply != "" && !n.cfg.ReplyACL(user, m.Reply) {
			n.log.Warn("reply subject refused", "requester", user, "reply", m.Reply)
			return
		}
		h(m)
	}
}

// checkInbox applies Config.ReplyACL to a named watch's inbox.
func (n *Node) checkInbox(subject, inbox string) error {
	user, named := n.requester(subject)
	if !named || n.cfg.ReplyACL == nil || n.cfg.ReplyACL(user, inbox) {
		return nil
	}
	n.log.Warn("watch inbox refused", "requester", user, "inbox", inbox)
	return newError(storev1.Code_CODE_FORBIDDEN, "", "requester %q may not have a watch sent to %q", user, inbox)
}

// checkRead applies Config.ReadACL to a named read or watch.
func (n *Node) checkRead(subject, key string, prefix bool) error {
	if n.cfg.ReadACL == nil {
		return nil
	}
	user, named := n.requester(subject)
	if !named || n.cfg.ReadACL(user, key, prefix) {
		return nil
	}
	n.log.Warn("read refused", "reader", user, "key", key, "prefix", prefix)
	what := "read"
	if prefix {
		what = "list or watch keys starting with"
	}
	return newError(storev1.Code_CODE_FORBIDDEN, key, "reader %q may not %s %q", user, what, key)
}

// applyError classifies a raft.Apply error: NotLeader and an enqueue timeout
// mean the entry never reached the log (safe to retry); anything else may
// have been committed.
func applyError(err error) error {
	switch {
	case errors.Is(err, raft.ErrNotLeader):
		return ErrNotLeader
	case errors.Is(err, raft.ErrEnqueueTimeout):
		return newError(storev1.Code_CODE_UNAVAILABLE, "", "apply: %v", err)
	default:
		return newError(storev1.Code_CODE_INDETERMINATE, "", "apply: %v", err)
	}
}

// maxKeyLen bounds keys, like etcd's practical limits on object names.
const maxKeyLen = 4096

func validateKey(k string) error {
	if k == "" {
		return newError(storev1.Code_CODE_INVALID, "", "empty key")
	}
	if len(k) > maxKeyLen {
		return newError(storev1.Code_CODE_INVALID, k[:64], "key longer than %d bytes", maxKeyLen)
	}
	return nil
}

func validateCommand(c *storev1.Command) error {
	if c.IdempotencyKey == "" || len(c.IdempotencyKey) > 256 {
		return newError(storev1.Code_CODE_INVALID, "", "idempotency key must be 1..256 bytes")
	}
	for _, cmp := range c.Compares {
		if err := validateKey(cmp.Key); err != nil {
			return err
		}
		if cmp.ModRevision < -1 {
			return newError(storev1.Code_CODE_INVALID, cmp.Key, "compare revision %d (want -1, 0 or a revision)", cmp.ModRevision)
		}
	}
	var seen map[string]bool // for a txn of many ops; a few are compared
	if len(c.Ops) > 8 {
		seen = make(map[string]bool, len(c.Ops))
	}
	for i, op := range c.Ops {
		if err := validateKey(op.Key); err != nil {
			return err
		}
		if op.Type != storev1.OpType_OP_TYPE_PUT && op.Type != storev1.OpType_OP_TYPE_DELETE {
			return newError(storev1.Code_CODE_INVALID, op.Key, "op type %v", op.Type)
		}
		twice := seen[op.Key]
		if seen == nil {
			twice = slices.ContainsFunc(c.Ops[:i], func(o *storev1.Op) bool { return o.Key == op.Key })
		} else {
			seen[op.Key] = true
		}
		if twice {
			return newError(storev1.Code_CODE_INVALID, op.Key, "key appears twice in one txn")
		}
	}
	return nil
}

func (n *Node) handleRead(m *nats.Msg)      { n.serveRead(m, true) }
func (n *Node) handleStaleRead(m *nats.Msg) { n.serveRead(m, false) }

func (n *Node) serveRead(m *nats.Msg, linearizable bool) {
	if linearizable {
		n.count.reads.Add(1)
	} else {
		n.count.staleReads.Add(1)
	}
	var req storev1.ReadRequest
	if err := vt.Unmarshal(m.Data, &req); err != nil {
		n.respond(m, &storev1.ReadResponse{Error: toWire(newError(storev1.Code_CODE_INVALID, "", "decode read: %v", err))})
		return
	}
	if !req.Prefix {
		if err := validateKey(req.Key); err != nil {
			n.respond(m, &storev1.ReadResponse{Error: toWire(err)})
			return
		}
	}
	if err := n.checkRead(m.Subject, req.Key, req.Prefix); err != nil {
		n.respond(m, &storev1.ReadResponse{Error: toWire(err)})
		return
	}
	if linearizable {
		ctx, cancel := n.requestCtx()
		err := n.linearize(ctx)
		cancel()
		if err != nil {
			n.respond(m, &storev1.ReadResponse{Error: toWire(err)})
			return
		}
	}
	if req.MinRevision > 0 {
		// A replica behind the revision waits for it, at most an election
		// timeout: one cut off from the leader for longer is no place to
		// read from, and the client reads elsewhere.
		ctx, cancel := context.WithTimeout(n.ctx, n.cfg.ElectionTimeout)
		err := n.fsm.waitRevision(ctx, req.MinRevision)
		cancel()
		if err != nil {
			rev, _ := n.fsm.revisions()
			n.respond(m, &storev1.ReadResponse{Error: toWire(newError(storev1.Code_CODE_UNAVAILABLE, req.Key,
				"replica %s has applied revision %d, not %d", n.cfg.ID, rev, req.MinRevision))})
			return
		}
	}
	keep := n.keeper(m.Subject)
	if !req.Prefix {
		kv, rev, ok := n.fsm.getKept(req.Key, keep)
		if !ok {
			n.respond(m, &storev1.ReadResponse{Error: toWire(n.refuseRead(m.Subject, req.Key))})
			return
		}
		if kv == nil {
			n.respond(m, &storev1.ReadResponse{Revision: rev, Error: toWire(&Error{Code: storev1.Code_CODE_NOT_FOUND, Message: ErrNotFound.Message, Key: req.Key})})
			return
		}
		if kv, err := n.openKV(kv); err != nil {
			n.respond(m, &storev1.ReadResponse{Error: toWire(err)})
		} else {
			n.respond(m, &storev1.ReadResponse{Revision: rev, Kvs: []*storev1.KeyValue{kv}})
		}
		return
	}
	kvs, rev, more := n.fsm.listKept(req.Key, req.ContinueAfter, int(req.Limit), keep)
	if req.Chunked {
		n.streamList(m, kvs, rev, more)
		return
	}
	if err := n.openKVs(kvs); err != nil {
		n.respond(m, &storev1.ReadResponse{Error: toWire(err)})
		return
	}
	n.respond(m, &storev1.ReadResponse{Revision: rev, Kvs: kvs, More: more})
}

func (n *Node) handleAdmin(m *nats.Msg) {
	var req storev1.AdminRequest
	if err := proto.Unmarshal(m.Data, &req); err != nil {
		n.respond(m, &storev1.AdminResponse{Error: toWire(newError(storev1.Code_CODE_INVALID, "", "decode admin: %v", err))})
		return
	}
	timeout := 4 * n.cfg.ElectionTimeout
	var f raft.IndexFuture
	switch a := req.Action.(type) {
	case *storev1.AdminRequest_AddVoter_:
		if a.AddVoter.Id == "" || a.AddVoter.Address == "" {
			n.respond(m, &storev1.AdminResponse{Error: toWire(newError(storev1.Code_CODE_INVALID, "", "add voter needs an id and an address"))})
			return
		}
		if a.AddVoter.Nonvoter {
			f = n.raft.AddNonvoter(raft.ServerID(a.AddVoter.Id), raft.ServerAddress(a.AddVoter.Address), 0, timeout)
		} else {
			f = n.raft.AddVoter(raft.ServerID(a.AddVoter.Id), raft.ServerAddress(a.AddVoter.Address), 0, timeout)
		}
	case *storev1.AdminRequest_RemoveServer_:
		if a.RemoveServer.Id == "" {
			n.respond(m, &storev1.AdminResponse{Error: toWire(newError(storev1.Code_CODE_INVALID, "", "remove server needs an id"))})
			return
		}
		f = n.raft.RemoveServer(raft.ServerID(a.RemoveServer.Id), 0, timeout)
	case *storev1.AdminRequest_RewriteEncrypted_:
		count, err := n.rewriteEncrypted()
		n.respond(m, &storev1.AdminResponse{Rewritten: count, Error: toWire(err)})
		return
	default:
		n.respond(m, &storev1.AdminResponse{Error: toWire(newError(storev1.Code_CODE_INVALID, "", "unknown admin action"))})
		return
	}
	if err := f.Error(); err != nil {
		n.respond(m, &storev1.AdminResponse{Error: toWire(applyError(err))})
		return
	}
	n.respond(m, &storev1.AdminResponse{Index: f.Index()})
}

func (n *Node) handleStatus(m *nats.Msg) {
	s := n.Stats()
	w := statusToWire(&s)
	var req storev1.StatusRequest
	if len(m.Data) > 0 && proto.Unmarshal(m.Data, &req) == nil && req.ContentHash {
		w.ContentHash, w.ContentHashRevision = n.fsm.contentHash()
	}
	n.respond(m, w)
}

// Status is one replica's view of the cluster.
type Status struct {
	ID                string
	Address           string
	State             string // Leader, Follower, Candidate, Shutdown
	Term              uint64
	CommitIndex       uint64
	AppliedIndex      uint64
	LastLogIndex      uint64
	LastSnapshotIndex uint64
	// LastContact is the time since this replica last heard from the leader
	// (0 on the leader, -1 if never).
	LastContact     time.Duration
	LeaderID        string
	Revision        int64
	CompactRevision int64
	Servers         []ServerInfo // the latest raft configuration
	// SizeBytes is what the replica holds against its quota (keys, values
	// and watch history); QuotaBytes is Config.QuotaBackendBytes.
	SizeBytes, QuotaBytes int64
	// Alarms are the raised alarms: AlarmNoSpace.
	Alarms []string
	// SnapshotThreshold is the log entries after which this replica
	// snapshots now: Config.SnapshotThreshold or more, paced by the
	// state's size (snapshotThreshold).
	SnapshotThreshold uint64
	// ContentHash is a hash of every key, value and revision at
	// ContentHashRevision, filled only by Client.StatusWithHash.
	ContentHash         uint64
	ContentHashRevision int64
	Counters
}

// AlarmNoSpace is the alarm of a store at its quota, named as etcd's.
const AlarmNoSpace = "NOSPACE"

// ServerInfo is one member of the raft configuration.
type ServerInfo struct {
	ID       string
	Address  string
	Suffrage string // Voter, Nonvoter, Staging
}

// Stats returns this replica's status.
func (n *Node) Stats() Status {
	s := Status{ID: n.cfg.ID, State: raft.Shutdown.String(), LastContact: -1, Counters: n.counters()}
	if n.trans != nil {
		s.Address = string(n.trans.LocalAddr())
	}
	s.Revision, s.CompactRevision = n.fsm.revisions()
	s.SizeBytes, s.QuotaBytes = n.fsm.size(), n.cfg.QuotaBackendBytes
	metrics.SetGauge([]string{"raftstore", "size_bytes"}, float32(s.SizeBytes))
	if n.noSpace.Load() || s.SizeBytes >= s.QuotaBytes {
		s.Alarms = append(s.Alarms, AlarmNoSpace)
	}
	if n.raft == nil {
		return s
	}
	st := n.raft.Stats()
	u := func(k string) uint64 { v, _ := strconv.ParseUint(st[k], 10, 64); return v }
	s.SnapshotThreshold = n.raft.ReloadableConfig().SnapshotThreshold
	s.State = n.raft.State().String()
	s.Term = n.raft.CurrentTerm()
	s.CommitIndex = n.raft.CommitIndex()
	s.AppliedIndex = n.raft.AppliedIndex()
	s.LastLogIndex = n.raft.LastIndex()
	s.LastSnapshotIndex = u("last_snapshot_index")
	switch {
	case n.raft.State() == raft.Leader:
		s.LastContact = 0
	case !n.raft.LastContact().IsZero():
		s.LastContact = time.Since(n.raft.LastContact())
	}
	_, id := n.raft.LeaderWithID()
	s.LeaderID = string(id)
	if f := n.raft.GetConfiguration(); f.Error() == nil {
		for _, srv := range f.Configuration().Servers {
			s.Servers = append(s.Servers, ServerInfo{ID: string(srv.ID), Address: string(srv.Address), Suffrage: srv.Suffrage.String()})
		}
	}
	return s
}

func statusToWire(s *Status) *storev1.ReplicaStatus {
	w := &storev1.ReplicaStatus{
		Id: s.ID, Address: s.Address, State: s.State, Term: s.Term, CommitIndex: s.CommitIndex,
		AppliedIndex: s.AppliedIndex, LastLogIndex: s.LastLogIndex, LastSnapshotIndex: s.LastSnapshotIndex,
		LastContactMs: s.LastContact.Milliseconds(), LeaderId: s.LeaderID, Revision: s.Revision, CompactRevision: s.CompactRevision,
		SizeBytes: s.SizeBytes, QuotaBytes: s.QuotaBytes, Alarms: s.Alarms,
		WriteRequests: s.WriteRequests, ReadRequests: s.ReadRequests, StaleReadRequests: s.StaleReadRequests,
		WatchRequests: s.WatchRequests, WatchEventsSent: s.WatchEventsSent, LogAppends: s.LogAppends, LogEntriesWritten: s.LogEntriesWritten,
	}
	if s.LastContact < 0 {
		w.LastContactMs = -1
	}
	for _, srv := range s.Servers {
		w.Servers = append(w.Servers, &storev1.Server{Id: srv.ID, Address: srv.Address, Suffrage: srv.Suffrage})
	}
	return w
}

func statusFromWire(w *storev1.ReplicaStatus) *Status {
	s := &Status{
		ID: w.Id, Address: w.Address, State: w.State, Term: w.Term, CommitIndex: w.CommitIndex,
		AppliedIndex: w.AppliedIndex, LastLogIndex: w.LastLogIndex, LastSnapshotIndex: w.LastSnapshotIndex,
		LastContact: time.Duration(w.LastContactMs) * time.Millisecond, LeaderID: w.LeaderId, Revision: w.Revision, CompactRevision: w.CompactRevision,
		SizeBytes: w.SizeBytes, QuotaBytes: w.QuotaBytes, Alarms: w.Alarms,
		ContentHash: w.ContentHash, ContentHashRevision: w.ContentHashRevision,
		Counters: Counters{
			WriteRequests: w.WriteRequests, ReadRequests: w.ReadRequests, StaleReadRequests: w.StaleReadRequests,
			WatchRequests: w.WatchRequests, WatchEventsSent: w.WatchEventsSent, LogAppends: w.LogAppends, LogEntriesWritten: w.LogEntriesWritten,
		},
	}
	if w.LastContactMs < 0 {
		s.LastContact = -1
	}
	for _, srv := range w.Servers {
		s.Servers = append(s.Servers, ServerInfo{ID: srv.Id, Address: srv.Address, Suffrage: srv.Suffrage})
	}
	return s
}

// ID returns the replica's server ID.
func (n *Node) ID() string { return n.cfg.ID }

// RaftAddr returns the raft transport's address (valid after Start).
func (n *Node) RaftAddr() string { return string(n.trans.LocalAddr()) }

// IsLeader reports whether this replica is the leader serving the
// leader-only subjects.
func (n *Node) IsLeader() bool { return n.servingTerm.Load() != 0 && n.raft.State() == raft.Leader }

// LocalGet reads key from this replica's local state (no leader check), for
// tests and tools. It returns nil when the key is missing, and the revision.
func (n *Node) LocalGet(key string) (*KV, int64) {
	kv, rev := n.fsm.get(key)
	if open, err := n.openKV(kv); err == nil {
		kv = open
	}
	return kvFromWire(kv), rev
}

// LocalList lists prefix from this replica's local state (no leader check).
func (n *Node) LocalList(prefix string) ([]*KV, int64) {
	kvs, rev, _ := n.fsm.list(prefix, "", 0)
	out := make([]*KV, len(kvs))
	for i, kv := range kvs {
		if open, err := n.openKV(kv); err == nil {
			kv = open
		}
		out[i] = kvFromWire(kv)
	}
	return out, rev
}

// Snapshot forces a raft snapshot now.
func (n *Node) Snapshot() error {
	if err := n.raft.Snapshot().Error(); err != nil {
		return fmt.Errorf("raftstore: snapshot: %w", err)
	}
	return nil
}

// rewriteEncrypted rewrites, as the leader, every value under the
// encryption configuration's prefixes that is not in the form its first
// provider writes (sealed with an older key, or plaintext from before
// encryption), one key per raft entry with a compare on the revision it
// was read at: a key written meanwhile is skipped, its new value being in
// the current form already. It returns how many it rewrote.
func (n *Node) rewriteEncrypted() (int64, error) {
	e := n.cfg.Encryption
	if e == nil {
		return 0, newError(storev1.Code_CODE_INVALID, "", "replica %s has no encryption configuration (Config.Encryption): nothing to rewrite", n.cfg.ID)
	}
	var idb [8]byte
	_, _ = rand.Read(idb[:])
	id := fmt.Sprintf("rewrite-encrypted-%s-%x-", n.cfg.ID, idb)
	var count, seq int64
	for _, r := range e.rules {
		for _, p := range r.prefixes {
			for after, more := "", true; more; {
				var kvs []*storev1.KeyValue
				kvs, _, more = n.fsm.list(p, after, 256)
				for _, kv := range kvs {
					after = kv.Key
					if n.ctx.Err() != nil {
						return count, ErrNotLeader
					}
					if e.current(kv.Key, kv.Value) {
						continue
					}
					plain, err := e.decrypt(kv.Key, kv.Value)
					if err != nil {
						return count, newError(storev1.Code_CODE_INTERNAL, kv.Key, "%v", err)
					}
					sealed, err := e.encrypt(kv.Key, plain)
					if err != nil {
						return count, newError(storev1.Code_CODE_INTERNAL, kv.Key, "encrypt: %v", err)
					}
					seq++
					data, err := vt.Marshal(&storev1.Command{
						IdempotencyKey: id + strconv.FormatInt(seq, 36), Kind: storev1.WriteKind_WRITE_KIND_TXN,
						Compares: []*storev1.Compare{{Key: kv.Key, ModRevision: kv.ModRevision}},
						Ops:      []*storev1.Op{{Type: storev1.OpType_OP_TYPE_PUT, Key: kv.Key, Value: sealed}},
					})
					if err != nil {
						return count, newError(storev1.Code_CODE_INTERNAL, kv.Key, "encode: %v", err)
					}
					f := n.raft.Apply(data, n.cfg.ApplyTimeout)
					if err := f.Error(); err != nil {
						return count, applyError(err)
					}
					if res, ok := f.Response().(*storev1.WriteResult); ok && res.Error == nil {
						count++
					}
				}
			}
		}
	}
	if count > 0 {
		n.log.Info("rewrote encrypted values", "count", count)
	}
	return count, nil
}

// confine applies Config.WriteFilter to a named writer's command: each op
// with a check is checked against the key's value now and, allowed,
// pinned to it by a compare appended to cmd.Compares.
func (n *Node) confine(subject string, cmd *storev1.Command) error {
	writer, named := n.requester(subject)
	if !named || n.cfg.WriteFilter == nil || n.fsm.remembers(cmd.GetIdempotencyKey()) {
		// A retry of a write applied already gets its first answer at
		// apply; checked again against what it wrote, it could be refused.
		return nil
	}
	for _, op := range cmd.GetOps() {
		check := n.cfg.WriteFilter(writer, op.GetKey())
		if check == nil {
			continue
		}
		kv, _ := n.fsm.get(op.GetKey())
		var old []byte
		var rev int64
		if kv != nil {
			old, rev = n.fsm.plain(kv.Key, kv.Value), kv.ModRevision
			if old == nil {
				old = []byte{}
			}
		}
		// A write whose own compare of the key fails now was decided on
		// another value than the stored one (a stale read): it is a
		// conflict, as it would be at apply, not a change to check.
		for _, c := range cmd.GetCompares() {
			if c.GetKey() == op.GetKey() && !compareHolds(c.GetModRevision(), rev) {
				return compareError(cmd.GetKind(), c.GetKey(), c.GetModRevision(), rev)
			}
		}
		var next []byte
		if op.GetType() == storev1.OpType_OP_TYPE_PUT {
			next = op.GetValue()
			if next == nil {
				next = []byte{}
			}
		}
		if err := check(old, next); err != nil {
			n.log.Warn("write refused", "writer", writer, "key", op.GetKey(), "by", "WriteFilter", "error", err)
			return newError(storev1.Code_CODE_FORBIDDEN, op.GetKey(), "writer %q may not make this change to %q: %v", writer, op.GetKey(), err)
		}
		cmd.Compares = append(cmd.Compares, &storev1.Compare{Key: op.GetKey(), ModRevision: rev})
	}
	return nil
}

// commandCompares is storev1.Command's compares field number.
const commandCompares protowire.Number = 3

// appendCompares returns a copy of data, an encoded Command, with cs
// appended to its compares: a repeated field's elements decode in the
// order they appear, so the result decodes as data's command with cs
// after its own compares, as confine appends them to the decoded command.
// It saves encoding the whole command again (its values are most of it)
// for every checked write.
func appendCompares(data []byte, cs []*storev1.Compare) ([]byte, error) {
	size := len(data)
	for _, c := range cs {
		size += 1 + protowire.SizeBytes(c.SizeVT())
	}
	out := make([]byte, len(data), size)
	copy(out, data)
	for _, c := range cs {
		n := c.SizeVT()
		out = protowire.AppendTag(out, commandCompares, protowire.BytesType)
		out = protowire.AppendVarint(out, uint64(n))
		out = slices.Grow(out, n) // a no-op: size counted it
		if _, err := c.MarshalToSizedBufferVT(out[len(out) : len(out)+n]); err != nil {
			return nil, err
		}
		out = out[:len(out)+n]
	}
	return out, nil
}

// seal encrypts, in place, the values of cmd's puts that the encryption
// configuration covers, and returns the bytes to propose: data itself when
// nothing was sealed, else cmd encoded again (always when data is nil). The leader seals before
// proposing, so the raft log holds ciphertext only.
func (n *Node) seal(cmd *storev1.Command, data []byte) ([]byte, error) {
	e := n.cfg.Encryption
	if e == nil && data != nil {
		return data, nil
	}
	sealed := data == nil
	for _, op := range cmd.GetOps() {
		if e == nil || op.GetType() != storev1.OpType_OP_TYPE_PUT || !e.covers(op.GetKey()) {
			continue
		}
		v, err := e.encrypt(op.GetKey(), op.GetValue())
		if err != nil {
			return nil, newError(storev1.Code_CODE_INTERNAL, op.GetKey(), "encrypt: %v", err)
		}
		op.Value, sealed = v, true
	}
	if !sealed {
		return data, nil
	}
	out, err := vt.Marshal(cmd)
	if err != nil {
		return nil, newError(storev1.Code_CODE_INTERNAL, "", "encode sealed command: %v", err)
	}
	return out, nil
}

// openKV returns kv as a reader sees it: with its value decrypted when the
// encryption configuration covers its key (a new record: stored ones are
// immutable), else kv itself. A value it cannot decrypt is CODE_INTERNAL,
// naming the key and why: never ciphertext passed off as a value.
func (n *Node) openKV(kv *storev1.KeyValue) (*storev1.KeyValue, error) {
	e := n.cfg.Encryption
	if kv == nil || e == nil || !e.covers(kv.Key) {
		return kv, nil
	}
	v, err := e.decrypt(kv.Key, kv.Value)
	if err != nil {
		n.log.Error("stored value cannot be decrypted", "key", kv.Key, "error", err)
		return nil, newError(storev1.Code_CODE_INTERNAL, kv.Key, "%v", err)
	}
	return &storev1.KeyValue{Key: kv.Key, Value: v, CreateRevision: kv.CreateRevision, ModRevision: kv.ModRevision}, nil
}

// openKVs replaces each of kvs by openKV's.
func (n *Node) openKVs(kvs []*storev1.KeyValue) error {
	if n.cfg.Encryption == nil {
		return nil
	}
	for i, kv := range kvs {
		open, err := n.openKV(kv)
		if err != nil {
			return err
		}
		kvs[i] = open
	}
	return nil
}
