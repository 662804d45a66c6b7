package raftstore

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"time"

	"github.com/hashicorp/raft"
	"github.com/nats-io/nats.go"
)

// DefaultSubject is the subject prefix the store serves under.
const DefaultSubject = "podflow.store"

// Peer is one replica of a bootstrap configuration.
type Peer struct {
	ID      string
	Address string // raft TCP address, host:port
}

// ParsePeers parses "id1=addr1,id2=addr2".
func ParsePeers(s string) ([]Peer, error) {
	var out []Peer
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		id, addr, ok := strings.Cut(part, "=")
		if !ok || id == "" || addr == "" {
			return nil, fmt.Errorf("parse peer %q: want id=host:port", part)
		}
		out = append(out, Peer{ID: id, Address: addr})
	}
	return out, nil
}

// Config configures one replica (Node).
type Config struct {
	// ID is the replica's raft server ID, unique and stable across restarts.
	ID string
	// DataDir holds wal/ (the raft log and stable store, raft-wal),
	// snapshots/ and LOCK (held while a replica runs). A raft.db from
	// before raft-wal is migrated into wal/ on Start and kept as
	// raft.db.migrated.
	DataDir string
	// RaftAddr is the TCP address the raft transport binds, host:port; port
	// 0 picks a free port (see Node.RaftAddr). Loopback or not, the
	// transport speaks mutual TLS only (Config.TLS).
	RaftAddr string
	// RaftListener, when set, is where the raft transport accepts instead
	// of binding RaftAddr, which must be its address. Start takes it over:
	// it is closed by Shutdown, or by Start when it fails.
	// It lets whoever starts several replicas hold every port from before
	// the first one dials its peers: a port found free by listening on :0
	// and closing is free for anyone until its replica binds it, so an
	// outgoing connection can be given it, or a replica dialling a peer not
	// yet listening can connect to itself.
	RaftListener net.Listener
	// AdvertiseAddr is the address peers dial; defaults to the bound address.
	AdvertiseAddr string
	// PeerAddrs, when set, is where this replica dials the peers it names
	// (server ID → host:port) instead of the address in the raft
	// configuration; peers it does not name are dialled as configured. It
	// changes only this replica's outgoing connections, so each directed
	// link can be routed on its own — through a fault-injecting proxy in
	// `podflow chaos`.
	PeerAddrs map[string]string
	// TLS is the raft transport's mutual-TLS configuration (required; see
	// MutualTLS): this replica's certificate (Certificates), the CA that
	// signs every peer's (ClientCAs and RootCAs) and ClientAuth
	// RequireAndVerifyClientCert. Every connection, accepted or dialled,
	// completes a TLS 1.3 handshake in which the other side presents a
	// certificate of that CA whose subject carries PeerGroup before raft
	// reads a byte of it: raft's RPCs rewrite the store past every ACL, so
	// only a replica may speak it, on loopback too (any local user can
	// open a loopback port).
	TLS *tls.Config
	// Bootstrap lists the initial voters (including this replica). It is used
	// only when DataDir holds no raft state. Leave empty with Join set to
	// start an empty replica that the cluster adds.
	Bootstrap []Peer
	// Join, when DataDir holds no raft state, asks the current leader over
	// NATS to add this replica as a voter during Start.
	Join bool

	// Conn is the NATS connection the replica serves on. The caller owns it.
	Conn *nats.Conn
	// Subject is the subject prefix (default DefaultSubject).
	Subject string

	// HeartbeatTimeout, ElectionTimeout, LeaderLeaseTimeout and CommitTimeout
	// are raft's timing parameters; short values (200 ms) suit tests on
	// loopback, the defaults (1 s / 1 s / 500 ms / 50 ms) suit hosts.
	HeartbeatTimeout   time.Duration
	ElectionTimeout    time.Duration
	LeaderLeaseTimeout time.Duration
	CommitTimeout      time.Duration
	// MaxAppendEntries bounds the entries per AppendEntries RPC and the size
	// of an FSM batch (raft's limit is 1024).
	MaxAppendEntries int
	// SnapshotInterval and SnapshotThreshold: raft checks every interval
	// whether more than threshold entries were appended since the last
	// snapshot; SnapshotThreshold is the least, raised with the state's
	// size (snapshotThreshold). TrailingLogs entries are kept after a snapshot so slow
	// followers catch up from the log. SnapshotRetain snapshots are kept on
	// disk.
	SnapshotInterval  time.Duration
	SnapshotThreshold uint64
	TrailingLogs      uint64
	SnapshotRetain    int
	// NoSync disables fsync of the log store: for throwaway test clusters
	// only, never with data you want to keep.
	NoSync bool
	// LogSegmentBytes is the size of one raft-wal segment file (default
	// 64 MiB, at least 64 KiB): the log is preallocated and rotated in
	// segments, and space is freed a whole segment at a time after snapshots.
	LogSegmentBytes int

	// HistoryRevisions is how many latest revisions of change history are
	// kept for watches; a watch from an older revision fails with ErrGone.
	HistoryRevisions int64
	// HistoryBytes bounds the watch history by size as well (keys and
	// values of its events): the oldest revisions are dropped while it
	// holds more, so large values cannot grow it without bound. 0: no
	// bound. Default 128 MiB.
	HistoryBytes int64
	// MaxRequestBytes bounds a write request (its encoded command: keys and
	// values), as etcd's --max-request-bytes: larger ones are refused with
	// ErrTooLarge (CODE_TOO_LARGE) before they reach the log. Default
	// 1.5 MiB, etcd's default.
	MaxRequestBytes int
	// QuotaBackendBytes is the store's space quota, as etcd's
	// --quota-backend-bytes: the bytes of every key and value plus the
	// watch history. A write that adds data past it is refused with
	// ErrNoSpace (CODE_NO_SPACE) and raises the NOSPACE alarm (Status.Alarms
	// and the raftstore.alarm.nospace gauge); reads and deletes still work,
	// and the alarm clears once deletes (or history compaction) free the
	// space. Default 2 GiB, etcd's default.
	QuotaBackendBytes int64
	// DedupEntries is how many write results are remembered by idempotency
	// key, so a retried write is applied at most once.
	DedupEntries int
	// ApplyTimeout bounds how long a write waits to be enqueued into raft.
	ApplyTimeout time.Duration
	// MaxInFlight bounds the requests served concurrently by this replica.
	MaxInFlight int
	// WatchHeartbeat is the interval of watch heartbeats; a watcher that
	// misses WatchMissedHeartbeats in a row is dropped.
	WatchHeartbeat        time.Duration
	WatchMissedHeartbeats int
	// WatchBatch is the maximum number of events per watch message.
	WatchBatch int
	// WatchCacheBytes bounds the encoded events this replica's watch
	// streams share (each event is encoded once for them all): two
	// generations of about this many bytes each. 0 turns the sharing off:
	// every stream encodes its own messages.
	WatchCacheBytes int
	// WatchCoalesce is how long watch streams let changes gather after a
	// commit before they look: a burst of commits then goes to each
	// watcher in one message rather than one per commit. It delays each
	// watch event by up to this long. 0 wakes the streams at every commit.
	WatchCoalesce time.Duration
	// ListChunkBytes bounds the key-values of one chunk of a list's
	// answer; 0 is half the bus's max payload, at most 2 MiB. Four chunks
	// go ahead of the reader's acknowledgement.
	ListChunkBytes int

	// WriteACL, when set, decides which keys a named writer may write:
	// clients that set ClientConfig.User send their writes to
	// <Subject>.write.<user>, and the leader refuses (CODE_FORBIDDEN) a
	// write with an op on a key ACL(user, key) does not allow. Writes on
	// <Subject>.write itself are not checked: the bus lets only the admin
	// identity publish there. Nil: every write is allowed.
	WriteACL func(user, key string) bool
	// WriteFilter, when set, confines a named writer's changes within a
	// key WriteACL lets it write: it returns the check of writer's puts and
	// deletes of key (nil: WriteACL alone decides). The leader calls the
	// check with the key's value as stored now (nil: not stored) and as the
	// op leaves it (nil: a delete), both as readers see them (decrypted);
	// an error refuses the write with CODE_FORBIDDEN and the error's text,
	// nothing applied. A checked op is pinned to what the check saw: the
	// leader adds a compare of the key's revision (0: absent) to the
	// command, so a write racing with another change to the key fails with
	// CODE_CONFLICT at apply instead of landing on a value no check saw.
	// It runs on the leader's request path: it must be quick and must not
	// call the store. The scheduler may bind a pod and nothing else of it,
	// as kube-apiserver's binding subresource.
	WriteFilter func(user, key string) WriteCheck
	// ReadACL, when set, decides what a named reader may read: a get of
	// key (prefix false) or a list or watch of every key starting with key
	// (prefix true). A refused read or watch gets CODE_FORBIDDEN. Unnamed
	// reads are not checked. Nil: every read is allowed.
	ReadACL func(user, key string, prefix bool) bool
	// ReadFilter, when set, decides each key a named reader would be shown
	// once ReadACL allowed the request, with its value (nil: not stored)
	// and the replica's State at the read: a get or a transaction compare
	// of a key it refuses gets CODE_FORBIDDEN; lists and watches leave the
	// key out (a limited list fills its page with keys it allows). It runs
	// under the replica's read lock: it must be quick and must not call the
	// store. Nil: ReadACL alone decides.
	ReadFilter func(user, key string, value []byte, st State) bool
	// ReplyACL, when set, decides where a named requester may have the
	// store send to: a request's reply subject and a watch's inbox. The
	// store publishes to any subject a requester names, so without it a
	// reader could have answers and watch streams pushed into another
	// user's inbox. A request with a refused reply subject is dropped
	// unanswered; a watch with a refused inbox gets CODE_FORBIDDEN.
	// Unnamed requests are not checked. Nil: every subject is allowed.
	ReplyACL func(user, subject string) bool

	// Encryption, when set, encrypts values at rest as kube-apiserver's
	// EncryptionConfiguration does (LoadEncryptionConfig, default: values
	// under /registry/secrets/): the leader seals them before their write
	// enters the raft log, so the log, snapshots and copies of them hold
	// ciphertext, and every replica opens what it serves. Every replica
	// needs every key a stored value may be sealed with: rotate as
	// Encryption's documentation says. Nil: values are stored as written.
	Encryption *Encryption

	// LogOutput receives raft's log (default os.Stderr; io.Discard to mute).
	LogOutput io.Writer
	// LogLevel is raft's hclog level name (default "warn").
	LogLevel string
}

