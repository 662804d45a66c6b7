package scheduler

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/eventsv1"
	"github.com/podflow/podflow/proto/podrules"
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
	domainStale                     // a record of another node in a spread domain changed: refresh it
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
// since (the informer catches up a little later). An overlay entry is
// dropped once the informer has reached its revision.
type allocations struct {
	mu      sync.Mutex
	overlay map[string]*corev1.NodeAllocation // node -> allocation newer than the informer's
}

// get returns the freshest known allocation of node and its revision (nil
// and 0 when it has none: the compare then requires the key not to exist).
func (a *allocations) get(informed *corev1.NodeAllocation, node string) (*corev1.NodeAllocation, int64) {
	a.mu.Lock()
	o := a.overlay[node]
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
	if o := a.overlay[node]; o == nil || objects.Revision(o) < objects.Revision(alloc) {
		a.overlay[node] = alloc
	}
}

// forgetDeleted records that node's allocation does not exist (as of a
// fresh read), so the next bind compares for its absence.
func (a *allocations) forgetDeleted(node string) {
	a.mu.Lock()
	delete(a.overlay, node)
	a.mu.Unlock()
}

// informed drops the overlay entry the informer has caught up with.
func (a *allocations) informed(alloc *corev1.NodeAllocation) {
	node := alloc.GetMetadata().GetName()
	a.mu.Lock()
	defer a.mu.Unlock()
	if o := a.overlay[node]; o != nil && objects.Revision(o) <= objects.Revision(alloc) {
		delete(a.overlay, node)
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
	seen    []*podMeta // the node's pods the decision saw (nil: none)
	causeID string     // id of the PodScheduled event, kept on the Scheduled Event
	// domainSeen are the pods the decision saw on each node of the chosen
	// node's domains (compareSpreadDomains; nil for a pod without
	// zone-wide rules).
	domainSeen map[string][]*podMeta
	// decidedAt is the pod informer's revision before the decision: the
	// decision's cache held every pod bound up to it.
	decidedAt int64
	// stale is set by bind to the node whose record to refresh after a
	// domainStale outcome.
	stale *string
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
	// A pod with zone-wide rules compares every record of its domains:
	// this replica's binds into one domain are serialized too, else its
	// own binds in flight there would fail each other's compares. Node
	// locks are taken before domain locks, domains in key order.
	if keys, _ := domainKeys(req.pod); len(keys) > 0 {
		slices.Sort(keys)
		for _, k := range slices.Compact(keys) {
			if v, ok := node.GetMetadata().GetLabels()[k]; ok {
				defer s.bindLocks.lock("\x00" + k + "=" + v)()
			}
		}
	}
	informed, _ := s.allocs.Get("", req.node)
	alloc, allocRev := s.known.get(informed, req.node)

	reasons, err := CheckAllocationFit(node, alloc, req.pod)
	if err != nil {
		return 0, 0, err
	}
	if len(reasons) > 0 || !sawAllocated(alloc, req.seen, req.pod, s.cache.Terminated) || staleGuard(alloc, allocRev, req.decidedAt) {
		// Our cache let the pod in, the allocation does not, or it
		// accounts for pods the decision did not see (the allocation
		// informer is ahead of the pod informer): someone bound pods our
		// cache has not seen yet, and the pod-aware filters need them.
		return 0, nodeStale, nil
	}
	next, changed, err := MergeAllocation(alloc, req.node, req.pod)
	if err != nil {
		return 0, 0, err
	}
	if un, ok := Unreserve(next, PodKey(req.pod)); ok {
		next, changed = un, true // the room made for the pod is its own now
	}
	if !changed {
		next = proto.CloneOf(next) // shared with the informer; its revision is set below
	}
	txn := objects.Txn{}.
		Unchanged(req.pod).      // still the unbound revision the decision saw
		Compare(next, allocRev). // still the allocation the fit was checked against
		Put(boundPod(req.pod, req.node)).
		Put(next).
		// The Scheduled Event is named after the pod's uid and node,
		// so it is written once per pod: a put needs no read.
		Put(s.scheduledEvent(req.pod, req.node, req.causeID))
	// Nominated elsewhere: the bind releases that reservation too.
	txn, released, err := s.unreserveElsewhere(ctx, txn, req.pod, req.node)
	if err != nil {
		return 0, 0, err
	}
	txn, domain, stale := s.compareSpreadDomains(txn, req)
	if stale != "" {
		*req.stale = stale
		return 0, domainStale, nil
	}
	rev, err := s.env.Store.Commit(ctx, txn)
	for _, d := range domain {
		if objects.ConflictOn(err, d) {
			*req.stale = d.GetMetadata().GetName()
			return 0, domainStale, nil
		}
	}
	switch {
	case err == nil:
		s.known.learn(next) // Commit set its revision
		for _, d := range domain {
			if objects.Revision(d) == rev {
				s.known.learn(d) // rewritten by a guarded bind
			}
		}
		if released != nil {
			s.known.learn(released)
		}
		return rev, bound, nil
	case objects.ConflictOn(err, next):
		return 0, nodeStale, nil
	case released != nil && objects.ConflictOn(err, released):
		return 0, podStale, nil // read again, both the pod and that record
	case errors.Is(err, raftstore.ErrConflict):
		return 0, podStale, nil
	}
	return 0, 0, fmt.Errorf("bind pod %q to node %q: %w", podName(req.pod), req.node, err)
}

// ZoneGuardAnnotation marks a NodeAllocation that a bind of a pod with
// required pod anti-affinity on a key wider than the hostname rewrote
// (see guardDomains). It is never removed: a record that carries it and is
// newer than a decision's cache may stand for such a pod the decision did
// not see, so the bind refreshes first.
const ZoneGuardAnnotation = "podflow.io/zone-guard"

// domainKeys returns the topology keys wider than the hostname whose
// domain pod's bind must guard: those of its DoNotSchedule spread
// constraints and of its required pod anti-affinity terms, and whether
// it has such anti-affinity (then the bind also rewrites the domain's
// records). Required pod affinity needs no guard: a bind can only add
// pods, which cannot break another pod's affinity.
func domainKeys(pod *corev1.Pod) (keys []string, anti bool) {
	for _, c := range pod.GetSpec().GetTopologySpreadConstraints() {
		if c.GetWhenUnsatisfiable() == "DoNotSchedule" && c.GetTopologyKey() != LabelHostname {
			keys = append(keys, c.GetTopologyKey())
		}
	}
	for _, t := range pod.GetSpec().GetAffinity().GetPodAntiAffinity().GetRequiredDuringSchedulingIgnoredDuringExecution() {
		if t.GetTopologyKey() != LabelHostname && t.GetTopologyKey() != "" {
			keys, anti = append(keys, t.GetTopologyKey()), true
		}
	}
	return keys, anti
}

// compareSpreadDomains adds to txn, for a pod with DoNotSchedule topology
// spread constraints or required pod anti-affinity on a key wider than
// the hostname, a compare of the NodeAllocation of every other node in
// the chosen node's domain of that key, at the revision this replica
// knows. Every bind into a node puts its record, so two replicas that both
// count a domain's pods and both bind a pod of the constraint into it
// conflict: the second one's compare fails and it decides again. Binds
// into other domains only raise their counts, which cannot raise this
// pod's skew. A record that accounts a pod the decision did not see on
// that node (the allocation informer ahead of the pod informer;
// sawAllocated) is returned as stale. (Last wave's test, any record newer
// than the pod informer's revision at the decision, also caught this
// replica's own binds the decision had assumed: at 64 handlers a replica
// lost most of its zone-spread binds to itself.)
//
// For required anti-affinity the compare alone would not do: a pod
// without terms that the anti-affinity selects, bound into the domain by a
// replica that has not seen this pod, compares only its own node's
// record. So the bind also rewrites every record of the domain with
// ZoneGuardAnnotation: such a bind then either fails its compare (it knew
// the record before this bind) or finds a guarded record newer than its
// decision (bind refreshes it first).
func (s *Stage) compareSpreadDomains(txn objects.Txn, req bindRequest) (objects.Txn, []*corev1.NodeAllocation, string) {
	keys, anti := domainKeys(req.pod)
	if len(keys) == 0 {
		return txn, nil, ""
	}
	chosen, ok := s.nodes.Get("", req.node)
	if !ok {
		return txn, nil, ""
	}
	var domain []*corev1.NodeAllocation
	for _, name := range s.cache.DomainNodes(chosen, keys) {
		if name == req.node {
			continue
		}
		informed, _ := s.allocs.Get("", name)
		alloc, rev := s.known.get(informed, name)
		if !sawAllocated(alloc, req.domainSeen[name], req.pod, s.cache.Terminated) {
			return txn, nil, name
		}
		if alloc == nil {
			alloc = &corev1.NodeAllocation{Metadata: &corev1.ObjectMeta{Name: name}}
		}
		txn = txn.Compare(alloc, rev)
		if anti {
			alloc = guarded(alloc)
			txn = txn.Put(alloc)
		}
		domain = append(domain, alloc)
	}
	return txn, domain, ""
}

// guarded returns a copy of alloc with ZoneGuardAnnotation.
func guarded(alloc *corev1.NodeAllocation) *corev1.NodeAllocation {
	out := proto.CloneOf(alloc)
	if out.Metadata == nil {
		out.Metadata = &corev1.ObjectMeta{}
	}
	if out.Metadata.Annotations == nil {
		out.Metadata.Annotations = map[string]string{}
	}
	out.Metadata.Annotations[ZoneGuardAnnotation] = ""
	return out
}

// staleGuard reports whether alloc, at rev, was rewritten by a guarded
// bind (ZoneGuardAnnotation) after the decision's cache (decidedAt): the
// decision may have missed that bind's pod.
func staleGuard(alloc *corev1.NodeAllocation, rev, decidedAt int64) bool {
	if rev <= decidedAt {
		return false
	}
	_, ok := alloc.GetMetadata().GetAnnotations()[ZoneGuardAnnotation]
	return ok
}

// sawAllocated reports whether the decision saw every pod alloc accounts
// for on the node, pod itself and the pods terminated reports finished
// aside (a Succeeded pod keeps its allocation until it is deleted; the
// cache, as kube-scheduler's, drops it, and without this a node with one
// was a lost race for every bind). The fit is re-checked against the
// allocation, but InterPodAffinity and PodTopologySpread read the pods'
// labels and terms from the cache only: a pod the allocation has and the
// cycle did not would be missed (two pods with hostname anti-affinity on
// one node).
func sawAllocated(alloc *corev1.NodeAllocation, seen []*podMeta, pod *corev1.Pod, terminated func(key string) bool) bool {
	allocated := alloc.GetPods()
	want := len(allocated)
	for key := range allocated {
		// The pod itself, and pods that finished (they keep their
		// allocation until deleted, but no filter counts them).
		if key == PodKey(pod) || terminated(key) {
			want--
		}
	}
	if want <= 0 {
		return true
	}
	self, n := PodKey(pod), 0
	for _, m := range seen {
		if m.entry == nil || m.entry.key == self {
			continue
		}
		if _, ok := allocated[m.entry.key]; ok {
			n++
		}
	}
	return n >= want
}

// refreshNode reads node's allocation (linearizably) after a lost race and
// waits, up to CacheSyncTimeout, until the pod informer has seen every pod
// that allocation accounts for, so that the next decision is taken on the
// state that beat us.
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
	b := proto.CloneOf(pod)
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
