package scheduler

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/podflow/podflow/services/stages/scheduler/cache"
	"github.com/podflow/podflow/services/stages/scheduler/framework"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/eventsv1"
	"github.com/podflow/podflow/proto/podrules"
	"github.com/podflow/podflow/proto/vt"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/objects"
)

// errNoLongerFits: the node's stored allocation leaves no room for the pod
// although this replica's cache thought it did (the cache is behind).
var errNoLongerFits = errors.New("scheduler: the node's allocation no longer fits the pod")

// bindOutcome is what a bind attempt learned.
type bindOutcome int

const (
	bound        bindOutcome = iota // committed
	podStale                        // the pod changed: re-read it
	nodeStale                       // the node's allocation changed: refresh it
	nodeNotFound                    // the node object is gone from the informer
	domainStale                     // a domain record or the guard registry changed: refresh it
)

// bindLocks serialize this replica's binds to one node: two of our own
// binds to a node would otherwise race for its NodeAllocation revision and
// one would always lose. Binds to different nodes run in parallel. A
// node's lock lives while someone holds or waits for it.
type bindLocks struct {
	mu    sync.Mutex
	nodes map[string]*nodeLock
}

type nodeLock struct {
	sync.Mutex
	refs int // holders and waiters, under bindLocks.mu
}

// lock locks node's bind lock and returns its unlock.
func (l *bindLocks) lock(node string) func() {
	l.mu.Lock()
	if l.nodes == nil {
		l.nodes = map[string]*nodeLock{}
	}
	nl := l.nodes[node]
	if nl == nil {
		nl = &nodeLock{}
		l.nodes[node] = nl
	}
	nl.refs++
	l.mu.Unlock()
	nl.Lock()
	return func() {
		nl.Unlock()
		l.mu.Lock()
		if nl.refs--; nl.refs == 0 {
			delete(l.nodes, node)
		}
		l.mu.Unlock()
	}
}

// allocations is this replica's freshest knowledge of NodeAllocations:
// the informer's copy, overlaid with what this replica wrote or read
// since (the informer catches up a little later). The overlay keeps every
// revision it learned of a node, oldest first, until the informer reaches
// it: the newest answers get, and each one answers at for its own watch
// echo. At saturation a replica binds to a node again before the echo of
// its last bind arrives; keeping the newest alone, the older echoes were
// decoded again (an allocation accounts for up to all the node's pods).
type allocations struct {
	mu      sync.Mutex
	overlay map[string][]*corev1.NodeAllocation // node -> allocations newer than the informer's, by revision
	pending map[string]pendingWrite             // node -> this replica's bind in flight
}

// pendingWrite is an allocation a bind is committing: the bytes it puts
// and a copy of the object, its own metadata, for the informer to take
// when the watch echo comes before the commit's answer (both travel from
// the store leader once it has applied the write, on two subscriptions,
// and the echo often wins: learn comes too late for it).
type pendingWrite struct {
	value []byte
	alloc *corev1.NodeAllocation
}

// maxLearned bounds the revisions kept per node, dropping the oldest: an
// informer that stopped (its watch broken for long) must not let a
// replica's binds pile up. A dropped revision's echo is only decoded.
const maxLearned = 64

// newest is the last learned allocation of node, or nil. Under a.mu.
func (a *allocations) newest(node string) *corev1.NodeAllocation {
	if l := a.overlay[node]; len(l) > 0 {
		return l[len(l)-1]
	}
	return nil
}

// get returns the freshest known allocation of node and its revision (nil
// and 0 when it has none: the compare then requires the key not to exist).
func (a *allocations) get(informed *corev1.NodeAllocation, node string) (*corev1.NodeAllocation, int64) {
	a.mu.Lock()
	o := a.newest(node)
	a.mu.Unlock()
	switch {
	case o != nil && (informed == nil || objects.Revision(o) > objects.Revision(informed)):
		return o, objects.Revision(o)
	case informed != nil:
		return informed, objects.Revision(informed)
	}
	return nil, 0
}

// learn records an allocation read or written at its revision, if it is
// newer than what the overlay has.
func (a *allocations) learn(alloc *corev1.NodeAllocation) {
	node := alloc.GetMetadata().GetName()
	a.mu.Lock()
	defer a.mu.Unlock()
	if o := a.newest(node); o != nil && objects.Revision(o) >= objects.Revision(alloc) {
		return
	}
	l := a.overlay[node]
	if len(l) == maxLearned {
		l = slices.Delete(l, 0, 1)
	}
	a.overlay[node] = append(l, alloc)
}

