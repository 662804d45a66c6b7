package raftstore

import (
	"context"
	"github.com/google/btree"

	"bufio"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"io"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/hashicorp/raft"
	"github.com/podflow/podflow/proto/storev1"
	"github.com/podflow/podflow/proto/vt"
	"google.golang.org/protobuf/encoding/protodelim"
	"google.golang.org/protobuf/proto"
)

// fsm is the replicated state machine: the key space, the global revision,
// a bounded history of changes for watches, and a bounded window of write
// results by idempotency key.
//
// Concurrency: raft calls ApplyBatch, Apply, Snapshot and Restore from one
// goroutine; readers (reads, watches, status) take mu.RLock. Stored KeyValue
// and Event messages are immutable once stored, so readers may keep pointers
// to them after releasing the lock.
type fsm struct {
	historyRevisions int64 // keep the changes of this many latest revisions
	historyBytes     int64 // and at most about this many bytes of them (0: no bound)
	dedupEntries     int   // remember this many write results

	mu         sync.RWMutex
	kvs        map[string]*storev1.KeyValue
	keys       *btree.BTreeG[string] // every key, ordered: O(log n) insert and delete, ordered range scans
	rev        int64
	compactRev int64            // history holds every event with revision > compactRev
	history    []*storev1.Event // ascending revision
	dedup      map[string]*storev1.WriteResult
	dedupOrder []string // FIFO of dedup keys, oldest first
	dedupHead  int      // index of the oldest live entry in dedupOrder
	changed    chan struct{}
	// liveSize and historySize are the bytes (keys and values) of the key
	// space and of the history: what the quota is checked against.
	liveSize, historySize int64
	// appliedBytes and appliedEntries count the commands applied (log
	// bytes): their mean sizes the snapshot threshold (snapshotThreshold).
	appliedBytes, appliedEntries int64
	// handed are the commands the leader decoded before proposing them.
	handed handed
	// scratch is the command ApplyBatch decodes an entry into when it was
	// not handed over: its Ops and Compares are decoded into again, entry
	// after entry, instead of allocated for each.
	scratch storev1.Command
	// enc opens values for ReadFilter and its State view (nil: stored as
	// written). Set before the fsm is used; read-only after.
	enc *Encryption
}

// plain is key's stored value as a reader sees it: decrypted when the
// encryption configuration covers key; as stored when it cannot be
// decrypted (a read policy then sees ciphertext, which parses as nothing).
func (f *fsm) plain(key string, value []byte) []byte {
	if f.enc == nil || value == nil {
		return value
	}
	v, err := f.enc.decrypt(key, value)
	if err != nil {
		return value
	}
	return v
}

// kvSize is what a key and its value count against the quota.
func kvSize(kv *storev1.KeyValue) int64 { return int64(len(kv.Key) + len(kv.Value)) }

// size returns the bytes held against the quota: the key space and the
// watch history.
func (f *fsm) size() int64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.liveSize + f.historySize
}

var _ raft.BatchingFSM = (*fsm)(nil)

func newFSM(historyRevisions, historyBytes int64, dedupEntries int) *fsm {
	f := &fsm{historyRevisions: historyRevisions, historyBytes: historyBytes, dedupEntries: dedupEntries}
	f.reset()
	return f
}

func (f *fsm) reset() {
	f.kvs = make(map[string]*storev1.KeyValue)
	f.keys = btree.NewOrderedG[string](32)
	f.rev, f.compactRev = 0, 0
	f.history = nil
	f.liveSize, f.historySize = 0, 0
	f.dedup = make(map[string]*storev1.WriteResult)
	f.dedupOrder, f.dedupHead = nil, 0
	if f.changed == nil {
		f.changed = make(chan struct{})
	}
}

// Apply implements raft.FSM.
func (f *fsm) Apply(l *raft.Log) any { return f.ApplyBatch([]*raft.Log{l})[0] }

