package objects

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/vt"
	"github.com/podflow/podflow/raftstore"
)

// Sentinel errors of the package; the store's own errors (raftstore.Err*)
// pass through wrapped and are matched with errors.Is.
var (
	// ErrUnknownKind: the message or resource name is not a stored kind.
	ErrUnknownKind = errors.New("objects: unknown kind")
	// ErrInvalid: the object cannot be stored as it is (no name, ...).
	ErrInvalid = errors.New("objects: invalid object")
)

// Store reads and writes podflow objects in the replicated store. It is
// safe for concurrent use.
type Store struct {
	kv     KV
	client *raftstore.Client // nil over another KV
}

// New returns a Store over a store client.
func New(c *raftstore.Client) *Store { return &Store{kv: RaftKV(c), client: c} }

// FromKV returns a Store over kv (objectstest.KV in unit tests).
func FromKV(kv KV) *Store { return &Store{kv: kv} }

// KV returns the key-value store under s, for raw reads and watches
// (informers, the HTTPS front door's byte-level reads).
func (s *Store) KV() KV { return s.kv }

// Client returns the store client a Store made by New is over, for what
// KV does not cover (replica status, membership); nil for a Store over
// another KV. Stages use the Store's methods, Commit and KV instead.
func (s *Store) Client() *raftstore.Client { return s.client }

// Encode serialises obj for the store. resourceVersion is not stored: it is
// the key's ModRevision, set by Decode.
func Encode(obj Object) ([]byte, error) {
	md := obj.GetMetadata()
	if md == nil {
		return nil, fmt.Errorf("%w: no metadata", ErrInvalid)
	}
	rv := md.ResourceVersion
	md.ResourceVersion = ""
	b, err := vt.Marshal(obj) // map entries unsorted: the bytes of one object may differ between writes
	md.ResourceVersion = rv
	return b, err
}

// Decode fills obj from a stored key-value, setting its resourceVersion.
func Decode(kv *raftstore.KV, obj Object) error {
	if err := vt.Unmarshal(kv.Value, obj); err != nil {
		return fmt.Errorf("objects: decode %q: %w", kv.Key, err)
	}
	md := obj.GetMetadata()
	if md == nil {
		return fmt.Errorf("objects: decode %q: no metadata", kv.Key)
	}
	md.ResourceVersion = strconv.FormatInt(kv.ModRevision, 10)
	return nil
}

// Revision returns obj's resourceVersion as a store revision (0 if unset).
func Revision(obj Object) int64 {
	rv, _ := strconv.ParseInt(obj.GetMetadata().GetResourceVersion(), 10, 64)
	return rv
}

// SetRevision sets obj's resourceVersion from a store revision.
func SetRevision(obj Object, rev int64) {
	if md := obj.GetMetadata(); md != nil {
		md.ResourceVersion = strconv.FormatInt(rev, 10)
	}
}

// Get reads ns/name of kind into a new object.
func Get[T Object](ctx context.Context, s *Store, ns, name string, opts ...raftstore.ReadOption) (T, error) {
	var zero T
	k, err := KindOf(zero.ProtoReflect().New().Interface())
	if err != nil {
		return zero, err
	}
	obj, err := s.GetKind(ctx, k, ns, name, opts...)
	if err != nil {
		return zero, err
	}
	return obj.(T), nil
}

// GetKind reads ns/name of kind k, for callers that know the kind only at
// run time (the api stage's object requests).
func (s *Store) GetKind(ctx context.Context, k Kind, ns, name string, opts ...raftstore.ReadOption) (Object, error) {
	kv, err := s.kv.Get(ctx, k.Key(ns, name), opts...)
	if err != nil {
		return nil, fmt.Errorf("get %s %q: %w", k.Resource, nsName(ns, name), err)
	}
	obj := k.New()
	if err := Decode(kv, obj); err != nil {
		return nil, err
	}
	return obj, nil
}

// List reads every object of kind T in namespace ns ("" for all), sorted
// by key, and the revision the list was read at.
func List[T Object](ctx context.Context, s *Store, ns string, opts ...raftstore.ReadOption) ([]T, int64, error) {
	var zero T
	k, err := KindOf(zero.ProtoReflect().New().Interface())
	if err != nil {
		return nil, 0, err
	}
	kvs, rev, err := s.kv.List(ctx, k.Prefix(ns), opts...)
	if err != nil {
		return nil, 0, fmt.Errorf("list %s: %w", k.Resource, err)
	}
	out := make([]T, 0, len(kvs))
	for _, kv := range kvs {
		obj := zero.ProtoReflect().New().Interface().(T)
		if err := Decode(kv, obj); err != nil {
			return nil, 0, err
		}
		out = append(out, obj)
	}
	return out, rev, nil
}

