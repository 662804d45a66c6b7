package namespace

import (
	"context"
	"time"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/stage"
)

// forceLiveLookupTTL is how long a namespace this replica marked deleted
// is looked up in the store rather than in the informer's cache, which
// may not have seen the mark yet (kube-apiserver's NamespaceLifecycle
// keeps the same 30 seconds).
const forceLiveLookupTTL = 30 * time.Second

// Delete is Delete over the controller's store; a namespace it marks is
// queued for a pass at once and, for forceLiveLookupTTL, admitted from
// the store only (Admit).
func (c *Controller) Delete(ctx context.Context, name string) (*corev1.Status, *corev1.Namespace) {
	st, ns := Delete(ctx, c.env.Store, name)
	if ns != nil {
		c.mu.Lock()
		for n, t := range c.recent {
			if c.now().Sub(t) > forceLiveLookupTTL {
				delete(c.recent, n)
			}
		}
		c.recent[name] = c.now()
		c.mu.Unlock()
		c.Enqueue(name)
	}
	return st, ns
}

// Admit is NamespaceLifecycle's admission of a new object of resource
// named name in namespace nsName (CheckCreate) from the informer's cache,
// as kube-apiserver's: a namespace missing from the cache, or one this
// replica marked deleted lately and the cache still shows active, is read
// from the store. Another replica's mark may be missed for as long as the
// cache lags; the controller deletes what slipped in meanwhile, and a
// write that must not race the mark compares the namespace's revision
// (see the api stage's object writes).
func (c *Controller) Admit(ctx context.Context, nsName, resource, name string) *corev1.Status {
	ns, ok := c.inf.Get("", nsName)
	c.mu.Lock()
	t, recent := c.recent[nsName]
	c.mu.Unlock()
	if !ok || (recent && c.now().Sub(t) <= forceLiveLookupTTL && !Terminating(ns)) {
		var err error
		if ns, err = Get(ctx, c.env.Store, nsName); err != nil {
			return stage.Internal(err)
		}
	}
	return CheckCreate(ns, nsName, resource, name)
}