// ApplyBatch implements raft.BatchingFSM: one lock and one watcher wake-up per
// batch. Each LogCommand yields a *storev1.WriteResult.
func (f *fsm) ApplyBatch(logs []*raft.Log) []any {
	out := make([]any, len(logs))
	f.mu.Lock()
	before := f.rev
	for i, l := range logs {
		if l.Type != raft.LogCommand {
			continue
		}
		f.appliedBytes += int64(len(l.Data))
		f.appliedEntries++
		cmd, ok := f.handed.take(l.Data)
		if !ok {
			cmd = &f.scratch
			if err := decodeCommand(l.Data, cmd); err != nil {
				out[i] = &storev1.WriteResult{Revision: f.rev, Error: toWire(newError(storev1.Code_CODE_INVALID, "", "undecodable command at index %d: %v", l.Index, err))}
				continue
			}
		}
		out[i] = f.applyCommand(cmd)
		if cmd == &f.scratch {
			for _, op := range cmd.Ops {
				op.Reset() // keeps no value of the entry
			}
		}
	}
	if f.rev != before {
		f.compact()
		close(f.changed)
		f.changed = make(chan struct{})
	}
	f.mu.Unlock()
	return out
}

func (f *fsm) applyCommand(cmd *storev1.Command) *storev1.WriteResult {
	if cmd.IdempotencyKey != "" {
		if r, ok := f.dedup[cmd.IdempotencyKey]; ok {
			return r
		}
	}
	r := f.txn(cmd)
	if cmd.IdempotencyKey != "" {
		f.remember(cmd.IdempotencyKey, r)
	}
	return r
}

// txn applies cmd if every compare holds. A successful txn that changes
// nothing (only deletes of missing keys) does not bump the revision.
func (f *fsm) txn(cmd *storev1.Command) *storev1.WriteResult {
	var last lookup
	for _, c := range cmd.Compares {
		var have int64
		if kv := last.get(f, c.Key); kv != nil {
			have = kv.ModRevision
		}
		if !compareHolds(c.ModRevision, have) {
			return &storev1.WriteResult{Revision: f.rev, Error: toWire(compareError(cmd.Kind, c.Key, c.ModRevision, have))}
		}
	}
	rev := f.rev + 1
	changed := false
	for _, op := range cmd.Ops {
		prev := last.get(f, op.Key)
		last = lookup{} // the op changes it
		switch op.Type {
		case storev1.OpType_OP_TYPE_PUT:
			c := &change{}
			kv := &c.kv
			kv.Value, kv.CreateRevision, kv.ModRevision = op.Value, rev, rev
			if prev != nil {
				kv.Key, kv.CreateRevision = prev.Key, prev.CreateRevision
				f.liveSize -= kvSize(prev)
			} else {
				kv.Key = strings.Clone(op.Key)
				f.insertKey(kv.Key)
			}
			f.kvs[kv.Key] = kv
			f.liveSize += kvSize(kv)
			c.event(storev1.EventType_EVENT_TYPE_PUT)
			f.appendEvent(&c.ev)
			changed = true
		case storev1.OpType_OP_TYPE_DELETE:
			if prev == nil {
				continue
			}
			delete(f.kvs, prev.Key)
			f.removeKey(prev.Key)
			f.liveSize -= kvSize(prev)
			c := &change{}
			c.kv.Key, c.kv.Value, c.kv.CreateRevision, c.kv.ModRevision = prev.Key, prev.Value, prev.CreateRevision, rev
			c.event(storev1.EventType_EVENT_TYPE_DELETE)
			f.appendEvent(&c.ev)
			changed = true
		}
	}
	if changed {
		f.rev = rev
	}
	return &storev1.WriteResult{Revision: f.rev}
}

// lookup is a key's stored KeyValue, looked up once for a command's
// compares and first op: a write names its key in its own compare, the
// pin of a confined write, and its put, and each lookup of a large key
// space is a few cache misses.
type lookup struct {
	key  string
	kv   *storev1.KeyValue
	done bool
}

// get returns key's KeyValue in f (nil: none).
func (l *lookup) get(f *fsm, key string) *storev1.KeyValue {
	if !l.done || l.key != key {
		l.key, l.kv, l.done = key, f.kvs[key], true
	}
	return l.kv
}

// change is one op's record: the KeyValue it stores (a put's) or drops
// (a delete's, at the delete's revision) and its watch event, in one
// allocation. The event holds the KeyValue anyway; the KeyValue, alive
// in the key space, keeps the event's few bytes with it.
type change struct {
	kv storev1.KeyValue
	ev storev1.Event
}

// event fills c's event of type t, at c.kv's revision.
func (c *change) event(t storev1.EventType) {
	c.ev.Type, c.ev.Kv, c.ev.Revision = t, &c.kv, c.kv.ModRevision
}

