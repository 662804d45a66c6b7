package scheduler

import (
	"context"
	"errors"
	"fmt"

	"github.com/podflow/podflow/services/stages/scheduler/cache"
	"github.com/podflow/podflow/services/stages/scheduler/framework"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/eventsv1"
	"github.com/podflow/podflow/proto/podrules"
	"github.com/podflow/podflow/proto/vt"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/stage"
)

// ReasonPreempted is the victim's Event reason, as kube-scheduler's.
const ReasonPreempted = "Preempted"

// preemptOutcome is what a preemption transaction learned.
type preemptOutcome int

const (
	preempted     preemptOutcome = iota // committed
	preemptorGone                       // the preemptor changed: decide again from a fresh read
	victimsGone                         // a victim changed (bound elsewhere, deleted, updated): decide again
)

// preemptHook, when set (tests), is called at the named points of a
// preemption: "nominated" after the transaction committed, before the
// victims' deletion is requested from their node; "requested" after it,
// before the preemptor binds. A test kills the replica there to show what
// a crash leaves. It is set before any replica starts.
var preemptHook func(point, replica string, pod *corev1.Pod)

// preempt carries out a PostFilter's nomination in one store transaction
// that
//
//   - compares the preemptor's revision (still the unbound pod the
//     decision saw: a second replica's preemption of it, or its bind,
//     fails ours) and each victim's (still bound to the node, not yet
//     terminating: a victim another preemption took fails ours);
//   - compares the node's NodeAllocation and puts it with a reservation
//     of the victims' room for the preemptor (ReserveAllocation; the
//     preemptor's bind releases it, and so does a nomination to another
//     node, in its own transaction);
//   - puts the preemptor with status.nominatedNodeName and
//     PodScheduled=False (reason Unschedulable, msg), each victim marked
//     terminating as `kubectl delete pod` marks it (deletionTimestamp, its
//     grace period) with the DisruptionTarget=True condition (reason
//     PreemptionByScheduler), and each victim's Preempted Event ("Preempted
//     by pod <uid> on node <node>").
//
// Then it asks the victims' node to stop them (PodDeleteRequested, the
// graceful deletion path). Nominating and deleting are one commit, so no
// victim is deleted without its preemptor nominated to the node; a crash
// before the deletion requests leaves terminating pods that their node
// agent's reconciliation stops, and the nominated preemptor is retried by
// every replica that sees a pod leave its node (Stage.nominatedDue) and by
// Reconcile.
func (s *Stage) preempt(ctx context.Context, pod *corev1.Pod, res *framework.PostFilterResult, msg string) (preemptOutcome, error) {
	node := res.NominatedNode
	now := timestamppb.Now()
	nominated := vt.Clone(pod)
	if nominated.Status == nil {
		nominated.Status = &corev1.PodStatus{}
	}
	nominated.Status.NominatedNodeName = node
	podrules.MarkPodCondition(nominated.Status, podrules.PodScheduled, podrules.ConditionFalse, eventsv1.ReasonUnschedulable, msg, now)
	txn := objects.Txn{}.Unchanged(pod).Put(nominated)

	disruption := fmt.Sprintf("%s: preempting to accommodate a higher priority pod", s.cfg.SchedulerName)
	var marked []*corev1.Pod
	for _, v := range res.Victims {
		vp, err := objects.Get[*corev1.Pod](ctx, s.env.Store, v.Namespace, v.Name)
		switch {
		case errors.Is(err, raftstore.ErrNotFound):
			return victimsGone, nil
		case err != nil:
			return 0, err
		case vp.GetMetadata().GetUid() != v.UID || vp.GetSpec().GetNodeName() != node ||
			(vp.GetMetadata().GetDeletionTimestamp() != nil && !v.Terminating) || cache.Terminal(vp):
			// The decision was taken on a cache behind the store (another
			// preemption took this victim, and nominated its preemptor in
			// the same transaction; or it finished, and holds nothing on
			// the node any more): decide again once the cache has it.
			_, err := s.podRev.wait(ctx, objects.Revision(vp), s.cfg.CacheSyncTimeout)
			return victimsGone, err
		case vp.GetMetadata().GetDeletionTimestamp() != nil:
			continue // known to be going already: nothing to delete
		}
		m := vt.Clone(vp)
		stage.MarkTerminating(m, nil, now)
		if m.Status == nil {
			m.Status = &corev1.PodStatus{}
		}
		podrules.MarkPodCondition(m.Status, framework.ConditionDisruptionTarget, podrules.ConditionTrue, framework.ReasonPreemptionByScheduler, disruption, now)
		ev := podrules.NewEvent(podrules.PodRef(vp), podrules.EventNormal, ReasonPreempted,
			fmt.Sprintf("Preempted by pod %s on node %s", pod.GetMetadata().GetUid(), node), s.cfg.SchedulerName, s.env.Replica, now)
		txn = txn.Unchanged(vp).Put(m).Put(ev)
		marked = append(marked, m)
	}
	// The room the victims leave is reserved for the preemptor in the
	// node's allocation record, which every bind to the node compares: a
	// replica that has not seen the nomination cannot bind a pod of no
	// higher priority into it. A reservation on the node it was nominated
	// to before is released.
	alloc, err := s.readAllocation(ctx, node)
	if err != nil {
		return 0, err
	}
	// Finished pods the record still holds (made terminal by a writer
	// other than the status stage) count on no node: released in this
	// transaction, as a bind releases them.
	alloc, pruned := cache.ReleaseAllocation(alloc, s.cache.TerminatedIn(alloc.GetPods())...)
	if fits, err := s.fitsAfterEviction(node, alloc, pod, res.Victims); err != nil || !fits {
		// The record says the victims do not make room: the decision
		// was taken on a cache behind it (a nomination of at least the
		// pod's priority reserved that room, or a pod bound there):
		// decide again once the cache has what the record accounts for.
		if err == nil {
			_, err = s.podRev.wait(ctx, objects.Revision(alloc), s.cfg.CacheSyncTimeout)
		}
		return victimsGone, err
	}
	reserved, changed, err := cache.ReserveAllocation(alloc, node, pod)
	if err != nil {
		return 0, err
	}
	if changed = changed || pruned; changed {
		txn = txn.Unchanged(reserved).Put(reserved)
	}
	txn, released, err := s.unreserveElsewhere(ctx, txn, pod, node)
	if err != nil {
		return 0, err
	}
	_, err = s.env.Store.Commit(ctx, txn)
	switch {
	case objects.ConflictOn(err, pod):
		return preemptorGone, nil
	case errors.Is(err, raftstore.ErrConflict):
		return victimsGone, nil
	case err != nil:
		return 0, fmt.Errorf("preempt for pod %q on node %q: %w", framework.PodName(pod), node, err)
	}
	if changed {
		s.known.learn(reserved)
	}
	if released != nil {
		s.known.learn(released)
	}
	s.Counters.Preemptions.Add(1)
	s.Counters.Victims.Add(int64(len(marked)))
	_ = s.cache.Nominate(nominated, node)
	if preemptHook != nil {
		preemptHook("nominated", s.env.Replica, pod)
	}
	for _, m := range marked {
		if err := stage.RequestDeletion(ctx, s.env, m); err != nil {
			return preempted, err
		}
	}
	if preemptHook != nil {
		preemptHook("requested", s.env.Replica, pod)
	}
	return preempted, nil
}

