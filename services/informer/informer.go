package informer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/objects"
)

// Handlers receive changes. Any may be nil. For a delete, obj is the last
// known state.
type Handlers[T objects.Object] struct {
	OnAdd    func(obj T)
	OnUpdate func(old, obj T)
	OnDelete func(obj T)
}

// Informer caches every object of kind T (optionally of one namespace).
type Informer[T objects.Object] struct {
	store     *objects.Store
	kind      objects.Kind
	namespace string
	h         Handlers[T]
	dec       func(*raftstore.KV, objects.Object) error
	reuse     func(*raftstore.KV) (T, bool)

	mu      sync.RWMutex
	items   map[string]T // store key -> object
	rev     int64        // revision the cache reflects
	indexes map[string]*index[T]
	synced  chan struct{}
	once    sync.Once
}

// New returns an Informer for kind T in namespace ns ("" for all).
func New[T objects.Object](s *objects.Store, ns string, h Handlers[T]) (*Informer[T], error) {
	var zero T
	k, err := objects.KindOf(zero.ProtoReflect().New().Interface())
	if err != nil {
		return nil, err
	}
	return &Informer[T]{store: s, kind: k, namespace: ns, h: h, dec: objects.Decode, items: map[string]T{}, synced: make(chan struct{})}, nil
}

// NewKind returns an Informer for a generic kind (objects.Kind.Generic,
// stored as *corev1.Unstructured, which names no kind of its own) in
// namespace ns ("" for all).
func NewKind(s *objects.Store, k objects.Kind, ns string, h Handlers[*corev1.Unstructured]) (*Informer[*corev1.Unstructured], error) {
	if !k.Generic {
		return nil, fmt.Errorf("%w: %s is not a generic kind: use New", objects.ErrUnknownKind, k.Resource)
	}
	return &Informer[*corev1.Unstructured]{store: s, kind: k, namespace: ns, h: h, dec: objects.Decode, items: map[string]*corev1.Unstructured{},
		synced: make(chan struct{})}, nil
}

// NewMeta is New for a cache of identities: its objects carry only their
// metadata's name, namespace, uid, deletionTimestamp and resourceVersion
// (objects.DecodeMeta), and nothing else is parsed. For a kind written
// often whose cache only tracks what exists (the api's pods, which bound
// tokens name).
func NewMeta[T objects.Object](s *objects.Store, ns string, h Handlers[T]) (*Informer[T], error) {
	return newDecoding(s, ns, h, objects.DecodeMeta)
}

// NewMetaLabels is NewMeta whose objects carry their labels too
// (objects.DecodeMetaLabels): for a cache that follows how objects are
// labelled and nothing else (the endpoints stage's pods, for Service
// selectors).
func NewMetaLabels[T objects.Object](s *objects.Store, ns string, h Handlers[T]) (*Informer[T], error) {
	return newDecoding(s, ns, h, objects.DecodeMetaLabels)
}

// NewDecoding is New whose objects are decoded by dec, for a cache that
// keeps only the fields its handlers read (nodewire.PodWatch's pods: the
// identity, node and ephemeral containers). dec must set what
// objects.Decode sets of the metadata: name, namespace, uid and
// resourceVersion.
func NewDecoding[T objects.Object](s *objects.Store, ns string, h Handlers[T], dec func(*raftstore.KV, objects.Object) error) (*Informer[T], error) {
	return newDecoding(s, ns, h, dec)
}

// NewFiltered is New for a cache whose readers look in full only at the
// objects relevant accepts: every object is first decoded as far as
// objects.DecodeMetaOwners goes (identity, deletionTimestamp, labels and
// owner references, all the metadata relevant may read), and only one
// relevant accepts is decoded in full. The others stay in the cache, with
// their handlers called, as that metadata alone — kube's controllers
// look at a pod another controller controls only to see whose it is. An
// object that turns relevant (released by its controller) is decoded in
// full from its next write on. relevant must be a pure function of the
// metadata it is given.
func NewFiltered[T objects.Object](s *objects.Store, ns string, h Handlers[T], relevant func(md *corev1.ObjectMeta) bool) (*Informer[T], error) {
	if relevant == nil {
		return nil, errors.New("informer: NewFiltered needs a relevant function")
	}
	return newDecoding(s, ns, h, func(kv *raftstore.KV, obj objects.Object) error {
		if err := objects.DecodeMetaOwners(kv, obj); err != nil {
			return err
		}
		if relevant(obj.GetMetadata()) {
			proto.Reset(obj)
			return objects.Decode(kv, obj)
		}
		return nil
	})
}

func newDecoding[T objects.Object](s *objects.Store, ns string, h Handlers[T], dec func(*raftstore.KV, objects.Object) error) (*Informer[T], error) {
	inf, err := New(s, ns, h)
	if err != nil {
		return nil, err
	}
	inf.dec = dec
	return inf, nil
}

// Run lists and watches until ctx is done. Errors other than ctx's are
// retried with backoff; Run returns ctx.Err().
func (inf *Informer[T]) Run(ctx context.Context) error {
	backoff := 100 * time.Millisecond
	for {
		err := inf.listAndWatch(ctx)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !errors.Is(err, raftstore.ErrGone) {
			select {
			case <-time.After(backoff):
			case <-ctx.Done():
				return ctx.Err()
			}
			backoff = min(2*backoff, 5*time.Second)
		}
	}
}