// compareHolds reports whether a compare wanting revision want (0: absent,
// -1: present) holds for a key at revision have (0: absent).
func compareHolds(want, have int64) bool {
	switch want {
	case 0:
		return have == 0
	case -1:
		return have != 0
	default:
		return have == want
	}
}

// compareError names a failed compare the way the caller's operation expects.
func compareError(kind storev1.WriteKind, key string, want, have int64) *Error {
	key = strings.Clone(key) // a command's key may alias its entry (decodeCommand); results are kept
	switch {
	case kind == storev1.WriteKind_WRITE_KIND_CREATE:
		return newError(storev1.Code_CODE_ALREADY_EXISTS, key, "key already exists at revision %d", have)
	case kind != storev1.WriteKind_WRITE_KIND_TXN && have == 0:
		return newError(storev1.Code_CODE_NOT_FOUND, key, "key not found")
	case want == 0:
		return newError(storev1.Code_CODE_CONFLICT, key, "compare failed: key exists at revision %d, want absent", have)
	case have == 0:
		return newError(storev1.Code_CODE_CONFLICT, key, "compare failed: key absent, want revision %d", want)
	default:
		return newError(storev1.Code_CODE_CONFLICT, key, "compare failed: key at revision %d, want %d", have, want)
	}
}

func (f *fsm) insertKey(k string) { f.keys.ReplaceOrInsert(k) }

func (f *fsm) removeKey(k string) { f.keys.Delete(k) }

func (f *fsm) appendEvent(e *storev1.Event) {
	f.history = append(f.history, e)
	f.historySize += kvSize(e.Kv)
}

// compact drops history older than historyRevisions, and the oldest
// revisions while it holds more than historyBytes, in chunks of an eighth
// of the window so that trimming is amortised. It never splits a
// revision's events.
func (f *fsm) compact() {
	overRevs := f.rev-f.compactRev > f.historyRevisions+f.historyRevisions/8
	overBytes := f.historyBytes > 0 && f.historySize > f.historyBytes+f.historyBytes/8
	if !overRevs && !overBytes {
		return
	}
	to := f.compactRev
	if overRevs {
		to = f.rev - f.historyRevisions
	}
	i := sort.Search(len(f.history), func(i int) bool { return f.history[i].Revision > to })
	var dropped int64
	for _, e := range f.history[:i] {
		dropped += kvSize(e.Kv)
	}
	for f.historyBytes > 0 && i < len(f.history) && f.historySize-dropped > f.historyBytes {
		dropped += kvSize(f.history[i].Kv)
		to = f.history[i].Revision
		i++
		for i < len(f.history) && f.history[i].Revision == to {
			dropped += kvSize(f.history[i].Kv)
			i++
		}
	}
	f.compactRev = max(f.compactRev, to)
	f.history = slices.Clone(f.history[i:])
	f.historySize -= dropped
}

func (f *fsm) remember(key string, r *storev1.WriteResult) {
	f.dedup[key] = r
	f.dedupOrder = append(f.dedupOrder, key)
	for len(f.dedupOrder)-f.dedupHead > f.dedupEntries {
		delete(f.dedup, f.dedupOrder[f.dedupHead])
		f.dedupOrder[f.dedupHead] = ""
		f.dedupHead++
	}
	if f.dedupHead > 1024 && f.dedupHead > len(f.dedupOrder)/2 {
		f.dedupOrder = slices.Clone(f.dedupOrder[f.dedupHead:])
		f.dedupHead = 0
	}
}

// remembers reports whether the write of idempotency key key was applied
// and its result is still remembered.
func (f *fsm) remembers(key string) bool {
	f.mu.RLock()
	defer f.mu.RUnlock()
	_, ok := f.dedup[key]
	return ok
}

// get returns the key's current KeyValue (nil if missing) and the revision.
func (f *fsm) get(key string) (*storev1.KeyValue, int64) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.kvs[key], f.rev
}

// list returns up to limit (0: all) keys with prefix, sorted, starting after
// the key after (if not empty), the revision, and whether more remain.
func (f *fsm) list(prefix, after string, limit int) ([]*storev1.KeyValue, int64, bool) {
	return f.listKept(prefix, after, limit, nil)
}

