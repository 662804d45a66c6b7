package crd

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/informer"
	"github.com/podflow/podflow/services/manifest"
	"github.com/podflow/podflow/services/objects"
)

// Catalog is the CustomResourceDefinitions one process serves: it
// follows them in the store (an informer), builds each one's Definition
// and registers its kind (objects.Replace), so that the api stage and the
// HTTPS server of the process serve its objects; it unregisters the kind
// when the definition goes. It is safe for concurrent use.
type Catalog struct {
	store *objects.Store
	conv  Converters
	log   *slog.Logger

	inf *informer.Informer[*corev1.Unstructured]

	mu   sync.Mutex               // serializes changes; readers use snap
	snap atomic.Pointer[snapshot] // immutable
	// syncing coalesces Sync calls: the callers of one in flight wait
	// for it.
	syncing chan struct{}
}

// snapshot is one immutable state of the catalog.
type snapshot struct {
	gen    uint64
	byName map[string]*Definition    // every definition, by its name
	byGR   map[[2]string]*Definition // servable ones, by group and accepted plural
	failed map[string]error          // definitions that cannot be served, why
}

// Config configures a Catalog.
type Config struct {
	// Store is read for the definitions (and, by the default resolver,
	// conversion webhooks' Services).
	Store *objects.Store
	// Converters make each definition's converter; nil: conversion None
	// and Webhook, a webhook Service resolved from the Store
	// (ServiceResolver).
	Converters Converters
	Log        *slog.Logger
}

// Validate checks the Config.
func (c Config) Validate() error {
	if c.Store == nil {
		return fmt.Errorf("crd: Config.Store is required")
	}
	return nil
}

// NewCatalog returns a Catalog; Start it.
func NewCatalog(cfg Config) (*Catalog, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Converters == nil {
		var err error
		if cfg.Converters, err = NewConverters(ServiceResolver{Store: cfg.Store}); err != nil {
			return nil, err
		}
	}
	c := &Catalog{store: cfg.Store, conv: cfg.Converters, log: cfg.Log}
	c.snap.Store(&snapshot{byName: map[string]*Definition{}, byGR: map[[2]string]*Definition{}, failed: map[string]error{}})
	inf, err := informer.NewKind(cfg.Store, objects.CustomResourceDefinitions, "", informer.Handlers[*corev1.Unstructured]{
		OnAdd:    func(u *corev1.Unstructured) { c.observe(u) },
		OnUpdate: func(_, u *corev1.Unstructured) { c.observe(u) },
		OnDelete: func(u *corev1.Unstructured) { c.forget(u.GetMetadata().GetName(), objects.Revision(u)) },
	})
	if err != nil {
		return nil, err
	}
	c.inf = inf
	return c, nil
}

// Start follows the definitions on g until ctx is done (then it
// unregisters their kinds); it returns once the catalog holds every
// stored definition.
func (c *Catalog) Start(ctx context.Context, g *errgroup.Group) error {
	g.Go(func() error {
		defer c.stop()
		if err := c.inf.Run(ctx); ctx.Err() == nil {
			return err
		}
		return nil
	})
	return c.inf.WaitForSync(ctx)
}

// stop unregisters the kinds the catalog registered: the process no
// longer follows their definitions.
func (c *Catalog) stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	next := c.snap.Load().clone()
	for _, d := range next.byGR {
		c.unpublish(next, d)
	}
	c.snap.Store(next)
}