func (inf *Informer[T]) listAndWatch(ctx context.Context) error {
	prefix := inf.kind.Prefix(inf.namespace)
	kvs, rev, err := inf.store.KV().List(ctx, prefix)
	if err != nil {
		return fmt.Errorf("informer %s: list: %w", inf.kind.Resource, err)
	}
	inf.replace(kvs, rev)
	inf.mu.Lock()
	inf.once.Do(func() { close(inf.synced) })
	inf.mu.Unlock()

	w, err := inf.store.KV().Watch(ctx, prefix, rev)
	if err != nil {
		return fmt.Errorf("informer %s: watch: %w", inf.kind.Resource, err)
	}
	defer w.Stop()
	for ev := range w.Events() {
		inf.apply(ev)
	}
	return w.Err()
}

func (inf *Informer[T]) decode(kv *raftstore.KV) (T, bool) {
	var zero T
	if inf.reuse != nil {
		if obj, ok := inf.reuse(kv); ok {
			return obj, true
		}
	}
	obj := zero.ProtoReflect().New().Interface().(T)
	if err := inf.dec(kv, obj); err != nil {
		return zero, false
	}
	return obj, true
}

// Reuse has the informer take, for a stored key-value, the object f
// returns instead of decoding the value, when f says ok: an object the
// caller holds already at that very revision, such as one it wrote itself
// (its watch echo), decoded again for nothing. f must return an object
// equal to the value's decoding, with its resourceVersion; it is shared
// with the caller and, like every cached object, not modified. Call before
// Run.
func (inf *Informer[T]) Reuse(f func(kv *raftstore.KV) (T, bool)) { inf.reuse = f }

// replace installs a fresh list, calling handlers for what changed since
// the previous one (after a relist).
func (inf *Informer[T]) replace(kvs []*raftstore.KV, rev int64) {
	fresh := make(map[string]T, len(kvs))
	for _, kv := range kvs {
		if obj, ok := inf.decode(kv); ok {
			fresh[kv.Key] = obj
		}
	}
	inf.mu.Lock()
	old := inf.items
	inf.items, inf.rev = fresh, rev
	for _, ix := range inf.indexes {
		ix.rebuild(fresh)
	}
	inf.mu.Unlock()
	for _, k := range sortedKeys(fresh) {
		obj := fresh[k]
		if prev, ok := old[k]; !ok {
			call1(inf.h.OnAdd, obj)
		} else if objects.Revision(prev) != objects.Revision(obj) && inf.h.OnUpdate != nil {
			inf.h.OnUpdate(prev, obj)
		}
	}
	for _, k := range sortedKeys(old) {
		if _, ok := fresh[k]; !ok {
			call1(inf.h.OnDelete, old[k])
		}
	}
}

func (inf *Informer[T]) apply(ev raftstore.WatchEvent) {
	key := ev.KV.Key
	switch ev.Type {
	case raftstore.EventPut:
		obj, ok := inf.decode(ev.KV)
		if !ok {
			return
		}
		inf.mu.Lock()
		prev, existed := inf.items[key]
		inf.items[key], inf.rev = obj, ev.Revision
		for _, ix := range inf.indexes {
			if existed {
				ix.update(key, prev, obj)
			} else {
				ix.add(key, obj)
			}
		}
		inf.mu.Unlock()
		if existed {
			if inf.h.OnUpdate != nil {
				inf.h.OnUpdate(prev, obj)
			}
		} else {
			call1(inf.h.OnAdd, obj)
		}
	case raftstore.EventDelete:
		inf.mu.Lock()
		prev, existed := inf.items[key]
		delete(inf.items, key)
		inf.rev = ev.Revision
		if existed {
			for _, ix := range inf.indexes {
				ix.remove(key, prev)
			}
		}
		inf.mu.Unlock()
		if existed {
			call1(inf.h.OnDelete, prev)
		}
	}
}

// WaitForSync blocks until the first list is in the cache or ctx is done.
func (inf *Informer[T]) WaitForSync(ctx context.Context) error {
	inf.mu.RLock()
	synced := inf.synced
	inf.mu.RUnlock()
	select {
	case <-synced:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Get returns the cached ns/name.
func (inf *Informer[T]) Get(ns, name string) (T, bool) {
	inf.mu.RLock()
	defer inf.mu.RUnlock()
	obj, ok := inf.items[inf.kind.Key(ns, name)]
	return obj, ok
}

// List returns the cached objects (of namespace ns, or all for ""),
// sorted by key.
func (inf *Informer[T]) List(ns string) []T {
	prefix := inf.kind.Prefix(ns)
	inf.mu.RLock()
	defer inf.mu.RUnlock()
	keys := make([]string, 0, len(inf.items))
	for k := range inf.items {
		if strings.HasPrefix(k, prefix) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys) // only the namespace's keys
	out := make([]T, len(keys))
	for i, k := range keys {
		out[i] = inf.items[k]
	}
	return out
}

// Len returns how many objects the cache holds.
func (inf *Informer[T]) Len() int {
	inf.mu.RLock()
	defer inf.mu.RUnlock()
	return len(inf.items)
}

// Reset empties the cache, its indexes and its revision, without calling
// a handler, and makes WaitForSync wait for the first list of the next
// Run: for an informer run only now and then (Lazy). Call it only while
// no Run is running.
func (inf *Informer[T]) Reset() {
	inf.mu.Lock()
	defer inf.mu.Unlock()
	inf.items, inf.rev = map[string]T{}, 0
	for _, ix := range inf.indexes {
		ix.rebuild(inf.items)
	}
	inf.synced, inf.once = make(chan struct{}), sync.Once{}
}

// Revision returns the store revision the cache reflects.
func (inf *Informer[T]) Revision() int64 {
	inf.mu.RLock()
	defer inf.mu.RUnlock()
	return inf.rev
}

func call1[T any](f func(T), v T) {
	if f != nil {
		f(v)
	}
}

func sortedKeys[T any](m map[string]T) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
