package storeclient

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/manifest"
	"github.com/podflow/podflow/services/objects"
)

// listWatch is client-go's ListerWatcher over one stored kind: a list of
// the store at one revision, then the store's ordered watch from it. A
// watch the store has compacted past ends with 410 Expired, so the
// reflector lists again.
type listWatch struct {
	store        *objects.Store
	kind         objects.Kind
	err          error // the kind cannot be served: every list fails with it
	unstructured bool  // objects as *unstructured.Unstructured
	// received, when set, is raised to the revision of each list and
	// watch event given to the informer (Factory.Track).
	received *atomic.Int64
}

func (lw *listWatch) receive(rev int64) {
	if lw.received == nil {
		return
	}
	for {
		cur := lw.received.Load()
		if rev <= cur || lw.received.CompareAndSwap(cur, rev) {
			return
		}
	}
}

var _ cache.ListerWatcherWithContext = (*listWatch)(nil)

func (lw *listWatch) List(o metav1.ListOptions) (runtime.Object, error) {
	return lw.ListWithContext(context.Background(), o)
}

func (lw *listWatch) Watch(o metav1.ListOptions) (watch.Interface, error) {
	return lw.WatchWithContext(context.Background(), o)
}

// IsWatchListSemanticsUnSupported tells client-go's reflector to list, then
// watch: the store's watch sends no initial events.
func (lw *listWatch) IsWatchListSemanticsUnSupported() bool { return true }

// ListWithContext lists every object of the kind (list options are not
// applied: the informers here select nothing).
func (lw *listWatch) ListWithContext(ctx context.Context, _ metav1.ListOptions) (runtime.Object, error) {
	if lw.err != nil {
		return nil, lw.err
	}
	kvs, rev, err := lw.store.KV().List(ctx, lw.kind.Prefix(""))
	if err != nil {
		return nil, fmt.Errorf("storeclient: list %s: %w", lw.kind.Resource, err)
	}
	list := &metav1.List{ListMeta: metav1.ListMeta{ResourceVersion: strconv.FormatInt(rev, 10)}}
	defer lw.receive(rev) // once returned to the reflector
	list.Items = make([]runtime.RawExtension, 0, len(kvs))
	for _, kv := range kvs {
		obj, err := lw.decode(kv)
		if err != nil {
			utilruntime.HandleError(err) // one bad object does not hide the others
			continue
		}
		list.Items = append(list.Items, runtime.RawExtension{Object: obj})
	}
	return list, nil
}

// decode is a stored key-value's Kubernetes object.
func (lw *listWatch) decode(kv *raftstore.KV) (runtime.Object, error) {
	return decodeKube(lw.kind, kv, lw.unstructured)
}

func decodeKube(kind objects.Kind, kv *raftstore.KV, asUnstructured bool) (runtime.Object, error) {
	obj := kind.New()
	if err := objects.Decode(kv, obj); err != nil {
		return nil, fmt.Errorf("storeclient: %w", err)
	}
	k, err := manifest.ToKube(obj)
	if err != nil {
		return nil, fmt.Errorf("storeclient: %s: %w", kv.Key, err)
	}
	if !asUnstructured {
		return k, nil
	}
	if u, ok := k.(*unstructured.Unstructured); ok {
		return u, nil
	}
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(k)
	if err != nil {
		return nil, fmt.Errorf("storeclient: %s: %w", kv.Key, err)
	}
	u := &unstructured.Unstructured{Object: m}
	u.SetGroupVersionKind(schema.GroupVersionKind{Group: kind.APIGroup, Version: kind.Version, Kind: kind.Name})
	return u, nil
}

// WatchWithContext watches the kind from the revision of o.ResourceVersion.
func (lw *listWatch) WatchWithContext(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
	if lw.err != nil {
		return nil, lw.err
	}
	rev, err := strconv.ParseInt(o.ResourceVersion, 10, 64)
	if err != nil && o.ResourceVersion != "" {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("resourceVersion %q is not a store revision", o.ResourceVersion))
	}
	wctx, cancel := context.WithCancel(ctx)
	w, err := lw.store.KV().Watch(wctx, lw.kind.Prefix(""), rev)
	if err != nil {
		cancel()
		if errors.Is(err, raftstore.ErrGone) {
			return nil, apierrors.NewResourceExpired(err.Error())
		}
		return nil, fmt.Errorf("storeclient: watch %s: %w", lw.kind.Resource, err)
	}
	sw := &storeWatch{result: make(chan watch.Event), cancel: cancel, done: make(chan struct{})}
	go sw.run(wctx, lw, w)
	return sw, nil
}

// storeWatch is a store watch as a watch.Interface. Its goroutine ends
// when the store's watch ends or Stop is called; Stop waits for it.
type storeWatch struct {
	result chan watch.Event
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
}

func (sw *storeWatch) ResultChan() <-chan watch.Event { return sw.result }

func (sw *storeWatch) Stop() {
	sw.once.Do(func() {
		sw.cancel()
		<-sw.done
	})
}

func (sw *storeWatch) run(ctx context.Context, lw *listWatch, w objects.Watch) {
	defer close(sw.done)
	defer close(sw.result)
	defer w.Stop()
	send := func(ev watch.Event) bool {
		select {
		case sw.result <- ev:
			return true
		case <-ctx.Done():
			return false
		}
	}
	for ev := range w.Events() {
		obj, err := lw.decode(ev.KV)
		if err != nil {
			utilruntime.HandleError(err)
			lw.receive(ev.Revision) // the informer will never have it
			continue
		}
		t := watch.Modified
		switch {
		case ev.Type == raftstore.EventDelete:
			t = watch.Deleted
		case ev.KV.CreateRevision == ev.KV.ModRevision:
			t = watch.Added
		}
		if !send(watch.Event{Type: t, Object: obj}) {
			return
		}
		lw.receive(ev.Revision)
	}
	if err := w.Err(); err != nil && ctx.Err() == nil {
		st := apierrors.NewInternalError(err).ErrStatus
		if errors.Is(err, raftstore.ErrGone) {
			st = apierrors.NewResourceExpired(err.Error()).ErrStatus
		}
		send(watch.Event{Type: watch.Error, Object: &st})
	}
}
