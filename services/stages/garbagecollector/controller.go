package garbagecollector

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"golang.org/x/sync/errgroup"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/stage"
	"github.com/podflow/podflow/services/workqueue"
)

// watchPrefix is where the collector watches for deletes: every stored
// object.
const watchPrefix = "/registry/"

// Config configures a Controller.
type Config struct {
	// Queue configures the retries of a namespace whose sync failed.
	Queue workqueue.Config
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config { return Config{Queue: workqueue.DefaultConfig()} }

// Validate checks the Config.
func (c Config) Validate() error { return c.Queue.Validate() }

// Controller deletes the dependents of deleted owners.
type Controller struct {
	env   stage.Env
	cfg   Config
	queue *workqueue.Queue
}

var (
	_ stage.Handler    = (*Controller)(nil)
	_ stage.Starter    = (*Controller)(nil)
	_ stage.Reconciler = (*Controller)(nil)
)

// New returns a Controller over env's store.
func New(env stage.Env, cfg Config) (*Controller, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Queue.Log == nil {
		cfg.Queue.Log = env.Log
	}
	return &Controller{env: env, cfg: cfg, queue: workqueue.New(cfg.Queue)}, nil
}

// Handle is never called: the stage consumes no events.
func (c *Controller) Handle(context.Context, *bus.Delivery) error {
	return bus.Permanent(errors.New("garbagecollector: the controller consumes no events"))
}

// Start runs the watch of deletes and the worker on g.
func (c *Controller) Start(ctx context.Context, g *errgroup.Group) error {
	g.Go(func() error { return c.watch(ctx) })
	g.Go(func() error { return c.queue.Run(ctx, c.Sync) })
	return nil
}

// The queue keys besides a namespace's name (no namespace has either
// name): the cluster-scoped objects, and the namespaced objects of every
// namespace in one sync (a resync: one list of each kind, however many
// namespaces there are).
const (
	clusterScope  = "/"
	allNamespaces = "*"
)

// Reconcile queues the objects of every namespace and the cluster-scoped
// ones.
func (c *Controller) Reconcile(context.Context) error {
	c.queue.Add(allNamespaces)
	c.queue.Add(clusterScope)
	return nil
}

// watch queues the namespace of every deleted object (every namespace
// for a cluster-scoped one) and of every object marked for deletion with
// one of the collector's finalizers, until ctx ends. A watch that breaks is
// started again after a Reconcile (what it missed is resynced).
func (c *Controller) watch(ctx context.Context) error {
	backoff := 100 * time.Millisecond
	for {
		err := c.watchOnce(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if c.env.Log != nil {
			c.env.Log.Warn("garbagecollector: watch ended; resyncing", "err", err)
		}
		_ = c.Reconcile(ctx)
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
			return nil
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

func (c *Controller) watchOnce(ctx context.Context) error {
	_, rev, err := c.env.Store.KV().List(ctx, objects.Namespaces.Prefix(""), raftstore.WithLimit(1))
	if err != nil {
		return err
	}
	w, err := c.env.Store.KV().Watch(ctx, watchPrefix, rev)
	if err != nil {
		return err
	}
	defer w.Stop()
	for ev := range w.Events() {
		if ev.KV == nil {
			continue
		}
		if ev.Type != raftstore.EventDelete && !markedForGC(ev.KV) {
			continue
		}
		switch ns, namespaced := namespaceOf(ev.KV.Key); {
		case ns != "":
			c.queue.Add(ns)
		case !namespaced && ev.Type == raftstore.EventDelete:
			if err := c.Reconcile(ctx); err != nil {
				return err
			}
		case !namespaced:
			c.queue.Add(clusterScope)
		}
	}
	return w.Err()
}

// markedForGC reports whether kv is an object marked for deletion with
// one of the collector's finalizers. Most writes are not: the bytes are
// searched for the finalizers' names before anything is decoded.
func markedForGC(kv *raftstore.KV) bool {
	if !bytes.Contains(kv.Value, []byte(stage.FinalizerOrphan)) && !bytes.Contains(kv.Value, []byte(stage.FinalizerForeground)) {
		return false
	}
	obj, ok := decoderOf(kv.Key)
	if !ok || objects.Decode(kv, obj) != nil {
		return false
	}
	return gcFinalizer(obj.GetMetadata()) != ""
}

// decoderOf is an empty object of the kind stored at key.
func decoderOf(key string) (objects.Object, bool) {
	k, ok := kindOfKey(key)
	if !ok {
		return nil, false
	}
	return k.New(), true
}

// kindOfKey is the kind whose prefix is the longest one key has.
func kindOfKey(key string) (objects.Kind, bool) {
	var best objects.Kind
	for _, k := range objects.Kinds() {
		if p := k.Prefix(""); strings.HasPrefix(key, p) && len(p) > len(best.Prefix("")) {
			best = k
		}
	}
	return best, best.Name != ""
}

// gcFinalizer is the collector's finalizer an object marked for deletion
// waits for ("orphan" first, as kube's collector checks it first), or "".
func gcFinalizer(md *corev1.ObjectMeta) string {
	if md.GetDeletionTimestamp() == nil {
		return ""
	}
	switch fins := md.GetFinalizers(); {
	case slices.Contains(fins, stage.FinalizerOrphan):
		return stage.FinalizerOrphan
	case slices.Contains(fins, stage.FinalizerForeground):
		return stage.FinalizerForeground
	}
	return ""
}

// namespaceOf is the namespace of a namespaced object's store key, and
// whether the key is a namespaced kind's; ("", false) for a
// cluster-scoped object or another key.
func namespaceOf(key string) (string, bool) {
	best, ok := kindOfKey(key)
	if !ok || !best.Namespaced {
		return "", false
	}
	ns, _, ok := strings.Cut(strings.TrimPrefix(key, best.Prefix("")), "/")
	if !ok {
		return "", true
	}
	return ns, true
}

// item is one stored object and its kind.
type item struct {
	kind objects.Kind
	obj  objects.Object
}

func (it item) meta() *corev1.ObjectMeta { return it.obj.GetMetadata() }

// scanned reports whether the collector reads the objects of kind k:
// every stored kind but Events, which take no part in garbage collection
// (their strategy's policy is Unsupported) and are the most numerous.
func scanned(k objects.Kind) bool { return stage.DefaultGCPolicy(k) != stage.GCUnsupported }

// collectable reports whether the collector deletes dependents of kind k:
// every kind but those whose deletion is more than a store delete, which
// the api stage alone does — a Service (its ClusterIP and node ports are
// released with it), a Namespace (its lifecycle empties it first), a
// CustomResourceDefinition (its objects go first). Such a dependent of a
// foreground owner loses its reference to it instead, so as not to hold
// it back.
func collectable(k objects.Kind) bool {
	for _, not := range []objects.Kind{objects.Services, objects.Namespaces, objects.CustomResourceDefinitions} {
		if k.APIGroup == not.APIGroup && k.Name == not.Name {
			return false
		}
	}
	return true
}

// list reads every object of the namespaced kinds in ns ("": every
// namespace), or of the cluster-scoped kinds when namespaced is false.
func (c *Controller) list(ctx context.Context, ns string, namespaced bool) ([]item, error) {
	var out []item
	for _, k := range objects.Kinds() {
		if k.Namespaced != namespaced || !scanned(k) {
			continue
		}
		objs, _, err := c.env.Store.ListKind(ctx, k, ns)
		if err != nil {
			return nil, fmt.Errorf("list %s: %w", k.Qualified(), err)
		}
		for _, o := range objs {
			out = append(out, item{kind: k, obj: o})
		}
	}
	return out, nil
}

// pass is the state of one Sync: the objects read, by owner, and what is
// known of the owners.
type pass struct {
	c       *Controller
	ns      string // "" for the cluster scope
	items   []item
	byOwner map[string][]item     // owner uid → its dependents read
	owners  map[string]ownerState // owner uid → state, for this sync
	all     bool                  // byOwner indexes every namespace (a cluster-scoped owner's dependents)
}

// ownerState is what a sync knows of one owner.
type ownerState struct {
	exists  bool // an object of its kind, name and uid is stored
	waiting bool // it is marked for deletion in the foreground: waiting for its dependents
}

func (s *pass) index(items []item) {
	s.byOwner = map[string][]item{}
	for _, it := range items {
		for _, ref := range it.meta().GetOwnerReferences() {
			s.byOwner[ref.GetUid()] = append(s.byOwner[ref.GetUid()], it)
		}
	}
}

// Sync collects the garbage of namespace key (clusterScope: of the
// cluster-scoped objects; allNamespaces: of every namespace). First the owners marked for deletion with the
// collector's finalizers: an orphaning owner's dependents lose their
// reference to it, then it loses its "orphan" finalizer; a foreground
// owner's dependents are deleted (those with another, live owner only
// lose the reference to it) and it loses its "foregroundDeletion"
// finalizer once no dependent blocking it (blockOwnerDeletion) is left.
// Then every dependent whose owners are all gone is deleted, and a
// dependent with an owner left loses the references to the gone ones.
func (c *Controller) Sync(ctx context.Context, key string) error {
	s := &pass{c: c, ns: key, owners: map[string]ownerState{}}
	namespaced := key != clusterScope
	if key == clusterScope || key == allNamespaces {
		s.ns = ""
	}
	var err error
	if s.items, err = c.list(ctx, s.ns, namespaced); err != nil {
		return err
	}
	s.index(s.items)
	var errs []error
	note := func(it item, err error) {
		if err != nil && !errors.Is(err, raftstore.ErrNotFound) {
			md := it.meta()
			errs = append(errs, fmt.Errorf("garbagecollector: %s %s/%s: %w", it.kind.Qualified(), md.GetNamespace(), md.GetName(), err))
		}
	}
	finalizing := false
	for _, it := range s.items {
		switch gcFinalizer(it.meta()) {
		case stage.FinalizerOrphan:
			finalizing = true
			note(it, s.orphan(ctx, it))
		case stage.FinalizerForeground:
			finalizing = true
			note(it, s.foreground(ctx, it))
		}
	}
	if finalizing { // what was read before is stale: read again
		if s.items, err = c.list(ctx, s.ns, namespaced); err != nil {
			return errors.Join(append(errs, err)...)
		}
		s.index(s.items)
		s.all, s.owners = false, map[string]ownerState{}
	}
	for _, it := range s.items {
		note(it, s.collect(ctx, it))
	}
	return errors.Join(errs...)
}

// dependents are the objects read that name owner it.
func (s *pass) dependents(ctx context.Context, it item) ([]item, error) {
	if !it.kind.Namespaced && !s.all { // a cluster-scoped owner: dependents in every namespace
		items, err := s.c.list(ctx, "", true)
		if err != nil {
			return nil, err
		}
		s.index(append(items, s.items...))
		s.all = true
	}
	return s.byOwner[it.meta().GetUid()], nil
}

// orphan removes owner it's reference from each of its dependents, then
// its "orphan" finalizer (kube's orphanDependents, then
// removeFinalizer).
func (s *pass) orphan(ctx context.Context, it item) error {
	deps, err := s.dependents(ctx, it)
	if err != nil {
		return err
	}
	uid := it.meta().GetUid()
	for _, d := range deps {
		if err := s.c.dropRefs(ctx, d, func(ref *corev1.OwnerReference) bool { return ref.GetUid() == uid }); err != nil {
			return err
		}
		s.c.logged("orphaned: its owner is deleted with propagationPolicy Orphan", d)
	}
	return s.c.removeFinalizer(ctx, it, stage.FinalizerOrphan)
}

// foreground deletes owner it's dependents and removes its
// "foregroundDeletion" finalizer once none blocking it is left (kube's
// processDeletingDependentsItem and attemptToDeleteItem). A dependent
// with another owner that exists and is not itself waiting for its
// dependents only loses the reference to it. Dependents are deleted with
// their own policy (their finalizers; else in the background), so only
// the direct dependents hold the owner back.
func (s *pass) foreground(ctx context.Context, it item) error {
	deps, err := s.dependents(ctx, it)
	if err != nil {
		return err
	}
	uid := it.meta().GetUid()
	blocking := 0
	for _, d := range deps {
		md := d.meta()
		var mine *corev1.OwnerReference
		solid := false
		for _, ref := range md.GetOwnerReferences() {
			if ref.GetUid() == uid {
				mine = ref
				continue
			}
			st, err := s.owner(ctx, md.GetNamespace(), ref)
			if err != nil {
				return err
			}
			solid = solid || (st.exists && !st.waiting)
		}
		if solid {
			if err := s.c.dropRefs(ctx, d, func(ref *corev1.OwnerReference) bool { return ref.GetUid() == uid }); err != nil {
				return err
			}
			s.c.logged("removed the reference to an owner deleted in the foreground: another owner is live", d)
			continue
		}
		if !collectable(d.kind) { // deleted by the api stage alone: released instead of deleted
			if err := s.c.dropRefs(ctx, d, func(ref *corev1.OwnerReference) bool { return ref.GetUid() == uid }); err != nil {
				return err
			}
			s.c.logged("removed the reference to an owner deleted in the foreground: the collector does not delete this kind", d)
			continue
		}
		gone := false
		switch {
		case md.GetDeletionTimestamp() != nil: // its deletion is under way
		case len(s.byOwner[md.GetUid()]) > 0 && d.kind.Name != objects.Pods.Name:
			// It has dependents of its own: deleted in the foreground
			// too, so the owner waits for them as well.
			if mine, err = s.foregroundDependent(ctx, d, uid); err != nil {
				return err
			}
			s.c.logged("deleting in the foreground: its owner is deleted in the foreground", d)
		default:
			if gone, err = s.c.deleteDependent(ctx, d); err != nil {
				return err
			}
			s.c.logged("deleting: its owner is deleted in the foreground", d)
		}
		if !gone && mine.GetBlockOwnerDeletion() {
			blocking++
		}
	}
	if blocking > 0 {
		return nil // a dependent's deletion (watched) syncs again
	}
	return s.c.removeFinalizer(ctx, it, stage.FinalizerForeground)
}

// foregroundDependent deletes dependent d of a foreground owner (uid
// owner) in the foreground, as kube's attemptToDeleteItem does for a
// dependent with dependents: first, when one of its dependents waits for
// its own dependents too (a cycle, perhaps), its references to owners
// waiting for their dependents are made non-blocking
// (blockOwnerDeletion false), so that neither waits for the other; then
// it is marked with foregroundDeletion (stage.DeleteObjectWith), with a
// compare-and-swap on the revision read. It returns d's reference to
// owner as it is left.
func (s *pass) foregroundDependent(ctx context.Context, d item, owner string) (*corev1.OwnerReference, error) {
	obj := proto.Clone(d.obj).(objects.Object)
	md := obj.GetMetadata()
	cycle := slices.ContainsFunc(s.byOwner[md.GetUid()], func(dd item) bool { return gcFinalizer(dd.meta()) == stage.FinalizerForeground })
	if cycle {
		for _, ref := range md.GetOwnerReferences() {
			st, err := s.owner(ctx, md.GetNamespace(), ref)
			if err != nil {
				return nil, err
			}
			if ref.GetUid() == owner || st.waiting {
				ref.BlockOwnerDeletion = false
			}
		}
	}
	policy := stage.PropagationForeground
	if _, _, err := stage.DeleteObjectWith(ctx, s.c.env.Store, d.kind, obj, &stage.DeleteOptions{PropagationPolicy: &policy}); err != nil &&
		!errors.Is(err, raftstore.ErrNotFound) {
		return nil, err
	}
	for _, ref := range md.GetOwnerReferences() {
		if ref.GetUid() == owner {
			return ref, nil
		}
	}
	return nil, nil
}

// owner is what is known of the owner ref names, for a dependent in ns.
func (s *pass) owner(ctx context.Context, ns string, ref *corev1.OwnerReference) (ownerState, error) {
	if st, ok := s.owners[ref.GetUid()]; ok {
		return st, nil
	}
	st, err := s.c.ownerState(ctx, ns, ref)
	if err != nil {
		return ownerState{}, err
	}
	s.owners[ref.GetUid()] = st
	return st, nil
}

// collect judges one dependent: one whose owners are all gone is deleted;
// one with an owner left loses the references to the gone ones.
func (s *pass) collect(ctx context.Context, it item) error {
	md := it.meta()
	refs := md.GetOwnerReferences()
	if len(refs) == 0 || md.GetDeletionTimestamp() != nil || !collectable(it.kind) {
		return nil // not a dependent, its deletion is under way, or the collector does not delete it
	}
	gone := map[string]bool{}
	for _, ref := range refs {
		st, err := s.owner(ctx, md.GetNamespace(), ref)
		if err != nil {
			return err
		}
		if !st.exists {
			gone[ref.GetUid()] = true
		}
	}
	switch {
	case len(gone) == 0:
		return nil
	case len(gone) < len(refs):
		err := s.c.dropRefs(ctx, it, func(ref *corev1.OwnerReference) bool { return gone[ref.GetUid()] })
		if err == nil {
			s.c.logged("removed the references to deleted owners", it)
		}
		return err
	default:
		_, err := s.c.deleteDependent(ctx, it)
		if err == nil {
			s.c.logged("deleting: its owners are gone", it)
		}
		return err
	}
}

// deleteDependent deletes a dependent as read, with a compare-and-swap on
// the revision read (raftstore.ErrConflict when it changed: the sync is
// retried and judges it again): a pod gracefully (marked terminating,
// then stage.RequestDeletion, as the ReplicaSet controller deletes its
// pods), any other object as the api stage deletes it
// (stage.DeleteObject: one with finalizers — its own "orphan" or
// "foregroundDeletion" among them — is only marked). It reports whether
// the object is gone.
func (c *Controller) deleteDependent(ctx context.Context, it item) (bool, error) {
	pod, ok := it.obj.(*corev1.Pod)
	if !ok {
		_, gone, err := stage.DeleteObject(ctx, c.env.Store, it.kind, proto.Clone(it.obj).(objects.Object))
		if errors.Is(err, raftstore.ErrNotFound) {
			return true, nil
		}
		return gone, err
	}
	pod = proto.Clone(pod).(*corev1.Pod)
	if !stage.MarkTerminating(pod, nil, timestamppb.Now()) {
		return false, nil
	}
	rev, err := c.env.Store.Update(ctx, pod)
	if errors.Is(err, raftstore.ErrNotFound) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	objects.SetRevision(pod, rev)
	if err := stage.RequestDeletion(ctx, c.env, pod); err != nil {
		return false, err
	}
	return pod.GetSpec().GetNodeName() == "", nil
}

// maxRetries bounds the compare-and-swap retries of one write.
const maxRetries = 16

// dropRefs removes the ownerReferences drop matches from it, with a
// compare-and-swap, reading it again after a conflict.
func (c *Controller) dropRefs(ctx context.Context, it item, drop func(*corev1.OwnerReference) bool) error {
	return c.mutate(ctx, it, func(md *corev1.ObjectMeta) bool {
		n := len(md.OwnerReferences)
		md.OwnerReferences = slices.DeleteFunc(md.OwnerReferences, drop)
		return len(md.OwnerReferences) != n
	})
}

// removeFinalizer removes finalizer f from it; an object marked for
// deletion left with no finalizer is deleted, as kube-apiserver's store
// does on such an update.
func (c *Controller) removeFinalizer(ctx context.Context, it item, f string) error {
	err := c.mutate(ctx, it, func(md *corev1.ObjectMeta) bool {
		n := len(md.Finalizers)
		md.Finalizers = slices.DeleteFunc(md.Finalizers, func(x string) bool { return x == f })
		return len(md.Finalizers) != n
	})
	if err == nil {
		c.logged("removed the "+f+" finalizer", it)
	}
	return err
}

// mutate applies change to a copy of it's metadata and writes it with a
// compare-and-swap on the revision read; after a conflict it reads the
// object again and applies change again (change reports whether it
// changed anything: nothing to write otherwise). An object being deleted
// whose last finalizer the change removes is deleted instead.
func (c *Controller) mutate(ctx context.Context, it item, change func(*corev1.ObjectMeta) bool) error {
	obj := proto.Clone(it.obj).(objects.Object)
	for attempt := 0; ; attempt++ {
		prev := proto.Clone(obj).(objects.Object)
		if !change(obj.GetMetadata()) {
			return nil
		}
		var err error
		md := obj.GetMetadata()
		if stage.DeletedByUpdate(prev, obj) {
			_, err = c.env.Store.Delete(ctx, it.kind, md.GetNamespace(), md.GetName(), objects.Revision(prev))
		} else {
			_, err = c.env.Store.Update(ctx, obj)
		}
		if !errors.Is(err, raftstore.ErrConflict) || attempt >= maxRetries {
			return err
		}
		if obj, err = c.env.Store.GetKind(ctx, it.kind, md.GetNamespace(), md.GetName()); err != nil {
			return err
		}
	}
}

func (c *Controller) logged(msg string, it item) {
	if c.env.Log != nil {
		md := it.meta()
		c.env.Log.Info("garbagecollector: "+msg, "kind", it.kind.Qualified(), "namespace", md.GetNamespace(), "name", md.GetName())
	}
}

// ownerState reads the owner ref names: an object of its kind, in
// namespace ns if that kind is namespaced, with its uid. An owner of a
// kind the store does not know is taken to exist (kube's collector cannot
// resolve it either and deletes nothing).
func (c *Controller) ownerState(ctx context.Context, ns string, ref *corev1.OwnerReference) (ownerState, error) {
	k, ok := kindOf(ref)
	if !ok {
		return ownerState{exists: true}, nil
	}
	if !k.Namespaced {
		ns = ""
	}
	o, err := c.env.Store.GetKind(ctx, k, ns, ref.GetName())
	if errors.Is(err, raftstore.ErrNotFound) {
		return ownerState{}, nil
	}
	if err != nil {
		return ownerState{}, err
	}
	md := o.GetMetadata()
	if md.GetUid() != ref.GetUid() {
		return ownerState{}, nil
	}
	return ownerState{exists: true, waiting: gcFinalizer(md) == stage.FinalizerForeground}, nil
}

// kindOf is the kind an ownerReference names, by the group of its
// apiVersion and its kind.
func kindOf(ref *corev1.OwnerReference) (objects.Kind, bool) {
	group, _, ok := strings.Cut(ref.GetApiVersion(), "/")
	if !ok {
		group = ""
	}
	for _, k := range objects.Kinds() {
		if k.APIGroup == group && k.Name == ref.GetKind() {
			return k, true
		}
	}
	return objects.Kind{}, false
}
