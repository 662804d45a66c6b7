package informer

import (
	"errors"
	"fmt"
	"slices"
)

// ErrIndexExists: AddIndex was called twice with one name.
var ErrIndexExists = errors.New("informer: an index of that name exists")

// IndexFunc returns the values under which an index files obj (none: the
// index does not hold it), as client-go's cache.IndexFunc. It must depend
// only on obj and be cheap: it runs under the cache's lock, for every
// change.
type IndexFunc[T any] func(obj T) []string

// index is one index of the cache: its function, and for each value the
// objects filed under it, by store key (the objects themselves, so that
// ByIndex looks nothing up in the cache).
type index[T any] struct {
	f    IndexFunc[T]
	keys map[string]map[string]T
}

func (ix *index[T]) add(key string, obj T) { ix.addValues(key, obj, ix.f(obj)) }

func (ix *index[T]) remove(key string, obj T) { ix.removeValues(key, ix.f(obj)) }

// update files key, which was prev and is now obj, under obj's values:
// an update that leaves them as they were (most do: a pod's status
// changed, not its controller) only replaces the object under them.
func (ix *index[T]) update(key string, prev, obj T) {
	old, cur := ix.f(prev), ix.f(obj)
	if !slices.Equal(old, cur) {
		ix.removeValues(key, old)
	}
	ix.addValues(key, obj, cur)
}

func (ix *index[T]) addValues(key string, obj T, values []string) {
	for _, v := range values {
		set := ix.keys[v]
		if set == nil {
			set = map[string]T{}
			ix.keys[v] = set
		}
		set[key] = obj
	}
}

func (ix *index[T]) removeValues(key string, values []string) {
	for _, v := range values {
		set := ix.keys[v]
		delete(set, key)
		if len(set) == 0 {
			delete(ix.keys, v)
		}
	}
}

func (ix *index[T]) rebuild(items map[string]T) {
	ix.keys = map[string]map[string]T{}
	for k, obj := range items {
		ix.add(k, obj)
	}
}

// AddIndex adds an index named name over the cache, kept by f, as
// client-go's SharedIndexInformer.AddIndexers: ByIndex then finds the
// objects filed under a value without looking at the others. Call before
// Run (an index added later is built from the cache at once).
func (inf *Informer[T]) AddIndex(name string, f IndexFunc[T]) error {
	inf.mu.Lock()
	defer inf.mu.Unlock()
	if _, ok := inf.indexes[name]; ok {
		return fmt.Errorf("%w: %q", ErrIndexExists, name)
	}
	if inf.indexes == nil {
		inf.indexes = map[string]*index[T]{}
	}
	ix := &index[T]{f: f}
	ix.rebuild(inf.items)
	inf.indexes[name] = ix
	return nil
}

// ByIndex returns the cached objects that index name files under value,
// in no particular order (client-go's Indexer.ByIndex); none for an
// unknown index or value.
func (inf *Informer[T]) ByIndex(name, value string) []T {
	inf.mu.RLock()
	defer inf.mu.RUnlock()
	ix := inf.indexes[name]
	if ix == nil {
		return nil
	}
	set := ix.keys[value]
	out := make([]T, 0, len(set))
	for _, obj := range set {
		out = append(out, obj)
	}
	return out
}

// IndexValues returns the values index name files some object under,
// in no particular order (client-go's Indexer.ListIndexFuncValues); none
// for an unknown index.
func (inf *Informer[T]) IndexValues(name string) []string {
	inf.mu.RLock()
	defer inf.mu.RUnlock()
	ix := inf.indexes[name]
	if ix == nil {
		return nil
	}
	out := make([]string, 0, len(ix.keys))
	for v := range ix.keys {
		out = append(out, v)
	}
	return out
}