// WriteCheck decides whether a named writer may change a key's value from
// old to new (nil: absent; see Config.WriteFilter); an error refuses it.
type WriteCheck func(old, new []byte) error

// DefaultConfig returns a Config with production defaults; callers set ID,
// DataDir, RaftAddr, Conn and Bootstrap or Join.
func DefaultConfig() Config {
	return Config{
		Subject:               DefaultSubject,
		HeartbeatTimeout:      1000 * time.Millisecond,
		ElectionTimeout:       1000 * time.Millisecond,
		LeaderLeaseTimeout:    500 * time.Millisecond,
		CommitTimeout:         50 * time.Millisecond,
		MaxAppendEntries:      256,
		SnapshotInterval:      30 * time.Second,
		SnapshotThreshold:     16384,
		TrailingLogs:          10240,
		SnapshotRetain:        2,
		LogSegmentBytes:       64 << 20,
		HistoryRevisions:      100_000,
		HistoryBytes:          128 << 20,
		MaxRequestBytes:       1536 << 10,
		QuotaBackendBytes:     2 << 30,
		DedupEntries:          100_000,
		ApplyTimeout:          5 * time.Second,
		MaxInFlight:           1024,
		WatchHeartbeat:        time.Second,
		WatchMissedHeartbeats: 3,
		WatchBatch:            256,
		WatchCacheBytes:       4 << 20,
		WatchCoalesce:         time.Millisecond,
		LogOutput:             os.Stderr,
		LogLevel:              "warn",
	}
}

