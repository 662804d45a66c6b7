package raftstore

import "github.com/podflow/podflow/proto/storev1"

// KV is one key with its value and revisions.
type KV struct {
	Key            string
	Value          []byte
	CreateRevision int64 // revision of the write that created the key
	ModRevision    int64 // revision of the last write (becomes the object's resourceVersion)
}

// Txn is a multi-key transaction: when every Compare holds, every Op is
// applied atomically at one new revision; otherwise nothing is applied and
// the error is ErrConflict naming the first key whose compare failed.
type Txn struct {
	Compares []Compare
	Ops      []Op
}

// Compare is a condition on a key's ModRevision: 0 means "the key must not
// exist", -1 means "the key must exist (any revision)", n > 0 means "the
// key's ModRevision is n".
type Compare struct {
	Key         string
	ModRevision int64
}

// OpType is the kind of a Txn operation.
type OpType int

// Txn operation types.
const (
	OpPut    OpType = iota + 1 // create or replace the key's value
	OpDelete                   // delete the key; a no-op when it is missing
)

// Op is one operation of a Txn.
type Op struct {
	Type  OpType
	Key   string
	Value []byte
}

// EventType is the kind of a watch event.
type EventType int

// Watch event types.
const (
	EventPut    EventType = iota + 1 // the key was created or updated
	EventDelete                      // the key was deleted
)

func (t EventType) String() string {
	switch t {
	case EventPut:
		return "PUT"
	case EventDelete:
		return "DELETE"
	}
	return "UNKNOWN"
}

// WatchEvent is one change seen by a watch. For a delete, KV holds the key,
// the last value and ModRevision = the delete's revision.
type WatchEvent struct {
	Type     EventType
	KV       *KV
	Revision int64
}

// WatchOption modifies a Watch.
type WatchOption func(*watchOptions)

type watchOptions struct {
	except []string
}

// WatchExcept leaves the changes under prefixes out of the watch: the
// replica does not send them, so a watcher of a wide prefix ("/registry/")
// does not receive what it would drop. At most MaxWatchExcept prefixes,
// none empty (else the watch fails with ErrInvalid). A replica that does
// not know the option sends them all: a watcher still drops what it does
// not want.
func WatchExcept(prefixes ...string) WatchOption {
	return func(o *watchOptions) { o.except = append(o.except, prefixes...) }
}

// WatchExceptOf returns the prefixes opts leave out (for a KV that wraps a
// Client, such as a test double).
func WatchExceptOf(opts ...WatchOption) []string {
	var o watchOptions
	for _, opt := range opts {
		opt(&o)
	}
	return o.except
}

// ReadOption modifies a Get or List.
type ReadOption func(*readOptions)

type readOptions struct {
	stale  bool
	limit  int
	after  string
	minRev int64
}

// Stale serves the read from any replica's local state, without a leader
// check: cheap, possibly behind the latest write, never ahead of it.
func Stale() ReadOption { return func(o *readOptions) { o.stale = true } }

// MinRevision serves the read only from a replica that has applied
// revision rev: with Stale, a cheap read that still sees every write up to
// rev (a replica behind waits for it, at most an election timeout, then
// answers ErrUnavailable).
func MinRevision(rev int64) ReadOption { return func(o *readOptions) { o.minRev = rev } }

// IsStale reports whether opts ask for a stale read (for a KV that wraps a
// Client, such as a test double answering stale reads as a replica behind).
func IsStale(opts ...ReadOption) bool { return readOpts(opts).stale }

// WithLimit makes List return at most n keys (n <= 0: no limit). To read the
// next page, List again with WithContinue(last key of this page); each page is
// read at its own revision.
func WithLimit(n int) ReadOption { return func(o *readOptions) { o.limit = n } }

// WithContinue makes List start after key (exclusive): the continue key of a
// paginated list is the last key of the previous page.
func WithContinue(key string) ReadOption { return func(o *readOptions) { o.after = key } }

func kvFromWire(w *storev1.KeyValue) *KV {
	if w == nil {
		return nil
	}
	return &KV{Key: w.Key, Value: w.Value, CreateRevision: w.CreateRevision, ModRevision: w.ModRevision}
}
