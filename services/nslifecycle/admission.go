package nslifecycle

import (
	"context"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/informer"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/stage"
)

// forceLiveLookupTTL is how long a namespace this replica marked deleted
// is looked up in the store rather than in the informer's cache, which
// may not have seen the mark yet (kube-apiserver's NamespaceLifecycle
// keeps the same 30 seconds).
const forceLiveLookupTTL = 30 * time.Second

// Admission is kube-apiserver's NamespaceLifecycle admission over an
// informer's cache of the namespaces, and the DELETE of a namespace.
type Admission struct {
	store    *objects.Store
	inf      *informer.Informer[*corev1.Namespace]
	onDelete func(name string)
	now      func() time.Time

	mu     sync.Mutex
	recent map[string]time.Time // namespaces this replica marked deleted, when (Admit)
}

// NewAdmission returns an Admission over st. onDelete, when not nil, is
// called with the name of each namespace a Delete marked (the namespace
// controller's Enqueue, so that its pass starts at once).
func NewAdmission(st *objects.Store, onDelete func(name string)) (*Admission, error) {
	inf, err := informer.New[*corev1.Namespace](st, "", informer.Handlers[*corev1.Namespace]{})
	if err != nil {
		return nil, err
	}
	return &Admission{store: st, inf: inf, onDelete: onDelete, now: time.Now, recent: map[string]time.Time{}}, nil
}

// Start runs the namespace informer on g, stopped by ctx; it returns once
// the informer is synced.
func (a *Admission) Start(ctx context.Context, g *errgroup.Group) error {
	var infs informer.Group
	infs.Add(a.inf)
	return infs.Start(ctx, g)
}

// Delete is Delete over the Admission's store; a namespace it marks is
// handed to onDelete and, for forceLiveLookupTTL, admitted from the store
// only (Admit).
func (a *Admission) Delete(ctx context.Context, name string) (*corev1.Status, *corev1.Namespace) {
	st, ns := Delete(ctx, a.store, name)
	if ns != nil {
		a.mu.Lock()
		for n, t := range a.recent {
			if a.now().Sub(t) > forceLiveLookupTTL {
				delete(a.recent, n)
			}
		}
		a.recent[name] = a.now()
		a.mu.Unlock()
		if a.onDelete != nil {
			a.onDelete(name)
		}
	}
	return st, ns
}

// Admit is NamespaceLifecycle's admission of a new object of resource
// named name in namespace nsName (CheckCreate) from the informer's cache,
// as kube-apiserver's: a namespace missing from the cache, or one this
// replica marked deleted lately and the cache still shows active, is read
// from the store. Another replica's mark may be missed for as long as the
// cache lags; the namespace controller deletes what slipped in meanwhile,
// and a write that must not race the mark compares the namespace's
// revision (see the api stage's object writes).
func (a *Admission) Admit(ctx context.Context, nsName, resource, name string) *corev1.Status {
	ns, ok := a.inf.Get("", nsName)
	a.mu.Lock()
	t, recent := a.recent[nsName]
	a.mu.Unlock()
	if !ok || (recent && a.now().Sub(t) <= forceLiveLookupTTL && !Terminating(ns)) {
		var err error
		if ns, err = Get(ctx, a.store, nsName); err != nil {
			return stage.Internal(err)
		}
	}
	return CheckCreate(ns, nsName, resource, name)
}