// Validate checks the Config, all problems at once.
func (c Config) Validate() error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if c.ID == "" {
		add("ID is required")
	}
	if c.DataDir == "" {
		add("DataDir is required")
	}
	if _, _, err := net.SplitHostPort(c.RaftAddr); err != nil {
		add("RaftAddr %q: %w", c.RaftAddr, err)
	}
	if err := checkTLS(c.TLS); err != nil {
		errs = append(errs, err)
	}
	if c.RaftListener != nil && c.RaftListener.Addr().String() != c.RaftAddr {
		add("RaftAddr %q is not RaftListener's address %s", c.RaftAddr, c.RaftListener.Addr())
	}
	for id, a := range c.PeerAddrs {
		if _, _, err := net.SplitHostPort(a); err != nil || id == "" {
			add("PeerAddrs %q=%q: want a server ID and host:port", id, a)
		}
	}
	if c.Conn == nil {
		add("Conn is required")
	}
	if c.Subject == "" || strings.ContainsAny(c.Subject, " *>") {
		add("Subject %q must be a literal subject prefix", c.Subject)
	}
	seen := map[string]bool{}
	self := false
	for _, p := range c.Bootstrap {
		if p.ID == "" || p.Address == "" {
			add("Bootstrap peer %q/%q needs an ID and an address", p.ID, p.Address)
		}
		if seen[p.ID] {
			add("Bootstrap peer %q listed twice", p.ID)
		}
		seen[p.ID] = true
		self = self || p.ID == c.ID
	}
	if len(c.Bootstrap) > 0 && !self {
		add("Bootstrap does not include this replica %q", c.ID)
	}
	if len(c.Bootstrap) > 0 && c.Join {
		add("Bootstrap and Join are exclusive")
	}
	if c.HistoryRevisions < 1 {
		add("HistoryRevisions (%d) must be at least 1", c.HistoryRevisions)
	}
	if c.HistoryBytes < 0 {
		add("HistoryBytes (%d) must not be negative", c.HistoryBytes)
	}
	if c.MaxRequestBytes < 1024 {
		add("MaxRequestBytes (%d) must be at least 1024", c.MaxRequestBytes)
	}
	if c.QuotaBackendBytes < int64(c.MaxRequestBytes) {
		add("QuotaBackendBytes (%d) must be at least MaxRequestBytes (%d)", c.QuotaBackendBytes, c.MaxRequestBytes)
	}
	if c.DedupEntries < 1 {
		add("DedupEntries (%d) must be at least 1", c.DedupEntries)
	}
	if c.ApplyTimeout <= 0 {
		add("ApplyTimeout (%s) must be positive", c.ApplyTimeout)
	}
	if c.MaxInFlight < 1 {
		add("MaxInFlight (%d) must be at least 1", c.MaxInFlight)
	}
	if c.ListChunkBytes < 0 {
		add("ListChunkBytes (%d) must not be negative", c.ListChunkBytes)
	}
	if c.WatchCacheBytes < 0 {
		add("WatchCacheBytes (%d) must not be negative", c.WatchCacheBytes)
	}
	if c.WatchCoalesce < 0 || c.WatchCoalesce > c.WatchHeartbeat {
		add("WatchCoalesce (%s) must be between 0 and WatchHeartbeat (%s)", c.WatchCoalesce, c.WatchHeartbeat)
	}
	if c.WatchHeartbeat <= 0 || c.WatchMissedHeartbeats < 1 || c.WatchBatch < 1 {
		add("WatchHeartbeat (%s), WatchMissedHeartbeats (%d) and WatchBatch (%d) must be positive", c.WatchHeartbeat, c.WatchMissedHeartbeats, c.WatchBatch)
	}
	if c.SnapshotRetain < 1 {
		add("SnapshotRetain (%d) must be at least 1", c.SnapshotRetain)
	}
	if c.LogSegmentBytes < 64<<10 {
		add("LogSegmentBytes (%d) must be at least 64 KiB", c.LogSegmentBytes)
	}
	if len(errs) == 0 {
		if err := raft.ValidateConfig(c.raftConfig()); err != nil {
			add("raft: %w", err)
		}
	}
	return errors.Join(errs...)
}