// observe builds and publishes the definition u (as stored), unless the
// catalog has it at this revision or a later one.
func (c *Catalog) observe(u *corev1.Unstructured) {
	rev := objects.Revision(u)
	name := u.GetMetadata().GetName()
	if d, ok := c.snap.Load().byName[name]; ok && d.Revision >= rev {
		return
	}
	crd, err := Decode(u)
	var d *Definition
	if err == nil {
		d, err = NewDefinition(crd, rev, c.conv)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.snap.Load()
	if cur, ok := old.byName[name]; ok && cur.Revision >= rev {
		return
	}
	next := old.clone()
	prev := old.byName[name]
	if err != nil {
		c.log.Error("custom resource definition not served", "crd", name, "err", err)
		next.failed[name] = err
		// The last good definition goes: its objects are not served
		// with a schema the stored definition no longer has.
		c.unpublish(next, prev)
		delete(next.byName, name)
		c.snap.Store(next)
		return
	}
	delete(next.failed, name)
	switch k, err := c.publish(d); {
	case err != nil:
		c.log.Error("custom resource definition not served", "crd", name, "err", err)
		next.failed[name] = err
		d.namesAccepted, d.established = false, false
		fallthrough
	case !d.Servable():
		c.unpublish(next, prev)
	default:
		// The kind was replaced in place (a definition's status update
		// must not leave its objects' kind unknown for a moment); the
		// previous one goes only if it was another.
		d.Kind = k
		if prev != nil && next.byGR[[2]string{prev.Group(), prev.names.Plural}] == prev {
			delete(next.byGR, [2]string{prev.Group(), prev.names.Plural})
			if prev.Group() != d.Group() || (prev.names.Kind != d.names.Kind && prev.names.Plural != d.names.Plural) {
				objects.Unregister(prev.Group(), prev.names.Kind)
			}
		}
		next.byGR[[2]string{d.Group(), d.names.Plural}] = d
	}
	next.byName[name] = d
	c.snap.Store(next)
}

// publish registers a servable definition's kind, replacing the kind of
// the same group with its name or resource (objects.Replace: atomically).
func (c *Catalog) publish(d *Definition) (objects.Kind, error) {
	if !d.Servable() {
		return objects.Kind{}, nil
	}
	return objects.Replace(d.generic)
}

// forget drops the definition name, deleted at revision rev.
func (c *Catalog) forget(name string, rev int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.snap.Load()
	prev, ok := old.byName[name]
	if !ok || prev.Revision > rev {
		return
	}
	next := old.clone()
	c.unpublish(next, prev)
	delete(next.byName, name)
	delete(next.failed, name)
	c.snap.Store(next)
}

// unpublish takes prev (nil: nothing) out of next and unregisters its
// kind (c.mu held).
func (c *Catalog) unpublish(next *snapshot, prev *Definition) {
	if prev == nil {
		return
	}
	gr := [2]string{prev.Group(), prev.names.Plural}
	if next.byGR[gr] == prev {
		delete(next.byGR, gr)
		objects.Unregister(prev.Group(), prev.names.Kind)
	}
}

func (s *snapshot) clone() *snapshot {
	n := &snapshot{gen: s.gen + 1, byName: make(map[string]*Definition, len(s.byName)+1),
		byGR: make(map[[2]string]*Definition, len(s.byGR)+1), failed: make(map[string]error, len(s.failed))}
	for k, v := range s.byName {
		n.byName[k] = v
	}
	for k, v := range s.byGR {
		n.byGR[k] = v
	}
	for k, v := range s.failed {
		n.failed[k] = v
	}
	return n
}

// Sync brings the catalog up to the store now: it reads every definition
// (a linearizable read) and takes in those it has not seen yet or has
// older, and drops those the store no longer has. A request on this
// replica right after a write on another one (a CRD established, its
// first object created) then finds the definition. Calls while one is in
// flight wait for it.
func (c *Catalog) Sync(ctx context.Context) error {
	c.mu.Lock()
	if ch := c.syncing; ch != nil {
		c.mu.Unlock()
		select {
		case <-ch:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	ch := make(chan struct{})
	c.syncing = ch
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.syncing = nil
		c.mu.Unlock()
		close(ch)
	}()
	objs, rev, err := c.store.ListKind(ctx, objects.CustomResourceDefinitions, "")
	if err != nil {
		return err
	}
	seen := map[string]bool{}
	for _, o := range objs {
		u, ok := o.(*corev1.Unstructured)
		if !ok {
			continue
		}
		seen[u.GetMetadata().GetName()] = true
		c.observe(u)
	}
	for name, d := range c.snap.Load().byName {
		if !seen[name] && d.Revision < rev {
			c.forget(name, rev)
		}
	}
	return nil
}

// Lookup returns the served version of the definition serving resource
// (its accepted plural) in group: its objects may be served.
func (c *Catalog) Lookup(group, version, resource string) (*Version, bool) {
	d, ok := c.snap.Load().byGR[[2]string{group, resource}]
	if !ok {
		return nil, false
	}
	v, ok := d.versions[version]
	if !ok || !v.Served {
		return nil, false
	}
	return v, true
}

// Definition returns the servable definition of group and kind (any
// version): its objects are stored and served.
func (c *Catalog) ForKind(group, kind string) (*Definition, bool) {
	for _, d := range c.snap.Load().byGR {
		if d.Group() == group && d.names.Kind == kind {
			return d, true
		}
	}
	return nil, false
}

// Get returns the definition named name (servable or not).
func (c *Catalog) Get(name string) (*Definition, bool) {
	d, ok := c.snap.Load().byName[name]
	return d, ok
}

// Servable lists the definitions whose objects are served (names
// accepted or established), by name.
func (c *Catalog) Servable() []*Definition {
	s := c.snap.Load()
	out := make([]*Definition, 0, len(s.byGR))
	for _, d := range s.byGR {
		out = append(out, d)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].CRD.Name < out[j].CRD.Name })
	return out
}

// Established lists the established definitions (those in discovery and
// OpenAPI), by name.
func (c *Catalog) Established() []*Definition {
	var out []*Definition
	for _, d := range c.Servable() {
		if d.established {
			out = append(out, d)
		}
	}
	return out
}

// Generation changes whenever the catalog does: a caller deriving tables
// from it rebuilds them when it moved.
func (c *Catalog) Generation() uint64 { return c.snap.Load().gen }

// Failed returns why the definition name is not served, if it is not for
// a reason of its own (a schema the server cannot build, a kind that
// clashes with a built-in one).
func (c *Catalog) Failed(name string) error { return c.snap.Load().failed[name] }

// WaitFor waits until the catalog holds the definition name at revision
// rev or later, or ctx ends (the informer lags the store by a watch
// event).
func (c *Catalog) WaitFor(ctx context.Context, name string, rev int64) bool {
	for {
		if d, ok := c.Get(name); ok && d.Revision >= rev {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// Decode converts a stored CustomResourceDefinition to its v1 type.
func Decode(u *corev1.Unstructured) (*apiextensionsv1.CustomResourceDefinition, error) {
	k, err := manifest.ToKube(u)
	if err != nil {
		return nil, err
	}
	crd, ok := k.(*apiextensionsv1.CustomResourceDefinition)
	if !ok {
		return nil, fmt.Errorf("crd: %s is a %T", u.GetMetadata().GetName(), k)
	}
	return crd, nil
}