// listKept is list of the keys keep (nil: all) allows.
func (f *fsm) listKept(prefix, after string, limit int, keep keepFunc) ([]*storev1.KeyValue, int64, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	start := prefix
	if after != "" && after >= prefix {
		start = after + "\x00"
	}
	var out []*storev1.KeyValue
	more := false
	f.keys.AscendGreaterOrEqual(start, func(k string) bool {
		if !strings.HasPrefix(k, prefix) {
			return false
		}
		kv := f.kvs[k]
		if keep != nil && !keep(k, f.plain(k, kv.Value), view{f}) {
			return true
		}
		if limit > 0 && len(out) == limit {
			more = true
			return false
		}
		out = append(out, kv)
		return true
	})
	return out, f.rev, more
}

// contentHash is a hash (FNV-1a, 64 bits) of every key in order with its
// value and revisions, and the revision it was read at, under one lock:
// replicas at one revision with equal hashes hold the same key space.
func (f *fsm) contentHash() (uint64, int64) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	h := fnv.New64a()
	var b [8]byte
	field := func(p []byte) {
		binary.BigEndian.PutUint64(b[:], uint64(len(p)))
		h.Write(b[:])
		h.Write(p)
	}
	f.keys.Ascend(func(k string) bool {
		kv := f.kvs[k]
		field([]byte(k))
		field(kv.Value)
		binary.BigEndian.PutUint64(b[:], uint64(kv.CreateRevision))
		h.Write(b[:])
		binary.BigEndian.PutUint64(b[:], uint64(kv.ModRevision))
		h.Write(b[:])
		return true
	})
	return h.Sum64(), f.rev
}

// waitRevision returns once the state has applied revision rev, or ctx's
// error.
func (f *fsm) waitRevision(ctx context.Context, rev int64) error {
	for {
		f.mu.RLock()
		cur, changed := f.rev, f.changed
		f.mu.RUnlock()
		if cur >= rev {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// changes returns a channel closed at the next change.
func (f *fsm) changes() <-chan struct{} {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.changed
}

// revisions returns the current and compacted revisions.
func (f *fsm) revisions() (rev, compactRev int64) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.rev, f.compactRev
}

// eventsAfter returns up to max events (and about maxBytes) with revision >
// from whose key has prefix, the revision the scan covered, and a channel
// closed at the next change. It fails with ErrGone when from is older than
// the compacted revision. A batch never splits a revision's events.
func (f *fsm) eventsAfter(prefix string, from int64, max, maxBytes int) ([]*storev1.Event, int64, <-chan struct{}, error) {
	return f.eventsAfterKept(prefix, nil, from, max, maxBytes, nil)
}

// eventsAfterKept is eventsAfter of the keys under no prefix of except
// that keep (nil: all) allows.
func (f *fsm) eventsAfterKept(prefix string, except []string, from int64, max, maxBytes int, keep keepFunc) ([]*storev1.Event, int64, <-chan struct{}, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if from < f.compactRev {
		return nil, 0, nil, newError(storev1.Code_CODE_GONE, "", "revision %d is compacted (oldest watchable %d)", from, f.compactRev)
	}
	i := sort.Search(len(f.history), func(i int) bool { return f.history[i].Revision > from })
	var out []*storev1.Event
	covered, size := f.rev, 0
	for ; i < len(f.history); i++ {
		e := f.history[i]
		if (len(out) >= max || size >= maxBytes) && e.Revision != out[len(out)-1].Revision {
			covered = out[len(out)-1].Revision
			break
		}
		if strings.HasPrefix(e.Kv.Key, prefix) && !hasAnyPrefix(e.Kv.Key, except) &&
			(keep == nil || keep(e.Kv.Key, f.plain(e.Kv.Key, e.Kv.Value), view{f})) {
			out = append(out, e)
			size += len(e.Kv.Key) + len(e.Kv.Value) + 32
		}
	}
	return out, covered, f.changed, nil
}

// hasAnyPrefix reports whether key starts with one of prefixes.
func hasAnyPrefix(key string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(key, p) {
			return true
		}
	}
	return false
}

// Snapshot implements raft.FSM. It captures pointers to the immutable
// records; Persist encodes them while Apply carries on.
func (f *fsm) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	s := &fsmSnapshot{
		header: &storev1.SnapshotHeader{Revision: f.rev, CompactRevision: f.compactRev},
		kvs:    make([]*storev1.KeyValue, 0, f.keys.Len()),
		events: slices.Clone(f.history),
	}
	f.keys.Ascend(func(k string) bool {
		s.kvs = append(s.kvs, f.kvs[k])
		return true
	})
	for _, k := range f.dedupOrder[f.dedupHead:] {
		s.dedup = append(s.dedup, &storev1.SnapshotDedup{IdempotencyKey: k, Result: f.dedup[k]})
	}
	s.header.KeyCount = uint64(len(s.kvs))
	s.header.HistoryCount = uint64(len(s.events))
	s.header.DedupCount = uint64(len(s.dedup))
	return s, nil
}

