package storeclient

import (
	"context"
	"fmt"
	"reflect"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"

	"github.com/podflow/podflow/services/objects"
)

// Track has the factory follow, for each of objs' types, what every event
// handler of its informer has been given, so that WaitForRevision can
// tell when the handlers (and the listers, which are ahead of them) have
// caught up with the store. Call before the informers are asked for;
// kinds are few and small (webhook configurations, policies): each
// handler's view of the kind is kept.
func (f *Factory) Track(objs ...runtime.Object) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.tracked == nil {
		f.tracked = map[reflect.Type]*tracked{}
	}
	for _, obj := range objs {
		t := reflect.TypeOf(obj)
		if _, ok := f.informers[t]; ok {
			panic(fmt.Sprintf("storeclient: Track(%T) after its informer was made", obj))
		}
		f.tracked[t] = nil // made with the informer
	}
}

// Revision returns the highest store revision the tracked informers have
// been given, by a list or a watch event: every change of a tracked kind
// up to it has reached (or is on its way to) its handlers, so a process
// whose own tracked informers reached it has seen at least as much. 0
// when nothing is tracked or nothing is listed yet.
func (f *Factory) Revision() int64 {
	var rev int64
	for _, t := range f.trackedList() {
		rev = max(rev, t.received.Load())
	}
	return rev
}

// WaitForRevision blocks until every event handler of every tracked
// informer has been given each change of its kind up to store revision
// rev (or later ones), or ctx is done (its error, wrapped, then). A kind
// that has not changed since the informer's list is confirmed by reading
// it from the store (a linearizable list at or past rev) and comparing;
// once confirmed up to a revision, the kind is not read again for an
// older one, so a process admitting many requests reads the store once
// per configuration change, not once per request.
func (f *Factory) WaitForRevision(ctx context.Context, rev int64) error {
	for _, t := range f.trackedList() {
		if err := t.waitFor(ctx, rev); err != nil {
			return err
		}
	}
	return nil
}

func (f *Factory) trackedList() []*tracked {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]*tracked, 0, len(f.tracked))
	for _, t := range f.tracked {
		if t != nil {
			out = append(out, t)
		}
	}
	return out
}

// track wraps a new informer of type t when t is tracked (f.mu held).
func (f *Factory) track(t reflect.Type, lw *listWatch, inf cache.SharedIndexInformer) cache.SharedIndexInformer {
	if _, ok := f.tracked[t]; !ok {
		return inf
	}
	lw.received = &atomic.Int64{}
	tr := &tracked{SharedIndexInformer: inf, inf: inf, store: f.store, kind: lw.kind, unstructured: lw.unstructured, received: lw.received,
		views: map[*view]bool{}}
	f.tracked[t] = tr
	// The listers read the indexer, which is updated before any handler
	// is told: a handler of our own stands for them.
	if _, err := tr.AddEventHandler(cache.ResourceEventHandlerFuncs{}); err != nil {
		panic(err) // a new informer takes handlers
	}
	return tr
}

// tracked is a SharedIndexInformer whose event handlers are followed: each
// handler's view (the resourceVersion of each object it was last given),
// updated after the handler returns.
type tracked struct {
	cache.SharedIndexInformer
	inf          cache.SharedIndexInformer
	store        *objects.Store
	kind         objects.Kind
	unstructured bool
	received     *atomic.Int64 // the listWatch's

	confirm sync.Mutex // one store read at a time

	mu        sync.Mutex
	views     map[*view]bool
	handles   map[cache.ResourceEventHandlerRegistration]*view
	confirmed int64 // every view matched the store at this revision
	changed   chan struct{}
}

func (t *tracked) AddEventHandler(h cache.ResourceEventHandler) (cache.ResourceEventHandlerRegistration, error) {
	return t.add(h, func(h cache.ResourceEventHandler) (cache.ResourceEventHandlerRegistration, error) {
		return t.inf.AddEventHandler(h)
	})
}

func (t *tracked) AddEventHandlerWithResyncPeriod(h cache.ResourceEventHandler, p time.Duration) (cache.ResourceEventHandlerRegistration, error) {
	return t.add(h, func(h cache.ResourceEventHandler) (cache.ResourceEventHandlerRegistration, error) {
		return t.inf.AddEventHandlerWithResyncPeriod(h, p)
	})
}

func (t *tracked) AddEventHandlerWithOptions(h cache.ResourceEventHandler, o cache.HandlerOptions) (cache.ResourceEventHandlerRegistration, error) {
	return t.add(h, func(h cache.ResourceEventHandler) (cache.ResourceEventHandlerRegistration, error) {
		return t.inf.AddEventHandlerWithOptions(h, o)
	})
}