// ListKind reads every object of kind k in namespace ns ("" for all),
// sorted by key, and the revision the list was read at: List for callers
// that know the kind only at run time.
func (s *Store) ListKind(ctx context.Context, k Kind, ns string, opts ...raftstore.ReadOption) ([]Object, int64, error) {
	kvs, rev, err := s.kv.List(ctx, k.Prefix(ns), opts...)
	if err != nil {
		return nil, 0, fmt.Errorf("list %s: %w", k.Resource, err)
	}
	out := make([]Object, 0, len(kvs))
	for _, kv := range kvs {
		obj := k.New()
		if err := Decode(kv, obj); err != nil {
			return nil, 0, err
		}
		out = append(out, obj)
	}
	return out, rev, nil
}

// Create stores a new object (raftstore.ErrAlreadyExists if present) and
// sets its resourceVersion.
func (s *Store) Create(ctx context.Context, obj Object) (int64, error) {
	key, err := KeyOf(obj)
	if err != nil {
		return 0, err
	}
	b, err := Encode(obj)
	if err != nil {
		return 0, err
	}
	rev, err := s.kv.Create(ctx, key, b)
	if err != nil {
		return 0, fmt.Errorf("create %q: %w", key, err)
	}
	SetRevision(obj, rev)
	return rev, nil
}

// Update replaces an object if its stored revision is still the
// resourceVersion obj carries (raftstore.ErrConflict otherwise), and sets
// the new resourceVersion.
func (s *Store) Update(ctx context.Context, obj Object) (int64, error) {
	key, err := KeyOf(obj)
	if err != nil {
		return 0, err
	}
	expect := Revision(obj)
	if expect == 0 {
		return 0, fmt.Errorf("%w: update %q without a resourceVersion", ErrInvalid, key)
	}
	b, err := Encode(obj)
	if err != nil {
		return 0, err
	}
	rev, err := s.kv.Update(ctx, key, b, expect)
	if err != nil {
		return 0, fmt.Errorf("update %q: %w", key, err)
	}
	SetRevision(obj, rev)
	return rev, nil
}

// Delete removes ns/name of kind k; expectedRev 0 deletes whatever is there.
func (s *Store) Delete(ctx context.Context, k Kind, ns, name string, expectedRev int64) (int64, error) {
	rev, err := s.kv.Delete(ctx, k.Key(ns, name), expectedRev)
	if err != nil {
		return 0, fmt.Errorf("delete %s %q: %w", k.Resource, nsName(ns, name), err)
	}
	return rev, nil
}

// Apply creates obj, or replaces what is stored under its key whatever its
// revision (the last writer wins, as `kubectl apply` of a whole object).
func (s *Store) Apply(ctx context.Context, obj Object) (int64, error) {
	key, err := KeyOf(obj)
	if err != nil {
		return 0, err
	}
	rev, err := s.commit(ctx, Txn{}.Put(obj))
	if err != nil {
		return 0, fmt.Errorf("apply %q: %w", key, err)
	}
	return rev, nil
}

// ErrNoChange, returned by a Mutate function, ends Mutate without writing.
var ErrNoChange = errors.New("objects: no change")

// Mutate reads ns/name, applies f and writes the result back with
// compare-and-swap, retrying on conflict with a fresh read, so concurrent
// writers never lose each other's changes. f must be idempotent and may run
// several times; it returns ErrNoChange to skip the write. Mutate returns
// the object as stored.
func Mutate[T Object](ctx context.Context, s *Store, ns, name string, f func(T) error) (T, error) {
	var zero T
	for {
		obj, err := Get[T](ctx, s, ns, name)
		if err != nil {
			return zero, err
		}
		if err := f(obj); errors.Is(err, ErrNoChange) {
			return obj, nil
		} else if err != nil {
			return zero, err
		}
		_, err = s.Update(ctx, obj)
		if errors.Is(err, raftstore.ErrConflict) {
			if ctx.Err() != nil {
				return zero, ctx.Err()
			}
			continue
		}
		if err != nil {
			return zero, err
		}
		return obj, nil
	}
}

func nsName(ns, name string) string {
	if ns == "" {
		return name
	}
	return ns + "/" + name
}

// Meta returns obj's metadata, creating it if absent.
func Meta(obj Object) *corev1.ObjectMeta {
	if md := obj.GetMetadata(); md != nil {
		return md
	}
	f := obj.ProtoReflect().Descriptor().Fields().ByName("metadata")
	obj.ProtoReflect().Set(f, obj.ProtoReflect().NewField(f))
	return obj.GetMetadata()
}
