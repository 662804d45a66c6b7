package apiserver

import (
	"encoding/json"
	"strconv"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/objects"
)

// kubeCache keeps the Kubernetes form (object and JSON) of stored objects
// by key and revision, so that a list converts only what changed since the
// last one: a store revision names one immutable value, so an entry is
// valid as long as its revision matches. It holds at most max entries,
// dropping arbitrary ones when full. Cached objects are shared: callers
// must not modify them.
type kubeCache struct {
	max int
	mu  sync.Mutex
	m   map[string]cachedKube
}

type cachedKube struct {
	rev int64
	obj runtime.Object
	raw []byte
}

func newKubeCache(max int) *kubeCache {
	return &kubeCache{max: max, m: make(map[string]cachedKube)}
}

// convert returns kv's Kubernetes form for res, from the cache when it
// holds kv's revision.
func (c *kubeCache) convert(res *resource, kv *raftstore.KV) (runtime.Object, []byte, error) {
	key := res.cacheKey() + "|" + kv.Key
	c.mu.Lock()
	e, ok := c.m[key]
	c.mu.Unlock()
	if ok && e.rev == kv.ModRevision {
		return e.obj, e.raw, nil
	}
	obj := res.store.New()
	if err := objects.Decode(kv, obj); err != nil {
		return nil, nil, err
	}
	k, err := res.toKube(obj)
	if err != nil {
		return nil, nil, err
	}
	raw, err := json.Marshal(k)
	if err != nil {
		return nil, nil, err
	}
	c.mu.Lock()
	if len(c.m) >= c.max {
		for k := range c.m { // drop an arbitrary tenth
			delete(c.m, k)
			if len(c.m) < c.max*9/10 {
				break
			}
		}
	}
	c.m[key] = cachedKube{rev: kv.ModRevision, obj: k, raw: raw}
	c.mu.Unlock()
	return k, raw, nil
}

// forget drops a deleted key's entries.
func (c *kubeCache) forget(res *resource, key string) {
	c.mu.Lock()
	delete(c.m, res.cacheKey()+"|"+key)
	c.mu.Unlock()
}

// rawList is a list response assembled from cached JSON items.
type rawList struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Metadata   metav1.ListMeta   `json:"metadata"`
	Items      []json.RawMessage `json:"items"`
}

func newRawList(res *resource, rev int64, items []kubeItem) *rawList {
	l := &rawList{APIVersion: res.groupVersion(), Kind: res.kind + "List",
		Metadata: metav1.ListMeta{ResourceVersion: strconv.FormatInt(rev, 10)}, Items: make([]json.RawMessage, len(items))}
	for i, it := range items {
		l.Items[i] = it.raw
	}
	return l
}

// kubeItem is one listed object in its Kubernetes form.
type kubeItem struct {
	key string // the store key
	obj runtime.Object
	raw []byte
}