func (c Config) raftConfig() *raft.Config {
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(c.ID)
	rc.HeartbeatTimeout = c.HeartbeatTimeout
	rc.ElectionTimeout = c.ElectionTimeout
	rc.LeaderLeaseTimeout = c.LeaderLeaseTimeout
	rc.CommitTimeout = c.CommitTimeout
	rc.MaxAppendEntries = c.MaxAppendEntries
	rc.BatchApplyCh = true
	rc.SnapshotInterval = c.SnapshotInterval
	rc.SnapshotThreshold = c.SnapshotThreshold
	rc.TrailingLogs = c.TrailingLogs
	return rc
}

// ClientConfig configures a Client.
type ClientConfig struct {
	// Subject is the store's subject prefix (default DefaultSubject).
	Subject string
	// User names this client's requests (a NATS subject token, the bus
	// user it connects as): reads, watches and writes go to
	// <Subject>.<read|stale|watch|write>.<User>, where the store's ReadACL
	// and WriteACL and the bus's permissions apply. Empty: the unnamed
	// subjects (the admin's).
	User string
	// Timeout bounds a call whose context has no deadline.
	Timeout time.Duration
	// AttemptTimeout bounds one request-reply attempt; a write attempt that
	// times out is retried with the same idempotency key.
	AttemptTimeout time.Duration
	// RetryBackoffMin and RetryBackoffMax bound the exponential backoff
	// between attempts (with jitter).
	RetryBackoffMin time.Duration
	RetryBackoffMax time.Duration
	// WatchHeartbeatTimeout is how long a watch waits for any message
	// (events or heartbeat) before it resumes on another replica.
	WatchHeartbeatTimeout time.Duration
	// WatchBuffer is the capacity of a watch's Events channel.
	WatchBuffer int
}

