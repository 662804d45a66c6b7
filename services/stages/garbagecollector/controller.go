package garbagecollector

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
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

// watchPrefix is what the collector watches to keep its index: every
// stored object.
const watchPrefix = "/registry/"

// recordsPrefix holds podflow's own records under watchPrefix (request
// ids, pod CIDRs, hosts: services/pipeline), no API object: one request id
// a pod. No custom kind can live there (a CustomResourceDefinition's group
// has a dot).
const recordsPrefix = "/registry/podflow/"

// watchExcept is what the collector's watch leaves out: the kinds it does
// not read (Events, two a pod; NodeAllocations, one a pod) and podflow's
// own records. The replica does
// not send them; apply would drop them.
func watchExcept(t *kindTable) []string {
	out := []string{recordsPrefix}
	for _, ki := range t.all {
		if strings.HasPrefix(ki.prefix, recordsPrefix) {
			return nil // a kind stored among the records: watch them all
		}
		if !ki.scanned && len(out) < raftstore.MaxWatchExcept {
			out = append(out, ki.prefix)
		}
	}
	return out
}

// Config configures a Controller.
type Config struct {
	// Queue configures the retries of an object whose sync failed.
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
	idx   atomic.Pointer[index] // nil until the first list is read

	absentMu sync.Mutex
	absent   map[string]struct{} // owners read as gone: key#uid (a uid is never used again)
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
	return &Controller{env: env, cfg: cfg, queue: workqueue.New(cfg.Queue), absent: map[string]struct{}{}}, nil
}

// Handle is never called: the stage consumes no events.
func (c *Controller) Handle(context.Context, *bus.Delivery) error {
	return bus.Permanent(errors.New("garbagecollector: the controller consumes no events"))
}

// Start runs the index's list and watch and the worker on g. It does not
// wait for the list: nothing is synced before the index holds it.
func (c *Controller) Start(ctx context.Context, g *errgroup.Group) error {
	g.Go(func() error { return c.watch(ctx) })
	g.Go(func() error { return c.queue.Run(ctx, c.Sync) })
	return nil
}

// Reconcile queues, from the index alone (it reads nothing from the
// store), every object marked with a collector finalizer and every
// dependent whose owner the index does not hold: what a failed sync left.
// The index itself is kept by the watch, and read again from the store
// only when the watch breaks, as kube's informers relist.
func (c *Controller) Reconcile(context.Context) error {
	if x := c.idx.Load(); x != nil {
		for _, k := range x.scan(kindTab()) {
			c.queue.Add(k)
		}
	}
	return nil
}