type fsmSnapshot struct {
	header *storev1.SnapshotHeader
	kvs    []*storev1.KeyValue
	events []*storev1.Event
	dedup  []*storev1.SnapshotDedup
}

// Persist implements raft.FSMSnapshot.
func (s *fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	if err := s.write(sink); err != nil {
		_ = sink.Cancel()
		return fmt.Errorf("persist snapshot: %w", err)
	}
	return sink.Close()
}

func (s *fsmSnapshot) write(w io.Writer) error {
	bw := bufio.NewWriterSize(w, 256<<10)
	// One buffer for every record: a snapshot holds every key and the
	// watch history, hundreds of thousands of records at scale, and an
	// allocation each (protodelim.MarshalTo's) fed the collector.
	var buf []byte
	put := func(m proto.Message) error {
		var err error
		if buf, err = vt.AppendDelimited(buf[:0], m); err != nil {
			return err
		}
		_, err = bw.Write(buf)
		return err
	}
	if err := put(s.header); err != nil {
		return err
	}
	for _, kv := range s.kvs {
		if err := put(kv); err != nil {
			return err
		}
	}
	for _, e := range s.events {
		if err := put(e); err != nil {
			return err
		}
	}
	for _, d := range s.dedup {
		if err := put(d); err != nil {
			return err
		}
	}
	return bw.Flush()
}

// Release implements raft.FSMSnapshot.
func (s *fsmSnapshot) Release() {}

// Restore implements raft.FSM: it replaces all state with the snapshot's.
func (f *fsm) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	r := bufio.NewReaderSize(rc, 256<<10)
	opts := protodelim.UnmarshalOptions{MaxSize: -1}
	var h storev1.SnapshotHeader
	if err := opts.UnmarshalFrom(r, &h); err != nil {
		return fmt.Errorf("restore snapshot header: %w", err)
	}
	n := newFSM(f.historyRevisions, f.historyBytes, f.dedupEntries)
	n.rev, n.compactRev = h.Revision, h.CompactRevision
	for i := uint64(0); i < h.KeyCount; i++ {
		kv := &storev1.KeyValue{}
		if err := opts.UnmarshalFrom(r, kv); err != nil {
			return fmt.Errorf("restore snapshot key %d: %w", i, err)
		}
		n.kvs[kv.Key] = kv
		n.keys.ReplaceOrInsert(kv.Key)
		n.liveSize += kvSize(kv)
	}
	n.history = make([]*storev1.Event, 0, h.HistoryCount)
	for i := uint64(0); i < h.HistoryCount; i++ {
		e := &storev1.Event{}
		if err := opts.UnmarshalFrom(r, e); err != nil {
			return fmt.Errorf("restore snapshot event %d: %w", i, err)
		}
		n.appendEvent(e)
	}
	for i := uint64(0); i < h.DedupCount; i++ {
		d := &storev1.SnapshotDedup{}
		if err := opts.UnmarshalFrom(r, d); err != nil {
			return fmt.Errorf("restore snapshot dedup %d: %w", i, err)
		}
		n.remember(d.IdempotencyKey, d.Result)
	}
	n.compact()

	f.mu.Lock()
	f.kvs, f.keys, f.rev, f.compactRev, f.history = n.kvs, n.keys, n.rev, n.compactRev, n.history
	f.dedup, f.dedupOrder, f.dedupHead = n.dedup, n.dedupOrder, n.dedupHead
	f.liveSize, f.historySize = n.liveSize, n.historySize
	close(f.changed)
	f.changed = make(chan struct{})
	f.mu.Unlock()
	return nil
}
