package objects

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/podflow/podflow/raftstore"
)

// Txn is a store transaction stated in objects: which objects must still
// be at which revision, and which objects to write or delete. Commit
// builds the keys and bytes. A Txn is a value: each method returns a new
// Txn and leaves its receiver as it was, so
//
//	t := objects.Txn{}.Unchanged(pod).Put(boundPod).Put(alloc)
//
// reads as what it does. An object that cannot be stored (no name, not a
// stored kind) makes Commit fail with that error and write nothing.
type Txn struct {
	compares []raftstore.Compare
	ops      []raftstore.Op
	puts     []Object // get the commit's revision
	err      error
}

// Revisions a Compare can expect besides a revision > 0.
const (
	Absent = 0  // the object must not exist
	Exists = -1 // the object must exist, at any revision
)

// Compare requires obj's key to be at revision rev (Absent, Exists or a
// revision > 0), whatever resourceVersion obj carries.
func (t Txn) Compare(obj Object, rev int64) Txn {
	key, err := KeyOf(obj)
	if err != nil {
		return t.fail(err)
	}
	t.compares = append(t.compares[:len(t.compares):len(t.compares)], raftstore.Compare{Key: key, ModRevision: rev})
	return t
}

// Unchanged requires obj to be stored still at the resourceVersion it
// carries (absent when it carries none).
func (t Txn) Unchanged(obj Object) Txn { return t.Compare(obj, Revision(obj)) }

// Put writes obj as it is now (later changes to obj are not written). On
// a successful Commit obj carries the commit's revision.
func (t Txn) Put(obj Object) Txn {
	b, err := Encode(obj)
	if err != nil {
		return t.fail(err)
	}
	return t.PutEncoded(obj, b)
}

// PutEncoded writes value as obj's bytes: value must be what Encode(obj)
// would give, or an encoding of the same object (a writer that knows
// the bytes of the object obj was derived from appends what it changed,
// as a repeated or map field allows, rather than encode all of obj
// again). On a successful Commit obj carries the commit's revision.
func (t Txn) PutEncoded(obj Object, value []byte) Txn {
	key, err := KeyOf(obj)
	if err != nil {
		return t.fail(err)
	}
	t.ops = append(t.ops[:len(t.ops):len(t.ops)], raftstore.Op{Type: raftstore.OpPut, Key: key, Value: value})
	t.puts = append(t.puts[:len(t.puts):len(t.puts)], obj)
	return t
}

// Delete deletes obj's key (a no-op when it is missing; Compare for it to
// exist).
func (t Txn) Delete(obj Object) Txn {
	key, err := KeyOf(obj)
	if err != nil {
		return t.fail(err)
	}
	t.ops = append(t.ops[:len(t.ops):len(t.ops)], raftstore.Op{Type: raftstore.OpDelete, Key: key})
	return t
}

// Value returns the bytes t's last write of obj's key puts, or nil when
// that write deletes it or t does not write the key: the value a watch of
// the key delivers once t commits.
func (t Txn) Value(obj Object) []byte {
	key, err := KeyOf(obj)
	if err != nil {
		return nil
	}
	for i := len(t.ops) - 1; i >= 0; i-- {
		if op := t.ops[i]; op.Key == key {
			if op.Type != raftstore.OpPut {
				return nil
			}
			return op.Value
		}
	}
	return nil
}

// Empty reports whether t writes nothing.
func (t Txn) Empty() bool { return len(t.ops) == 0 }

func (t Txn) fail(err error) Txn {
	if t.err == nil {
		t.err = err
	}
	return t
}

// Commit applies t atomically: when every compare holds, every write is
// applied at one new revision, which is returned and set on every object
// put. Otherwise nothing is written and the error is raftstore.ErrConflict
// (ConflictOn tells which object's compare failed).
func (s *Store) Commit(ctx context.Context, t Txn) (int64, error) {
	rev, err := s.commit(ctx, t)
	if err != nil && t.err == nil {
		keys := make([]string, len(t.ops))
		for i, op := range t.ops {
			keys[i] = op.Key
		}
		return 0, fmt.Errorf("commit %s: %w", strings.Join(keys, ", "), err)
	}
	return rev, err
}

func (s *Store) commit(ctx context.Context, t Txn) (int64, error) {
	if t.err != nil {
		return 0, t.err
	}
	rev, err := s.kv.Txn(ctx, raftstore.Txn{Compares: t.compares, Ops: t.ops})
	if err != nil {
		return 0, err
	}
	for _, obj := range t.puts {
		SetRevision(obj, rev)
	}
	return rev, nil
}

// ConflictOn reports whether err is a failed compare on obj's key (a Txn
// compare, an Update's or a Delete's expected revision).
func ConflictOn(err error, obj Object) bool {
	var e *raftstore.Error
	if !errors.As(err, &e) || !errors.Is(err, raftstore.ErrConflict) {
		return false
	}
	key, kerr := KeyOf(obj)
	return kerr == nil && e.Key == key
}
