// Package objectstest is an in-memory objects.KV for unit tests: the
// replicated store's semantics without raft or NATS — one global revision
// bumped by every write, compare-and-swap writes, multi-key transactions,
// ordered watches from a revision, compaction — and raftstore's errors
// (raftstore.ErrNotFound, ErrAlreadyExists, ErrConflict naming the key,
// ErrGone, ErrInvalid), so code under test takes the same paths it takes
// against the real store.
//
// Use:
//
//	kv := objectstest.New()
//	st := objects.FromKV(kv)
//	// ... hand st to the code under test (stage.Env{Store: st})
//
// Read options (raftstore.Stale, WithLimit, WithContinue) are accepted
// and ignored: reads are always current and lists whole. Hook injects
// failures (an unavailable store, an indeterminate write).
package objectstest

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/podflow/podflow/proto/storev1"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/objects"
)

// KV is an in-memory store. The zero value is not usable; call New. It is
// safe for concurrent use.
type KV struct {
	mu        sync.Mutex
	rev       int64
	compacted int64 // watches from an older revision fail with ErrGone
	kvs       map[string]*raftstore.KV
	history   []raftstore.WatchEvent
	changed   chan struct{} // closed and replaced at every change
	hook      func(method, key string) error
}

var _ objects.KV = (*KV)(nil)

// New returns an empty store at revision 0.
func New() *KV { return &KV{kvs: map[string]*raftstore.KV{}, changed: make(chan struct{})} }

// Hook makes every later call run f first (method is "Get", "List",
// "Create", "Update", "Delete", "Txn" or "Watch"; key is the key or
// prefix, the first op's key for a Txn); a non-nil error is returned
// instead of doing the call. f runs before the call takes the store's
// lock, so it may use the store itself — to race the call it precedes
// with a concurrent writer (its own calls run the hook too). nil removes
// the hook.
func (k *KV) Hook(f func(method, key string) error) {
	k.mu.Lock()
	k.hook = f
	k.mu.Unlock()
}

// Revision returns the current revision.
func (k *KV) Revision() int64 {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.rev
}

// Compact drops the history up to rev: a watch from an older revision, or
// one still behind it, ends with raftstore.ErrGone.
func (k *KV) Compact(rev int64) {
	k.mu.Lock()
	defer k.mu.Unlock()
	rev = min(rev, k.rev)
	if rev <= k.compacted {
		return
	}
	k.compacted = rev
	i := sort.Search(len(k.history), func(i int) bool { return k.history[i].Revision > rev })
	k.history = slices.Clone(k.history[i:])
	k.notify()
}

func (k *KV) notify() {
	close(k.changed)
	k.changed = make(chan struct{})
}

// call runs the hook (without holding the store's lock, so the hook may
// itself use the store) and reports ctx's error.
func (k *KV) call(ctx context.Context, method, key string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	k.mu.Lock()
	hook := k.hook
	k.mu.Unlock()
	if hook != nil {
		return hook(method, key)
	}
	return nil
}

func errorf(code storev1.Code, key, format string, args ...any) error {
	return &raftstore.Error{Code: code, Key: key, Message: "objectstest: " + fmt.Sprintf(format, args...)}
}

func clone(kv *raftstore.KV) *raftstore.KV {
	c := *kv
	c.Value = slices.Clone(kv.Value)
	return &c
}

