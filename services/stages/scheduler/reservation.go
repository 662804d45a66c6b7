package scheduler

import (
	"context"
	"errors"
	"fmt"

	"github.com/podflow/podflow/services/stages/scheduler/cache"
	"github.com/podflow/podflow/services/stages/scheduler/framework"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/objects"
)

// readAllocation reads node's NodeAllocation linearizably (nil and no
// error when it has none) and records it as this replica's freshest copy.
func (s *Stage) readAllocation(ctx context.Context, node string) (*corev1.NodeAllocation, error) {
	alloc, err := objects.Get[*corev1.NodeAllocation](ctx, s.env.Store, "", node)
	switch {
	case errors.Is(err, raftstore.ErrNotFound):
		s.known.forgetDeleted(node)
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("read allocation of node %q: %w", node, err)
	}
	s.known.learn(alloc)
	return alloc, nil
}

// unreserveElsewhere adds to txn the release of pod's reservation on the
// node it was nominated to, when that is not node (its bind or its
// nomination goes elsewhere). The record is read fresh and compared: the
// reservation was written with the nomination, so it is there unless
// someone released it. It returns the record put (nil: nothing to release).
func (s *Stage) unreserveElsewhere(ctx context.Context, txn objects.Txn, pod *corev1.Pod, node string) (objects.Txn, *corev1.NodeAllocation, error) {
	other := pod.GetStatus().GetNominatedNodeName()
	if other == "" || other == node {
		return txn, nil, nil
	}
	alloc, err := s.readAllocation(ctx, other)
	if err != nil || alloc == nil {
		return txn, nil, err
	}
	rel, changed := cache.Unreserve(alloc, framework.PodKey(pod))
	if !changed {
		return txn, nil, nil
	}
	return txn.Unchanged(rel).Put(rel), rel, nil
}

// reservationLive reports whether p, the pod of a reservation on node, is
// still nominated there: the same uid, unbound, not being deleted, and
// status.nominatedNodeName node.
func reservationLive(p *corev1.Pod, uid, node string) bool {
	return p != nil && p.GetMetadata().GetUid() == uid && p.GetSpec().GetNodeName() == "" &&
		p.GetMetadata().GetDeletionTimestamp() == nil && p.GetStatus().GetNominatedNodeName() == node
}

// sweepReservations releases the reservations on nodes (every node when
// nodes is nil) whose nominee is no longer nominated there: deleted, being
// deleted, bound or nominated elsewhere by a path that did not release it
// (the binds and preemptions release it in their own transaction; a
// nominee's deletion does not). The informer's copy only selects the
// candidates: each is decided on a fresh read of the pod, and released by
// a transaction comparing the record read, so a reservation written since
// is not lost.
func (s *Stage) sweepReservations(ctx context.Context, nodes []string) error {
	var allocs []*corev1.NodeAllocation
	if nodes == nil {
		allocs = s.allocs.List("")
	}
	for _, n := range nodes {
		if a, ok := s.allocs.Get("", n); ok {
			allocs = append(allocs, a)
		}
	}
	var errs []error
	for _, informed := range allocs {
		node := informed.GetMetadata().GetName()
		res, err := cache.Reservations(informed)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for uid, r := range res {
			ns, name := r.Pod.GetNamespace(), r.Pod.GetName()
			if p, ok := s.pods.Get(ns, name); ok && reservationLive(p, uid, node) {
				continue
			}
			errs = append(errs, s.releaseStale(ctx, node, uid, ns, name))
		}
	}
	return errors.Join(errs...)
}

// releaseStale releases the reservation of pod ns/name (uid) on node if a
// fresh read of the pod says it is no longer nominated there. A lost race
// is left to the next sweep.
func (s *Stage) releaseStale(ctx context.Context, node, uid, ns, name string) error {
	alloc, err := s.readAllocation(ctx, node)
	if err != nil || alloc == nil {
		return err
	}
	rel, changed := cache.Unreserve(alloc, uid)
	if !changed {
		return nil
	}
	p, err := objects.Get[*corev1.Pod](ctx, s.env.Store, ns, name)
	switch {
	case errors.Is(err, raftstore.ErrNotFound):
	case err != nil:
		return err
	case reservationLive(p, uid, node):
		return nil
	}
	_, err = s.env.Store.Commit(ctx, objects.Txn{}.Unchanged(rel).Put(rel))
	switch {
	case err == nil:
		s.known.learn(rel)
		s.Counters.ReservationsReleased.Add(1)
		s.wake() // its room is free
		return nil
	case errors.Is(err, raftstore.ErrConflict):
		return nil
	}
	return fmt.Errorf("release reservation of pod %q on node %q: %w", ns+"/"+name, node, err)
}