// DefaultClientConfig returns the client defaults.
func DefaultClientConfig() ClientConfig {
	return ClientConfig{
		Subject:               DefaultSubject,
		Timeout:               10 * time.Second,
		AttemptTimeout:        2 * time.Second,
		RetryBackoffMin:       10 * time.Millisecond,
		RetryBackoffMax:       500 * time.Millisecond,
		WatchHeartbeatTimeout: 4 * time.Second,
		WatchBuffer:           1024,
	}
}

// Validate checks the ClientConfig.
func (c ClientConfig) Validate() error {
	var errs []error
	if c.Subject == "" || strings.ContainsAny(c.Subject, " *>") {
		errs = append(errs, fmt.Errorf("Subject %q must be a literal subject prefix", c.Subject))
	}
	if c.Timeout <= 0 || c.AttemptTimeout <= 0 {
		errs = append(errs, fmt.Errorf("Timeout (%s) and AttemptTimeout (%s) must be positive", c.Timeout, c.AttemptTimeout))
	}
	if c.RetryBackoffMin <= 0 || c.RetryBackoffMax < c.RetryBackoffMin {
		errs = append(errs, fmt.Errorf("RetryBackoffMin (%s) must be positive and at most RetryBackoffMax (%s)", c.RetryBackoffMin, c.RetryBackoffMax))
	}
	if c.WatchHeartbeatTimeout <= 0 || c.WatchBuffer < 1 {
		errs = append(errs, fmt.Errorf("WatchHeartbeatTimeout (%s) and WatchBuffer (%d) must be positive", c.WatchHeartbeatTimeout, c.WatchBuffer))
	}
	return errors.Join(errs...)
}

// subjects are the NATS subjects of one store.
type subjects struct {
	write, read, stale, watch, admin, status, ack string
}

func subjectsFor(prefix string) subjects {
	return subjects{
		write:  prefix + ".write",  // leader only
		read:   prefix + ".read",   // leader only: linearizable reads
		stale:  prefix + ".stale",  // every replica, queue group
		watch:  prefix + ".watch",  // every replica, queue group
		admin:  prefix + ".admin",  // leader only: membership
		status: prefix + ".status", // every replica, no queue: scatter-gather
		ack:    prefix + ".ack",    // <replica token>.<stream>-<n>[.<user>]: a client's acknowledgements (acks.go)
	}
}