func (t *tracked) RemoveEventHandler(handle cache.ResourceEventHandlerRegistration) error {
	t.mu.Lock()
	if v, ok := t.handles[handle]; ok {
		delete(t.views, v)
		delete(t.handles, handle)
	}
	t.mu.Unlock()
	return t.inf.RemoveEventHandler(handle)
}

func (t *tracked) add(h cache.ResourceEventHandler, register func(cache.ResourceEventHandler) (cache.ResourceEventHandlerRegistration, error)) (cache.ResourceEventHandlerRegistration, error) {
	v := &view{t: t, next: h, rv: map[string]int64{}}
	t.mu.Lock()
	t.views[v] = true
	t.mu.Unlock()
	handle, err := register(v)
	t.mu.Lock()
	defer t.mu.Unlock()
	if err != nil {
		delete(t.views, v)
		return nil, err
	}
	if t.handles == nil {
		t.handles = map[cache.ResourceEventHandlerRegistration]*view{}
	}
	t.handles[handle] = v
	return handle, nil
}

// notify wakes the waiters (t.mu held).
func (t *tracked) notify() {
	if t.changed != nil {
		close(t.changed)
		t.changed = nil
	}
}

func (t *tracked) waitFor(ctx context.Context, rev int64) error {
	if t.confirmedAt(rev) {
		return nil
	}
	t.confirm.Lock()
	defer t.confirm.Unlock()
	if t.confirmedAt(rev) { // another request confirmed it meanwhile
		return nil
	}
	kvs, at, err := t.store.KV().List(ctx, t.kind.Prefix(""))
	if err != nil {
		return fmt.Errorf("storeclient: %s at revision %d: %w", t.kind.Resource, rev, err)
	}
	want := make(map[string]int64, len(kvs))
	for _, kv := range kvs {
		obj, err := decodeKube(t.kind, kv, t.unstructured)
		if err != nil {
			continue // the informer drops it too
		}
		key, err := cache.MetaNamespaceKeyFunc(obj)
		if err != nil {
			continue
		}
		want[key] = kv.ModRevision
	}
	for {
		t.mu.Lock()
		behind := 0
		for v := range t.views {
			if !v.reached(want, at) {
				behind++
			}
		}
		if behind == 0 {
			t.confirmed = max(t.confirmed, at)
			t.mu.Unlock()
			return nil
		}
		if t.changed == nil {
			t.changed = make(chan struct{})
		}
		ch := t.changed
		t.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("storeclient: %d handlers of the %s informer have not reached revision %d: %w",
				behind, t.kind.Resource, at, context.Cause(ctx))
		}
	}
}

func (t *tracked) confirmedAt(rev int64) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.confirmed >= rev
}

// view is one event handler of a tracked informer and what it was given.
// Notifications reach a handler in the informer's order, so a handler
// given a change past a revision was given every change before it.
type view struct {
	t    *tracked
	next cache.ResourceEventHandler
	// rv is each object's resourceVersion as last given; seen the highest
	// given (t.mu).
	rv   map[string]int64
	seen int64
}

func (v *view) OnAdd(obj any, initial bool) {
	v.next.OnAdd(obj, initial)
	v.set(obj, false)
}

func (v *view) OnUpdate(old, obj any) {
	v.next.OnUpdate(old, obj)
	v.set(obj, false)
}

func (v *view) OnDelete(obj any) {
	v.next.OnDelete(obj)
	v.set(obj, true)
}

func (v *view) set(obj any, deleted bool) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		return
	}
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	var rv int64
	if m, err := meta.Accessor(obj); err == nil {
		rv, _ = strconv.ParseInt(m.GetResourceVersion(), 10, 64)
	}
	v.t.mu.Lock()
	defer v.t.mu.Unlock()
	if deleted {
		delete(v.rv, key)
	} else {
		v.rv[key] = rv
	}
	v.seen = max(v.seen, rv)
	v.t.notify()
}

// reached reports whether the handler's view is the store's at revision
// at (want: each object's resourceVersion), or the handler was given a
// change after it (t.mu held).
func (v *view) reached(want map[string]int64, at int64) bool {
	if v.seen > at {
		return true
	}
	if len(v.rv) != len(want) {
		return false
	}
	for k, rv := range want {
		if v.rv[k] != rv {
			return false
		}
	}
	return true
}