// at returns the allocation of node learned at exactly revision rev, if
// the overlay holds it: the informer's echo of it needs no decoding.
func (a *allocations) at(node string, rev int64) (*corev1.NodeAllocation, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.atLocked(node, rev)
}

func (a *allocations) atLocked(node string, rev int64) (*corev1.NodeAllocation, bool) {
	for _, o := range a.overlay[node] {
		if objects.Revision(o) == rev {
			return o, true
		}
	}
	return nil, false
}

// writing records that a bind is about to commit alloc as value; done
// forgets it once the commit has answered (alloc is then learned, or was
// not written). A node's binds hold its bind lock, so one at a time.
func (a *allocations) writing(alloc *corev1.NodeAllocation, value []byte) (done func()) {
	if value == nil {
		return func() {}
	}
	node := alloc.GetMetadata().GetName()
	// A copy that shares the pods (no one modifies them) and has its own
	// metadata: Commit sets alloc's resourceVersion while the informer
	// may be taking the copy.
	p := pendingWrite{value: value, alloc: &corev1.NodeAllocation{Metadata: vt.Clone(alloc.GetMetadata()), Pods: alloc.GetPods()}}
	a.mu.Lock()
	a.pending[node] = p
	a.mu.Unlock()
	return func() {
		a.mu.Lock()
		if q, ok := a.pending[node]; ok && q.alloc == p.alloc {
			delete(a.pending, node)
		}
		a.mu.Unlock()
	}
}

// echo returns the allocation of node stored as value at rev when this
// replica knows it already: learned at exactly rev, or the very bytes of
// the bind in flight (then taken, at rev). Anything else is decoded.
func (a *allocations) echo(node string, rev int64, value []byte) (*corev1.NodeAllocation, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if o, ok := a.atLocked(node, rev); ok {
		return o, true
	}
	p, ok := a.pending[node]
	if !ok || !bytes.Equal(p.value, value) {
		return nil, false
	}
	delete(a.pending, node)
	p.alloc.Metadata.ResourceVersion = strconv.FormatInt(rev, 10)
	return p.alloc, true
}

// forgetDeleted records that node's allocation does not exist (as of a
// fresh read), so the next bind compares for its absence.
func (a *allocations) forgetDeleted(node string) {
	a.mu.Lock()
	delete(a.overlay, node)
	a.mu.Unlock()
}

// informed drops the revisions of the allocation that the informer has
// caught up with.
func (a *allocations) informed(alloc *corev1.NodeAllocation) {
	node := alloc.GetMetadata().GetName()
	rev := objects.Revision(alloc)
	a.mu.Lock()
	defer a.mu.Unlock()
	l := a.overlay[node]
	i := 0
	for i < len(l) && objects.Revision(l[i]) <= rev {
		i++
	}
	switch {
	case i == len(l):
		delete(a.overlay, node)
	case i > 0:
		a.overlay[node] = slices.Delete(l, 0, i)
	}
}

// revWaiter lets a goroutine wait until an informer has reached a store
// revision. advance is called from the informer's handlers.
type revWaiter struct {
	mu  sync.Mutex
	rev int64
	ch  chan struct{} // closed at the next advance; nil while nobody waits
}

// current is the revision the informer reached.
func (w *revWaiter) current() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.rev
}

func (w *revWaiter) advance(rev int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if rev <= w.rev {
		return
	}
	w.rev = rev
	if w.ch != nil {
		close(w.ch)
		w.ch = nil
	}
}

// wait returns true once the informer reached rev, false after timeout;
// ctx's error when it is done first.
func (w *revWaiter) wait(ctx context.Context, rev int64, timeout time.Duration) (bool, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		w.mu.Lock()
		if w.rev >= rev {
			w.mu.Unlock()
			return true, nil
		}
		if w.ch == nil {
			w.ch = make(chan struct{})
		}
		ch := w.ch
		w.mu.Unlock()
		select {
		case <-ch:
		case <-t.C:
			return false, nil
		case <-ctx.Done():
			return false, ctx.Err()
		}
	}
}

