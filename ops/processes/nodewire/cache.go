package nodewire

import (
	"context"
	"sync"
	"time"

	corev1 "github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/vt"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/pipeline"
)

// objectCache is kubelet's watch-based ConfigMap and Secret managers
// (pkg/kubelet/util/manager/watch_based_manager.go): the objects the
// node's pods reference are kept by one watch per object, shared by every
// pod that references it and started by the first, stopped when the last
// one goes. A read of a referenced object waits until its watch's first
// read (a linearizable list of its key) is in, then answers from the
// cache; a read of an object no registered pod references, or whose first
// read is not in within cacheSyncWait, goes to the store. A watch that
// ends (a compaction, a leader change) reads the object again and watches
// from there.
type objectCache struct {
	kv  objects.KV
	ctx context.Context // the cache's life: every watch ends with it

	mu    sync.Mutex
	items map[string]*cacheItem // by store key
	pods  map[string][]string   // by pod uid: the keys it registered
}

// cacheItem is one referenced object.
type cacheItem struct {
	refs   int
	cancel context.CancelFunc
	synced chan struct{}   // closed by the first read
	done   <-chan struct{} // closed when its watch stops

	mu sync.Mutex
	kv *raftstore.KV // nil: not found
	// obj is kv decoded, by the first read since kv was set (nil: not yet):
	// read-only, each read hands out a copy. Every pod with a token volume
	// reads kube-root-ca.crt at its start and at each volume refresh; a
	// copy costs a fraction of a decode of its certificate.
	obj objects.Object
}

// set makes kv the item's object (nil: not found).
func (it *cacheItem) set(kv *raftstore.KV) {
	it.mu.Lock()
	defer it.mu.Unlock()
	it.kv, it.obj = kv, nil
}

// object returns the item's object decoded, a copy of the caller's own
// (a new T) unless shared, or found false when it does not exist. A
// shared object is the item's own: read-only.
func object[T objects.Object](it *cacheItem, newT func() T, shared bool) (obj T, found bool, err error) {
	it.mu.Lock()
	defer it.mu.Unlock()
	if it.kv == nil {
		return obj, false, nil
	}
	dec, ok := it.obj.(T)
	if !ok {
		dec = newT()
		if err := objects.Decode(it.kv, dec); err != nil {
			return obj, true, err
		}
		it.obj = dec
	}
	if shared {
		return dec, true, nil
	}
	return vt.Clone(dec), true, nil
}

// cacheRetry is how long a watch that failed to start waits to read
// again.
const cacheRetry = time.Second

func newObjectCache(ctx context.Context, kv objects.KV) *objectCache {
	return &objectCache{kv: kv, ctx: ctx, items: map[string]*cacheItem{}, pods: map[string][]string{}}
}

// podKeys are the store keys of the ConfigMaps and Secrets pod references.
func podKeys(pod *corev1.Pod) []string {
	ns := pod.GetMetadata().GetNamespace()
	secrets, configMaps := pipeline.PodReferences(pod)
	var keys []string
	for _, n := range secrets {
		keys = append(keys, objects.Secrets.Key(ns, n))
	}
	for _, n := range configMaps {
		keys = append(keys, objects.ConfigMaps.Key(ns, n))
	}
	return keys
}

// register adds pod's references (once per pod uid), starting a watch
// for each object no other pod references.
func (c *objectCache) register(pod *corev1.Pod) {
	uid := pod.GetMetadata().GetUid()
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.pods[uid]; ok || c.ctx.Err() != nil {
		return
	}
	keys := podKeys(pod)
	c.pods[uid] = keys
	for _, k := range keys {
		it := c.items[k]
		if it == nil {
			ctx, cancel := context.WithCancel(c.ctx)
			it = &cacheItem{cancel: cancel, synced: make(chan struct{}), done: ctx.Done()}
			c.items[k] = it
			go c.watch(ctx, k, it) // ends with ctx: unregister or the cache's end
		}
		it.refs++
	}
}

// unregister drops pod's references; an object no pod references any
// more has its watch stopped and is forgotten.
func (c *objectCache) unregister(uid string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	keys, ok := c.pods[uid]
	if !ok {
		return
	}
	delete(c.pods, uid)
	for _, k := range keys {
		it := c.items[k]
		if it == nil {
			continue
		}
		if it.refs--; it.refs <= 0 {
			it.cancel()
			delete(c.items, k)
		}
	}
}

// cacheSyncWait is how long a read waits for an object's first read to be
// in (kubelet's watch-based manager waits a second) before it reads the
// store itself.
const cacheSyncWait = time.Second

// get returns the cached item of key once its first read is in; ok is
// false when no registered pod references key, or its first read is not
// in after cacheSyncWait: the caller reads the store.
func (c *objectCache) get(ctx context.Context, key string) (item *cacheItem, ok bool, err error) {
	c.mu.Lock()
	it := c.items[key]
	c.mu.Unlock()
	if it == nil {
		return nil, false, nil
	}
	select {
	case <-it.synced:
	default:
		t := time.NewTimer(cacheSyncWait)
		defer t.Stop()
		select {
		case <-it.synced:
		case <-t.C:
			return nil, false, nil
		case <-it.done:
			return nil, false, nil
		case <-ctx.Done():
			return nil, true, ctx.Err()
		}
	}
	return it, true, nil
}

// watch keeps it up to date with key until ctx ends: a linearizable list
// of the key, then a watch from the list's revision; when the watch ends,
// again.
func (c *objectCache) watch(ctx context.Context, key string, it *cacheItem) {
	first := true
	for ctx.Err() == nil {
		kvs, rev, err := c.kv.List(ctx, key)
		if err != nil {
			c.pause(ctx)
			continue
		}
		var cur *raftstore.KV
		for _, kv := range kvs {
			if kv.Key == key {
				cur = kv
			}
		}
		it.set(cur)
		if first {
			first = false
			close(it.synced)
		}
		w, err := c.kv.Watch(ctx, key, rev) // the changes after rev
		if err != nil {
			c.pause(ctx)
			continue
		}
		for ev := range w.Events() {
			if ev.KV == nil || ev.KV.Key != key { // another key with this prefix
				continue
			}
			if ev.Type == raftstore.EventDelete {
				it.set(nil)
			} else {
				it.set(ev.KV)
			}
		}
		w.Stop()
	}
}

func (c *objectCache) pause(ctx context.Context) {
	t := time.NewTimer(cacheRetry)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
