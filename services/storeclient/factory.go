package storeclient

import (
	"context"
	"fmt"
	"reflect"
	"sync"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/informers/admissionregistration"
	"k8s.io/client-go/informers/apiserverinternal"
	"k8s.io/client-go/informers/apps"
	"k8s.io/client-go/informers/autoscaling"
	"k8s.io/client-go/informers/batch"
	"k8s.io/client-go/informers/certificates"
	"k8s.io/client-go/informers/coordination"
	"k8s.io/client-go/informers/core"
	"k8s.io/client-go/informers/discovery"
	"k8s.io/client-go/informers/events"
	"k8s.io/client-go/informers/extensions"
	"k8s.io/client-go/informers/flowcontrol"
	"k8s.io/client-go/informers/internalinterfaces"
	"k8s.io/client-go/informers/lifecycle"
	"k8s.io/client-go/informers/networking"
	"k8s.io/client-go/informers/node"
	"k8s.io/client-go/informers/policy"
	"k8s.io/client-go/informers/rbac"
	"k8s.io/client-go/informers/resource"
	"k8s.io/client-go/informers/scheduling"
	"k8s.io/client-go/informers/storage"
	"k8s.io/client-go/informers/storagemigration"
	"k8s.io/client-go/tools/cache"

	"github.com/podflow/podflow/services/manifest"
	"github.com/podflow/podflow/services/objects"
)

// Factory is client-go's SharedInformerFactory over a podflow store: every
// informer it makes lists and watches the store (listwatch.go), whatever
// informer constructor the typed informers pass it. Safe for concurrent
// use.
type Factory struct {
	store *objects.Store

	mu        sync.Mutex
	informers map[reflect.Type]cache.SharedIndexInformer
	dynamic   map[schema.GroupVersionResource]cache.SharedIndexInformer // kinds without a Go type
	started   map[cache.SharedIndexInformer]bool
	tracked   map[reflect.Type]*tracked // Track's types (nil until made)
	shutdown  bool
	wg        sync.WaitGroup
}

var _ informers.SharedInformerFactory = (*Factory)(nil)

// New returns a Factory over store.
func New(store *objects.Store) *Factory {
	return &Factory{
		store:     store,
		informers: map[reflect.Type]cache.SharedIndexInformer{},
		dynamic:   map[schema.GroupVersionResource]cache.SharedIndexInformer{},
		started:   map[cache.SharedIndexInformer]bool{},
	}
}

// indexers are a new informer's indexers: by namespace. Each informer
// has its own map (AddIndexers adds to it).
func indexers() cache.Indexers {
	return cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}
}

// InformerFor returns the one informer of obj's type, made the first time
// over the store; newFunc (a clientset's informer) is not used.
func (f *Factory) InformerFor(obj runtime.Object, _ internalinterfaces.NewInformerFunc) cache.SharedIndexInformer {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := reflect.TypeOf(obj)
	if inf, ok := f.informers[t]; ok {
		return inf
	}
	kind, err := kindOfKube(obj)
	lw := &listWatch{store: f.store, kind: kind, err: err}
	inf := f.track(t, lw, cache.NewSharedIndexInformer(lw, obj, 0, indexers()))
	f.informers[t] = inf
	return inf
}

// InformerName implements internalinterfaces.SharedInformerFactory: the
// informers have no name for metrics.
func (f *Factory) InformerName() *cache.InformerName { return nil }

// ForResource returns the informer of a stored kind's resource: the typed
// one for a kind with a k8s.io/api Go type, else one of
// *unstructured.Unstructured objects.
func (f *Factory) ForResource(gvr schema.GroupVersionResource) (informers.GenericInformer, error) {
	kind, ok := kindOfResource(gvr)
	if !ok {
		return nil, fmt.Errorf("storeclient: no stored kind for resource %s", gvr)
	}
	gr := gvr.GroupResource()
	if manifest.HasGoType(kind.APIVersion(), kind.Name) {
		inf := f.InformerFor(manifest.NewKube(kind.APIVersion(), kind.Name), nil)
		return genericInformer{inf, cache.NewGenericLister(inf.GetIndexer(), gr)}, nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	inf, ok := f.dynamic[gvr]
	if !ok {
		example := &unstructured.Unstructured{}
		example.SetGroupVersionKind(schema.GroupVersionKind{Group: kind.APIGroup, Version: kind.Version, Kind: kind.Name})
		inf = cache.NewSharedIndexInformer(&listWatch{store: f.store, kind: kind, unstructured: true}, example, 0, indexers())
		f.dynamic[gvr] = inf
	}
	return genericInformer{inf, cache.NewGenericLister(inf.GetIndexer(), gr)}, nil
}

type genericInformer struct {
	inf    cache.SharedIndexInformer
	lister cache.GenericLister
}

func (g genericInformer) Informer() cache.SharedIndexInformer { return g.inf }
func (g genericInformer) Lister() cache.GenericLister         { return g.lister }

// Start runs every informer asked for and not yet running until stopCh
// is closed.
func (f *Factory) Start(stopCh <-chan struct{}) { f.StartWithContext(wait.ContextForChannel(stopCh)) }

// StartWithContext runs every informer asked for and not yet running until
// ctx is done.
func (f *Factory) StartWithContext(ctx context.Context) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.shutdown {
		return
	}
	run := func(inf cache.SharedIndexInformer) {
		if f.started[inf] {
			return
		}
		f.started[inf] = true
		f.wg.Go(func() { inf.RunWithContext(ctx) })
	}
	for _, inf := range f.informers {
		run(inf)
	}
	for _, inf := range f.dynamic {
		run(inf)
	}
}