// bindRequest is one bind transaction's input.
type bindRequest struct {
	pod     *corev1.Pod // the unbound revision the decision was made on
	node    string
	seen    []*framework.PodMeta // the node's pods the decision saw (nil: none)
	view    nodeView             // the cache's counts of that view
	causeID string               // id of the PodScheduled event, kept on the Scheduled Event
	// decidedAt is the pod informer's revision before the decision: the
	// decision's cache held every pod bound up to it.
	decidedAt int64
	// firstOfGroup: the decision relied on InterPodAffinity's first-pod
	// exemption (Result.FirstOfGroup); the bind compares its anchors.
	firstOfGroup bool
	// stale is set by bind to the record to refresh (a domain record, an
	// affinity anchor or the guard registry) after a domainStale outcome.
	stale *string
	// written is set by bind to the pod as its commit wrote it (its
	// revision the commit's) after a bound outcome.
	written **corev1.Pod
}

// bind sets the pod's spec.nodeName and PodScheduled=True, accounts the
// pod in the node's NodeAllocation, and records the Scheduled Event, in
// one store transaction that holds only if the pod is still the unbound
// revision the decision saw and the allocation is still the revision the
// fit was checked against. It returns the revision of the commit, or the
// outcome that says which state to refresh: a lost race is not an error.
func (s *Stage) bind(ctx context.Context, req bindRequest) (int64, bindOutcome, error) {
	node, ok := s.nodes.Get("", req.node)
	if !ok {
		return 0, nodeNotFound, nil
	}
	unlock := s.bindLocks.lock(req.node)
	defer unlock()
	reg, err := s.guardRegistry()
	if err != nil {
		return 0, 0, err
	}
	return s.bindKnowing(ctx, req, node, reg)
}