// fitsAfterEviction reports whether pod fits node's allocation record
// once victims are released from it, beside the room reserved there for
// nominees of at least its priority (CheckAllocationFit).
func (s *Stage) fitsAfterEviction(node string, alloc *corev1.NodeAllocation, pod *corev1.Pod, victims []framework.Victim) (bool, error) {
	n, ok := s.nodes.Get("", node)
	if !ok {
		return false, nil
	}
	for _, v := range victims {
		alloc, _ = cache.ReleaseAllocation(alloc, v.UID)
	}
	reasons, err := cache.CheckAllocationFit(n, alloc, pod)
	return len(reasons) == 0, err
}

// requestPreemptedDeletions asks again for the deletion of the pods on
// node that a preemption marked terminating (the replica that preempted
// may have died before asking; the request is idempotent, and the node
// agent's reconciliation would stop them anyway, later).
func (s *Stage) requestPreemptedDeletions(ctx context.Context, node string) error {
	var errs []error
	for _, p := range s.pods.List("") {
		if p.GetSpec().GetNodeName() == node && p.GetMetadata().GetDeletionTimestamp() != nil && framework.PreemptedByScheduler(p) {
			errs = append(errs, stage.RequestDeletion(ctx, s.env, p))
		}
	}
	return errors.Join(errs...)
}

// nominatedDue makes the pods nominated to node due at once on this
// replica: a pod left the node, so its preemptor may fit now. Every
// replica that sees the change queues them; the bind arbitrates.
func (s *Stage) nominatedDue(node string) {
	noms := s.cache.NominatedPods(node)
	if len(noms) == 0 {
		return
	}
	s.qmu.Lock()
	for _, n := range noms {
		w, ok := s.waiting[n.UID]
		if !ok {
			p, found := s.pods.Get(n.Namespace, n.Name)
			if !found || p.GetMetadata().GetUid() != n.UID {
				continue
			}
			w = newWaitingPod(p)
			s.waiting[n.UID] = w
		}
		w.next = w.since
	}
	s.qmu.Unlock()
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// informNomination keeps the cache's nominations in step with an unbound
// pod's status.nominatedNodeName.
func (s *Stage) informNomination(p *corev1.Pod) {
	if p.GetSpec().GetNodeName() != "" {
		return // AddPod forgets the nomination
	}
	node := p.GetStatus().GetNominatedNodeName()
	if node == "" || p.GetMetadata().GetDeletionTimestamp() != nil || !s.responsible(p) {
		s.cache.Unnominate(p)
		return
	}
	if err := s.cache.Nominate(p, node); err != nil && s.env.Log != nil {
		s.env.Log.Warn("scheduler cache", "op", "nominate", "err", err)
	}
}