// Get returns the key's current value; raftstore.ErrNotFound if missing.
func (k *KV) Get(ctx context.Context, key string, _ ...raftstore.ReadOption) (*raftstore.KV, error) {
	if err := k.call(ctx, "Get", key); err != nil {
		return nil, err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if key == "" {
		return nil, errorf(storev1.Code_CODE_INVALID, key, "empty key")
	}
	kv := k.kvs[key]
	if kv == nil {
		return nil, errorf(storev1.Code_CODE_NOT_FOUND, key, "key not found")
	}
	return clone(kv), nil
}

// List returns the keys with prefix, sorted, and the current revision.
func (k *KV) List(ctx context.Context, prefix string, _ ...raftstore.ReadOption) ([]*raftstore.KV, int64, error) {
	if err := k.call(ctx, "List", prefix); err != nil {
		return nil, 0, err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	var out []*raftstore.KV
	for key, kv := range k.kvs {
		if strings.HasPrefix(key, prefix) {
			out = append(out, clone(kv))
		}
	}
	slices.SortFunc(out, func(a, b *raftstore.KV) int { return strings.Compare(a.Key, b.Key) })
	return out, k.rev, nil
}

// write kinds, for the errors of a failed compare.
const (
	create = iota
	update
	del
	txn
)

// Create writes key if it is missing; raftstore.ErrAlreadyExists if not.
func (k *KV) Create(ctx context.Context, key string, value []byte) (int64, error) {
	return k.write(ctx, "Create", create, raftstore.Txn{
		Compares: []raftstore.Compare{{Key: key, ModRevision: objects.Absent}},
		Ops:      []raftstore.Op{{Type: raftstore.OpPut, Key: key, Value: value}},
	})
}

// Update replaces key's value if it is at expectedModRev:
// raftstore.ErrConflict if not, raftstore.ErrNotFound if missing.
func (k *KV) Update(ctx context.Context, key string, value []byte, expectedModRev int64) (int64, error) {
	if expectedModRev <= 0 {
		return 0, errorf(storev1.Code_CODE_INVALID, key, "update needs an expected revision > 0, got %d", expectedModRev)
	}
	return k.write(ctx, "Update", update, raftstore.Txn{
		Compares: []raftstore.Compare{{Key: key, ModRevision: expectedModRev}},
		Ops:      []raftstore.Op{{Type: raftstore.OpPut, Key: key, Value: value}},
	})
}

// Delete deletes key if it is at expectedModRev (0: any):
// raftstore.ErrNotFound if missing, raftstore.ErrConflict if the revision
// differs.
func (k *KV) Delete(ctx context.Context, key string, expectedModRev int64) (int64, error) {
	want := expectedModRev
	if want == 0 {
		want = objects.Exists
	}
	if want < objects.Exists {
		return 0, errorf(storev1.Code_CODE_INVALID, key, "delete expected revision %d", expectedModRev)
	}
	return k.write(ctx, "Delete", del, raftstore.Txn{
		Compares: []raftstore.Compare{{Key: key, ModRevision: want}},
		Ops:      []raftstore.Op{{Type: raftstore.OpDelete, Key: key}},
	})
}

// Txn applies t atomically, as raftstore.Client.Txn does: the new
// revision (the current one when the ops change nothing), or
// raftstore.ErrConflict naming the first key whose compare failed.
func (k *KV) Txn(ctx context.Context, t raftstore.Txn) (int64, error) {
	for _, op := range t.Ops {
		if op.Type != raftstore.OpPut && op.Type != raftstore.OpDelete {
			return 0, errorf(storev1.Code_CODE_INVALID, op.Key, "op type %d", op.Type)
		}
	}
	return k.write(ctx, "Txn", txn, t)
}

func (k *KV) write(ctx context.Context, method string, kind int, t raftstore.Txn) (int64, error) {
	var key string
	if len(t.Ops) > 0 {
		key = t.Ops[0].Key
	}
	if err := k.call(ctx, method, key); err != nil {
		return 0, err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, op := range t.Ops {
		if op.Key == "" {
			return 0, errorf(storev1.Code_CODE_INVALID, op.Key, "empty key")
		}
	}
	for _, c := range t.Compares {
		var have int64
		if kv := k.kvs[c.Key]; kv != nil {
			have = kv.ModRevision
		}
		ok := have == c.ModRevision
		switch c.ModRevision {
		case objects.Absent:
			ok = have == 0
		case objects.Exists:
			ok = have != 0
		}
		if !ok {
			return 0, compareError(kind, c.Key, c.ModRevision, have)
		}
	}
	rev := k.rev + 1
	changed := false
	for _, op := range t.Ops {
		prev := k.kvs[op.Key]
		switch op.Type {
		case raftstore.OpPut:
			kv := &raftstore.KV{Key: op.Key, Value: slices.Clone(op.Value), CreateRevision: rev, ModRevision: rev}
			if prev != nil {
				kv.CreateRevision = prev.CreateRevision
			}
			k.kvs[op.Key] = kv
			k.history = append(k.history, raftstore.WatchEvent{Type: raftstore.EventPut, KV: kv, Revision: rev})
			changed = true
		case raftstore.OpDelete:
			if prev == nil {
				continue
			}
			delete(k.kvs, op.Key)
			kv := &raftstore.KV{Key: op.Key, Value: prev.Value, CreateRevision: prev.CreateRevision, ModRevision: rev}
			k.history = append(k.history, raftstore.WatchEvent{Type: raftstore.EventDelete, KV: kv, Revision: rev})
			changed = true
		}
	}
	if changed {
		k.rev = rev
		k.notify()
	}
	return k.rev, nil
}

// compareError words a failed compare as the store does for each write.
func compareError(kind int, key string, want, have int64) error {
	switch {
	case kind == create:
		return errorf(storev1.Code_CODE_ALREADY_EXISTS, key, "key already exists at revision %d", have)
	case kind != txn && have == 0:
		return errorf(storev1.Code_CODE_NOT_FOUND, key, "key not found")
	case want == objects.Absent:
		return errorf(storev1.Code_CODE_CONFLICT, key, "compare failed: key exists at revision %d, want absent", have)
	case have == 0:
		return errorf(storev1.Code_CODE_CONFLICT, key, "compare failed: key absent, want revision %d", want)
	}
	return errorf(storev1.Code_CODE_CONFLICT, key, "compare failed: key at revision %d, want %d", have, want)
}