// bindKnowing is bind, under node's bind lock, knowing the guard registry
// reg (tests pass one read before another replica listed a rule).
func (s *Stage) bindKnowing(ctx context.Context, req bindRequest, node *corev1.Node, reg *guardRegistry) (int64, bindOutcome, error) {
	labels := node.GetMetadata().GetLabels()
	keys := guardedKeys(req.pod, req.firstOfGroup, labels, reg)
	// The pod's rules are listed before it binds, and its decision saw
	// every pod bound before they were (those did not guard); a guarded
	// bind's writer is listed before it writes its domain records. A
	// decision on the first-pod exemption lists its affinity terms over
	// the cluster domain (firstPodRules).
	rules := zoneRules(req.pod)
	if req.firstOfGroup {
		first := firstPodRules(req.pod)
		if len(rules) > 0 {
			first = maps.Clone(first)
			maps.Copy(first, rules)
		}
		rules = first
	}
	need := rules
	if len(keys) > 0 {
		need = maps.Clone(rules)
		if need == nil {
			need = map[string]string{}
		}
		need[writerAnnotationPrefix+s.writer] = ""
	}
	if missing := reg.missing(need); len(missing) > 0 {
		return s.register(ctx, req.pod, reg, missing, req.stale)
	}
	if len(rules) > 0 && reg.rev > req.decidedAt {
		*req.stale = GuardRegistryName
		return 0, domainStale, nil
	}
	informed, _ := s.allocs.Get("", req.node)
	alloc, allocRev := s.known.get(informed, req.node)
	self := framework.PodKey(req.pod)
	last := s.lastBinds.get(req.node)
	sums := last.sumsOf(alloc, node)
	if sums == nil {
		sums, _ = cache.AllocationSums(node, alloc) // nil on an error, which CheckAllocationFit reports
	}

	admits, all, err := allocationAdmits(node, alloc, allocRev, req, sums, last.covers(alloc, req.view), s.cache.Terminated)
	pruned := false
	if err == nil && !admits {
		// A pod that finished counts on no node. The status stage
		// releases it with the write that makes it terminal; one made
		// terminal by another writer (a client's pods/status) is
		// released here, in this bind's transaction, which compares the
		// record. Looked for only when the record refuses the pod: the
		// common bind takes no lock for it.
		if done := s.cache.TerminatedIn(alloc.GetPods()); len(done) > 0 {
			alloc, pruned = cache.ReleaseAllocation(alloc, done...)
			sums = nil
			admits, all, err = allocationAdmits(node, alloc, allocRev, req, nil, false, s.cache.Terminated)
		}
	}
	if err != nil {
		return 0, 0, err
	}
	if !admits {
		// Our cache let the pod in, the allocation does not, or it
		// accounts for pods the decision did not see (the allocation
		// informer is ahead of the pod informer): someone bound pods our
		// cache has not seen yet, and the pod-aware filters need them.
		return 0, nodeStale, nil
	}
	next, merged, err := cache.MergeAllocation(alloc, req.node, req.pod)
	if err != nil {
		return 0, 0, err
	}
	changed := merged || pruned // a pruned record is this bind's own copy
	unreserved := false
	if un, ok := cache.Unreserve(next, self); ok {
		next, changed, unreserved = un, true, true // the room made for the pod is its own now
	}
	if !changed {
		next = vt.Clone(next) // shared with the informer; its revision is set below
	}
	// The record with only the pod added: its bytes are those of the
	// record this replica's last bind to the node wrote, grown.
	var value []byte
	if merged && !pruned && !unreserved {
		if value, err = last.grownValue(alloc, next, self); err != nil {
			return 0, 0, err
		}
	}
	written := boundPod(req.pod, req.node)
	txn := objects.Txn{}.
		Unchanged(req.pod).      // still the unbound revision the decision saw
		Compare(next, allocRev). // still the allocation the fit was checked against
		Put(written)
	if value != nil {
		txn = txn.PutEncoded(next, value)
	} else {
		txn = txn.Put(next)
	}
	txn = txn.
		// The Scheduled Event is named after the pod's uid and node,
		// so it is written once per pod: a put needs no read.
		Put(s.scheduledEvent(req.pod, req.node, req.causeID))
	// Nominated elsewhere: the bind releases that reservation too.
	txn, released, err := s.unreserveElsewhere(ctx, txn, req.pod, req.node)
	if err != nil {
		return 0, 0, err
	}
	// Every bind compares the registry: it binds knowing every rule
	// listed before it commits.
	txn = txn.Compare(reg.record, reg.rev)
	txn, domain, outcome := s.guardDomains(txn, req, labels, keys, reg)
	if outcome != bound {
		return 0, outcome, nil
	}
	txn, anchors, outcome := s.anchorFirst(txn, req)
	if outcome != bound {
		return 0, outcome, nil
	}
	value = txn.Value(next)
	done := s.known.writing(next, value)
	rev, err := s.env.Store.Commit(ctx, txn)
	done()
	for _, d := range slices.Concat(domain, anchors, []*corev1.NodeAllocation{reg.record}) {
		if objects.ConflictOn(err, d) {
			*req.stale = d.GetMetadata().GetName()
			return 0, domainStale, nil
		}
	}
	switch {
	case err == nil:
		s.known.learn(next) // Commit set its revision, and written's
		lb := lastBind{rev: rev, value: value, covered: all, view: req.view}
		switch {
		case sums != nil && merged:
			lb.node, lb.sums = node, cache.WithAllocatedPod(sums, next.GetPods()[self])
		case sums != nil && !pruned:
			lb.node, lb.sums = node, sums // the same pods
		}
		s.lastBinds.set(req.node, lb)
		if req.written != nil {
			*req.written = written
		}
		if released != nil {
			s.known.learn(released)
		}
		for _, a := range anchors {
			s.known.learn(a)
		}
		return rev, bound, nil
	case objects.ConflictOn(err, next):
		return 0, nodeStale, nil
	case released != nil && objects.ConflictOn(err, released):
		return 0, podStale, nil // read again, both the pod and that record
	case errors.Is(err, raftstore.ErrConflict):
		return 0, podStale, nil
	}
	return 0, 0, fmt.Errorf("bind pod %q to node %q: %w", framework.PodName(req.pod), req.node, err)
}

// guardRegistry returns the guard registry as this replica knows it
// freshest (the informer's, or what it read or wrote since), parsed once
// per revision.
func (s *Stage) guardRegistry() (*guardRegistry, error) {
	informed, _ := s.allocs.Get("", GuardRegistryName)
	rec, rev := s.known.get(informed, GuardRegistryName)
	if r := s.registry.Load(); r != nil && r.rev == rev {
		return r, nil
	}
	r, err := parseRegistry(rec, rev)
	if err != nil {
		return nil, err
	}
	s.registry.Store(r)
	return r, nil
}