// watch builds the index from a list of every kind the collector reads
// and keeps it from a watch of every key, queueing what each change
// calls for, until ctx ends. A watch that breaks is followed by a fresh
// list into a new index (what the watch missed is in it) and a new watch.
func (c *Controller) watch(ctx context.Context) error {
	backoff := 100 * time.Millisecond
	for {
		began := time.Now()
		err := c.watchOnce(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if c.env.Log != nil {
			c.env.Log.Warn("garbagecollector: watch ended; listing again", "err", err)
		}
		if time.Since(began) > time.Minute {
			backoff = 100 * time.Millisecond
		}
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
			return nil
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// rebuild lists every kind the collector reads into a new index, puts it
// in use, and returns the revision to watch from and the keys to sync
// (index.scan).
func (c *Controller) rebuild(ctx context.Context) (*index, int64, []string, error) {
	x := newIndex()
	rev, err := x.build(ctx, c.env.Store.KV())
	if err != nil {
		return nil, 0, nil, err
	}
	c.idx.Store(x)
	return x, rev, x.scan(kindTab()), nil
}

func (c *Controller) watchOnce(ctx context.Context) error {
	x, rev, keys, err := c.rebuild(ctx)
	if err != nil {
		return err
	}
	for _, k := range keys {
		c.queue.Add(k)
	}
	w, err := c.env.Store.KV().Watch(ctx, watchPrefix, rev, raftstore.WatchExcept(watchExcept(kindTab())...))
	if err != nil {
		return err
	}
	defer w.Stop()
	for ev := range w.Events() {
		t := kindTab()
		keys, err := x.refreshKinds(ctx, c.env.Store.KV(), t)
		if err != nil {
			return err
		}
		for _, k := range append(keys, x.apply(t, ev)...) {
			c.queue.Add(k)
		}
	}
	return w.Err()
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

// item is one stored object and its kind.
type item struct {
	kind objects.Kind
	obj  objects.Object
}

func (it item) meta() *corev1.ObjectMeta { return it.obj.GetMetadata() }

// scanned reports whether the collector reads the objects of kind k:
// every stored kind but Events, which take no part in garbage collection
// (their strategy's policy is Unsupported) and are the most numerous, and
// NodeAllocations, podflow's accounting of what is bound to a node (no
// API serves them, so none has an owner or is one; one write a bind).
func scanned(k objects.Kind) bool {
	if k.APIGroup == objects.NodeAllocations.APIGroup && k.Name == objects.NodeAllocations.Name {
		return false
	}
	return stage.DefaultGCPolicy(k) != stage.GCUnsupported
}

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

// pass is the state of one Sync: the index, and what is known of the
// owners.
type pass struct {
	c      *Controller
	x      *index
	owners map[string]ownerState // owner uid → state, for this sync
}

// ownerState is what a sync knows of one owner.
type ownerState struct {
	exists  bool // an object of its kind, name and uid is stored
	waiting bool // it is marked for deletion in the foreground: waiting for its dependents
}

// errNoIndex: a sync before the index was first listed (retried).
var errNoIndex = errors.New("garbagecollector: the index is not listed yet")

// Sync syncs the object at store key key, read afresh. An owner marked
// for deletion with one of the collector's finalizers has its dependents
// (the index's) dealt with: an orphaning owner's dependents lose their
// reference to it, then it loses its "orphan" finalizer; a foreground
// owner's dependents are deleted (those with another, live owner only
// lose the reference to it) and it loses its "foregroundDeletion"
// finalizer once no dependent blocking it (blockOwnerDeletion) is left.
// A dependent whose owners are all gone is deleted, and one with an owner
// left loses the references to the gone ones.
func (c *Controller) Sync(ctx context.Context, key string) error {
	x := c.idx.Load()
	if x == nil {
		return errNoIndex
	}
	ki, ok := kindTab().kindOfKey(key)
	if !ok || !ki.scanned {
		return nil
	}
	ns, name := ki.splitKey(key)
	obj, err := c.env.Store.GetKind(ctx, ki.kind, ns, name)
	if errors.Is(err, raftstore.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	it := item{kind: ki.kind, obj: obj}
	s := &pass{c: c, x: x, owners: map[string]ownerState{}}
	switch gcFinalizer(it.meta()) {
	case stage.FinalizerOrphan:
		err = s.orphan(ctx, it)
	case stage.FinalizerForeground:
		err = s.foreground(ctx, it)
	default:
		err = s.collect(ctx, it)
	}
	if err != nil && !errors.Is(err, raftstore.ErrNotFound) {
		return fmt.Errorf("garbagecollector: %s %s: %w", ki.kind.Qualified(), strings.TrimPrefix(key, ki.prefix), err)
	}
	return nil
}

// read reads dependent d of owner uid afresh: nil when it is gone or no
// longer names the owner (the index was behind).
func (s *pass) read(ctx context.Context, d dependent, uid string) (objects.Object, *corev1.OwnerReference, error) {
	ns, name := d.kind.splitKey(d.key)
	obj, err := s.c.env.Store.GetKind(ctx, d.kind.kind, ns, name)
	if errors.Is(err, raftstore.ErrNotFound) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	for _, ref := range obj.GetMetadata().GetOwnerReferences() {
		if ref.GetUid() == uid {
			return obj, ref, nil
		}
	}
	return nil, nil, nil
}

// orphan removes owner it's reference from each of its dependents, then
// its "orphan" finalizer (kube's orphanDependents, then
// removeFinalizer).
func (s *pass) orphan(ctx context.Context, it item) error {
	uid := it.meta().GetUid()
	for _, d := range s.x.dependents(uid) {
		obj, _, err := s.read(ctx, d, uid)
		if err != nil {
			return err
		}
		if obj == nil {
			continue
		}
		dep := item{kind: d.kind.kind, obj: obj}
		if err := s.c.dropRefs(ctx, dep, func(ref *corev1.OwnerReference) bool { return ref.GetUid() == uid }); err != nil {
			return err
		}
		s.c.logged("orphaned: its owner is deleted with propagationPolicy Orphan", dep)
	}
	return s.c.removeFinalizer(ctx, it, stage.FinalizerOrphan)
}

// foreground deletes owner it's dependents and removes its
// "foregroundDeletion" finalizer once none blocking it is left (kube's
// processDeletingDependentsItem and attemptToDeleteItem). A dependent
// with another owner that exists and is not itself waiting for its
// dependents only loses the reference to it. Dependents are deleted with
// their own policy (their finalizers; else in the background), so only
// the direct dependents hold the owner back. A dependent whose deletion
// is under way is not read again: it blocks the owner if its reference
// does, until the watch sees it go (kube's blockingDependents, from its
// graph).
func (s *pass) foreground(ctx context.Context, it item) error {
	uid := it.meta().GetUid()
	blocking := 0
	for _, d := range s.x.dependents(uid) {
		if d.deleting {
			if d.block {
				blocking++
			}
			continue
		}
		obj, mine, err := s.read(ctx, d, uid)
		if err != nil {
			return err
		}
		if obj == nil {
			continue
		}
		dep := item{kind: d.kind.kind, obj: obj}
		md := obj.GetMetadata()
		solid := false
		for _, ref := range md.GetOwnerReferences() {
			if ref.GetUid() == uid {
				continue
			}
			st, err := s.owner(ctx, md.GetNamespace(), ref)
			if err != nil {
				return err
			}
			solid = solid || (st.exists && !st.waiting)
		}
		if solid {
			if err := s.c.dropRefs(ctx, dep, func(ref *corev1.OwnerReference) bool { return ref.GetUid() == uid }); err != nil {
				return err
			}
			s.c.logged("removed the reference to an owner deleted in the foreground: another owner is live", dep)
			continue
		}
		if !d.kind.collectable { // deleted by the api stage alone: released instead of deleted
			if err := s.c.dropRefs(ctx, dep, func(ref *corev1.OwnerReference) bool { return ref.GetUid() == uid }); err != nil {
				return err
			}
			s.c.logged("removed the reference to an owner deleted in the foreground: the collector does not delete this kind", dep)
			continue
		}
		gone := false
		switch {
		case md.GetDeletionTimestamp() != nil: // its deletion is under way
		case d.hasDeps && d.kind.kind.Name != objects.Pods.Name:
			// It has dependents of its own: deleted in the foreground
			// too, so the owner waits for them as well.
			if mine, err = s.foregroundDependent(ctx, dep, uid, d.cycle); err != nil {
				return err
			}
			s.c.logged("deleting in the foreground: its owner is deleted in the foreground", dep)
		default:
			if gone, err = s.c.deleteDependent(ctx, dep); err != nil {
				return err
			}
			s.c.logged("deleting: its owner is deleted in the foreground", dep)
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
// its own dependents too (cycle: a cycle, perhaps), its references to
// owners waiting for their dependents are made non-blocking
// (blockOwnerDeletion false), so that neither waits for the other; then
// it is marked with foregroundDeletion (stage.DeleteObjectWith), with a
// compare-and-swap on the revision read. It returns d's reference to
// owner as it is left.
func (s *pass) foregroundDependent(ctx context.Context, d item, owner string, cycle bool) (*corev1.OwnerReference, error) {
	obj := proto.Clone(d.obj).(objects.Object)
	md := obj.GetMetadata()
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

// maxAbsent bounds the uids of owners known to be gone that are kept
// (kube's absentOwnerCache); past it the set starts again.
const maxAbsent = 10000

// ownerState reads the owner ref names: an object of its kind, in
// namespace ns if that kind is namespaced, with its uid. An owner of a
// kind the store does not know is taken to exist (kube's collector cannot
// resolve it either and deletes nothing). An owner read as gone is
// remembered by its key and uid (a uid is never used again): the
// dependents of one deleted owner read it once.
func (c *Controller) ownerState(ctx context.Context, ns string, ref *corev1.OwnerReference) (ownerState, error) {
	ki, ok := kindTab().kindOfRef(ref.GetApiVersion(), ref.GetKind())
	if !ok {
		return ownerState{exists: true}, nil
	}
	k := ki.kind
	if !k.Namespaced {
		ns = ""
	}
	at := k.Key(ns, ref.GetName()) + "#" + ref.GetUid()
	c.absentMu.Lock()
	_, gone := c.absent[at]
	c.absentMu.Unlock()
	if gone {
		return ownerState{}, nil
	}
	o, err := c.env.Store.GetKind(ctx, k, ns, ref.GetName())
	if err != nil && !errors.Is(err, raftstore.ErrNotFound) {
		return ownerState{}, err
	}
	if err != nil || o.GetMetadata().GetUid() != ref.GetUid() {
		c.absentMu.Lock()
		if len(c.absent) >= maxAbsent {
			clear(c.absent)
		}
		c.absent[at] = struct{}{}
		c.absentMu.Unlock()
		return ownerState{}, nil
	}
	return ownerState{exists: true, waiting: gcFinalizer(o.GetMetadata()) == stage.FinalizerForeground}, nil
}