// Shutdown refuses further Starts and waits until every informer's
// goroutine has returned (their stop channel must be closed).
func (f *Factory) Shutdown() {
	f.mu.Lock()
	f.shutdown = true
	f.mu.Unlock()
	f.wg.Wait()
}

// WaitForCacheSync waits until every started informer has synced or
// stopCh is closed, and reports each informer's state by type.
func (f *Factory) WaitForCacheSync(stopCh <-chan struct{}) map[reflect.Type]bool {
	return f.WaitForCacheSyncWithContext(wait.ContextForChannel(stopCh)).Synced
}

// WaitForCacheSyncWithContext is WaitForCacheSync until ctx is done.
func (f *Factory) WaitForCacheSyncWithContext(ctx context.Context) cache.SyncResult {
	f.mu.Lock()
	infs := map[reflect.Type]cache.SharedIndexInformer{}
	for t, inf := range f.informers {
		if f.started[inf] {
			infs[t] = inf
		}
	}
	var dyn []cache.SharedIndexInformer
	for _, inf := range f.dynamic {
		if f.started[inf] {
			dyn = append(dyn, inf)
		}
	}
	f.mu.Unlock()
	checks := make([]cache.DoneChecker, 0, len(infs)+len(dyn))
	for _, inf := range infs {
		checks = append(checks, inf.HasSyncedChecker())
	}
	for _, inf := range dyn {
		checks = append(checks, inf.HasSyncedChecker())
	}
	cache.WaitFor(ctx, "", checks...)
	res := cache.SyncResult{Synced: make(map[reflect.Type]bool, len(infs))}
	failed := false
	for t, inf := range infs {
		res.Synced[t] = inf.HasSynced()
		failed = failed || !inf.HasSynced()
	}
	for _, inf := range dyn {
		failed = failed || !inf.HasSynced()
	}
	if failed {
		res.Err = context.Cause(ctx)
	}
	return res
}

// The groups' typed informers, all made by InformerFor.

func (f *Factory) Admissionregistration() admissionregistration.Interface {
	return admissionregistration.New(f, "", nil)
}
func (f *Factory) Internal() apiserverinternal.Interface { return apiserverinternal.New(f, "", nil) }
func (f *Factory) Apps() apps.Interface                  { return apps.New(f, "", nil) }
func (f *Factory) Autoscaling() autoscaling.Interface    { return autoscaling.New(f, "", nil) }
func (f *Factory) Batch() batch.Interface                { return batch.New(f, "", nil) }
func (f *Factory) Certificates() certificates.Interface  { return certificates.New(f, "", nil) }
func (f *Factory) Coordination() coordination.Interface  { return coordination.New(f, "", nil) }
func (f *Factory) Core() core.Interface                  { return core.New(f, "", nil) }
func (f *Factory) Discovery() discovery.Interface        { return discovery.New(f, "", nil) }
func (f *Factory) Events() events.Interface              { return events.New(f, "", nil) }
func (f *Factory) Extensions() extensions.Interface      { return extensions.New(f, "", nil) }
func (f *Factory) Flowcontrol() flowcontrol.Interface    { return flowcontrol.New(f, "", nil) }
func (f *Factory) Lifecycle() lifecycle.Interface        { return lifecycle.New(f, "", nil) }
func (f *Factory) Networking() networking.Interface      { return networking.New(f, "", nil) }
func (f *Factory) Node() node.Interface                  { return node.New(f, "", nil) }
func (f *Factory) Policy() policy.Interface              { return policy.New(f, "", nil) }
func (f *Factory) Rbac() rbac.Interface                  { return rbac.New(f, "", nil) }
func (f *Factory) Resource() resource.Interface          { return resource.New(f, "", nil) }
func (f *Factory) Scheduling() scheduling.Interface      { return scheduling.New(f, "", nil) }
func (f *Factory) Storage() storage.Interface            { return storage.New(f, "", nil) }
func (f *Factory) Storagemigration() storagemigration.Interface {
	return storagemigration.New(f, "", nil)
}

// kindOfKube is the stored kind of a k8s.io/api object's type, at the
// version the store keeps.
func kindOfKube(obj runtime.Object) (objects.Kind, error) {
	gvks, _, err := manifest.Scheme.ObjectKinds(obj)
	if err != nil {
		return objects.Kind{}, fmt.Errorf("storeclient: %T: %w", obj, err)
	}
	for _, gvk := range gvks {
		for _, k := range objects.Kinds() {
			if k.APIGroup == gvk.Group && k.Name == gvk.Kind {
				if k.Version != gvk.Version {
					return objects.Kind{}, fmt.Errorf("storeclient: %s is stored at %s, not %s", gvk.GroupKind(), k.APIVersion(), gvk.GroupVersion())
				}
				return k, nil
			}
		}
	}
	return objects.Kind{}, fmt.Errorf("storeclient: the store keeps no %T", obj)
}

// kindOfResource is the stored kind of a group version resource.
func kindOfResource(gvr schema.GroupVersionResource) (objects.Kind, bool) {
	for _, k := range objects.Kinds() {
		if k.APIGroup == gvr.Group && k.Resource == gvr.Resource && k.Version == gvr.Version {
			return k, true
		}
	}
	return objects.Kind{}, false
}