// register lists rules in the guard registry (compared at the revision
// reg was read) and returns domainStale on the registry: the caller reads
// it again, waits until its pod informer is there — its cache then holds
// every pod bound before the rules were listed, which did not guard —
// and decides again. The transaction rewrites the pod unchanged (still
// the revision the decision saw), so that the pod informer reaches the
// registry's revision without waiting for another pod's write.
func (s *Stage) register(ctx context.Context, pod *corev1.Pod, reg *guardRegistry, rules map[string]string, stale *string) (int64, bindOutcome, error) {
	next := reg.with(rules)
	_, err := s.env.Store.Commit(ctx, objects.Txn{}.Unchanged(pod).Compare(next, reg.rev).Put(next).Put(vt.Clone(pod)))
	switch {
	case err == nil:
		s.known.learn(next)
	case objects.ConflictOn(err, pod):
		return 0, podStale, nil
	case !errors.Is(err, raftstore.ErrConflict):
		return 0, 0, fmt.Errorf("list the zone rules of pod %q in %q: %w", framework.PodName(pod), GuardRegistryName, err)
	}
	*stale = GuardRegistryName
	return 0, domainStale, nil
}

// guardDomains adds to txn, for each of keys (guardedKeys), a compare of
// every other writer's record of the chosen node's domain of that key, at
// the revision this replica knows, and a write of this replica's own
// record (DomainRecordName). Every guarded bind into a domain writes its
// writer's record and compares the others', so two replicas that each
// count a domain's pods without the other's bind, and both bind into it,
// conflict: the second one's compare fails and it decides again. Binds
// into other domains only raise their counts, which cannot raise this
// pod's skew. This replica's own guarded binds compare nothing of each
// other's: its cache holds them, assumed, as kube-scheduler's does. In
// the cluster domain (ClusterKey) only a bind on the first-pod exemption
// compares: a pod bound anywhere breaks only that one's premise, "no pod
// matches"; the others write their record blind.
//
// The compare alone holds only if the decision saw every pod the record's
// writes bound: its revision must be one the pod informer had reached
// before the decision. Otherwise the record is stale (domainStale: read
// it, wait for the pod informer, decide again). It returns the records
// compared (a conflict on one of them means domainStale).
func (s *Stage) guardDomains(txn objects.Txn, req bindRequest, labels map[string]string, keys []string, reg *guardRegistry) (objects.Txn, []*corev1.NodeAllocation, bindOutcome) {
	var domain []*corev1.NodeAllocation
	for _, k := range keys {
		value, _ := domainValue(k, labels)
		for _, w := range reg.writers {
			if w == s.writer || (k == ClusterKey && !req.firstOfGroup) {
				continue
			}
			name := DomainRecordName(k, value, w)
			informed, _ := s.allocs.Get("", name)
			_, rev := s.known.get(informed, name)
			if rev > req.decidedAt {
				*req.stale = name
				return txn, nil, domainStale
			}
			rec := &corev1.NodeAllocation{Metadata: &corev1.ObjectMeta{Name: name}}
			txn = txn.Compare(rec, rev)
			domain = append(domain, rec)
		}
		txn = txn.Put(&corev1.NodeAllocation{Metadata: &corev1.ObjectMeta{Name: DomainRecordName(k, value, s.writer)}})
	}
	return txn, domain, bound
}

// allocationAdmits reports whether node's allocation record alloc (at
// revision allocRev) lets req's pod in: the pod fits it
// (CheckAllocationFit, on sums when known: cache.AllocationSums of node
// and alloc) and the decision saw every pod it accounts for
// (decisionSawAllocation, told covered when that is known already). all
// says that every pod alloc accounts for, the pod aside, is among the
// pods the decision saw.
func allocationAdmits(node *corev1.Node, alloc *corev1.NodeAllocation, allocRev int64, req bindRequest, sums *framework.NodeInfo, covered bool, terminated func(key string) bool) (admits, all bool, err error) {
	var reasons []string
	if sums != nil {
		reasons, err = cache.CheckAllocationFitSums(sums, alloc, req.pod)
	} else {
		reasons, err = cache.CheckAllocationFit(node, alloc, req.pod)
	}
	if err != nil || len(reasons) > 0 {
		return false, false, err
	}
	admits, all = decisionSawAllocation(alloc, allocRev, req, covered, terminated)
	return admits, all, nil
}

// decisionSawAllocation reports whether the decision of req saw every pod
// alloc (at revision allocRev) accounts for. An allocation no newer than
// req.decidedAt accounts only for pods bound at or before that revision
// (a bind writes the pod and the allocation in one transaction), which the
// decision's cache held or had seen finish: only a newer one needs
// sawAllocated's look at each pod — unless covered says that every pod
// it accounts for, the pod aside, is among those seen (lastBind.covers),
// as all then reports (it is false when the look was skipped on the
// revision).
func decisionSawAllocation(alloc *corev1.NodeAllocation, allocRev int64, req bindRequest, covered bool, terminated func(key string) bool) (saw, all bool) {
	switch {
	case covered:
		return true, true
	case allocRev <= req.decidedAt:
		return true, false
	}
	return sawAllocated(alloc, req.seen, req.pod, terminated)
}

// sawAllocated reports whether the decision saw every pod alloc accounts
// for on the node, pod itself and the pods terminated reports finished
// aside (a finished pod the record still holds, not yet released; the
// cache, as kube-scheduler's, drops it, and without this a node with one
// was a lost race for every bind). The fit is re-checked against the
// allocation, but InterPodAffinity and PodTopologySpread read the pods'
// labels and terms from the cache only: a pod the allocation has and the
// cycle did not would be missed (two pods with hostname anti-affinity on
// one node). all says that every pod alloc accounts for, pod aside, was
// seen (none was taken as finished).
func sawAllocated(alloc *corev1.NodeAllocation, seen []*framework.PodMeta, pod *corev1.Pod, terminated func(key string) bool) (saw, all bool) {
	allocated := alloc.GetPods()
	if len(allocated) == 0 {
		return true, true
	}
	self := framework.PodKey(pod)
	_, hasSelf := allocated[self]
	want := len(allocated)
	if hasSelf {
		want--
	}
	n := 0
	for _, m := range seen {
		if m.Entry == nil || m.Entry.Key == self {
			continue
		}
		if _, ok := allocated[m.Entry.Key]; ok {
			n++
		}
	}
	if n >= want {
		return true, true // the common case: no question to the cache
	}
	// Some accounted pods were not seen: only those that finished (they
	// keep their allocation until deleted, but no filter counts them) may
	// be missing.
	for key := range allocated {
		if key != self && terminated(key) {
			want--
		}
	}
	return n >= want, false
}

// refreshNode reads node's allocation (linearizably) after a lost race and
// waits, up to CacheSyncTimeout, until the pod informer has seen every pod
// that allocation accounts for, so that the next decision is taken on the
// state that beat us. node may name a domain record or the guard registry
// too: every transaction that writes one writes a pod.
func (s *Stage) refreshNode(ctx context.Context, node string) error {
	alloc, err := objects.Get[*corev1.NodeAllocation](ctx, s.env.Store, "", node)
	switch {
	case errors.Is(err, raftstore.ErrNotFound):
		s.known.forgetDeleted(node)
		return nil
	case err != nil:
		return err
	}
	s.known.learn(alloc)
	// The transaction that wrote the allocation wrote a pod at the same
	// revision: once the pod informer is there, the cache has that pod.
	_, err = s.podRev.wait(ctx, objects.Revision(alloc), s.cfg.CacheSyncTimeout)
	return err
}

// boundPod returns a copy of pod bound to node, PodScheduled=True.
func boundPod(pod *corev1.Pod, node string) *corev1.Pod {
	b := vt.Clone(pod)
	b.Spec.NodeName = node
	if b.Status == nil {
		b.Status = &corev1.PodStatus{}
	}
	b.Status.NominatedNodeName = "" // bound: the nomination has done its work
	podrules.MarkPodCondition(b.Status, podrules.PodScheduled, podrules.ConditionTrue, "", "", timestamppb.Now())
	return b
}

// scheduledEvent is the Scheduled Event of a bind, as events.Recorder
// would create it on its first occurrence.
func (s *Stage) scheduledEvent(pod *corev1.Pod, node, causeID string) *corev1.Event {
	md := pod.GetMetadata()
	msg := fmt.Sprintf("Successfully assigned %s/%s to %s", md.GetNamespace(), md.GetName(), node)
	ev := podrules.NewEvent(podrules.PodRef(pod), podrules.EventNormal, eventsv1.ReasonScheduled, msg,
		s.cfg.SchedulerName, s.env.Replica, timestamppb.Now())
	podrules.SetEventCause(ev, causeID)
	return ev
}
