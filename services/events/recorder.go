// Package events records Kubernetes-style Events (core/v1 Event) in the
// store, the way Kubernetes' event recorder does: one Event object per
// (involved object, type, reason, message, source), whose count and
// lastTimestamp grow when the same thing happens again.
//
// Recording is idempotent per cause: the id of the lifecycle event that
// caused a record is kept on the Event, so a redelivered cause does not
// count twice.
package events

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/podrules"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/objects"
)

// Recorder writes Events for one reporting component.
type Recorder struct {
	Store     *objects.Store
	Component string // reportingComponent, e.g. "default-scheduler", "kubelet"
	Instance  string // reportingInstance, e.g. the replica or node name
	Now       func() time.Time
}

// Record records that reason happened to the involved object, caused by the
// lifecycle event causeID ("" when there is none).
func (r *Recorder) Record(ctx context.Context, involved *corev1.ObjectReference, typ, reason, message, causeID string) error {
	for {
		w, ok, err := r.Prepare(ctx, involved, typ, reason, message, causeID)
		if err != nil || !ok {
			return err
		}
		_, err = r.Store.Commit(ctx, w.Add(objects.Txn{}))
		if errors.Is(err, raftstore.ErrConflict) {
			continue // created or counted concurrently: count on top of it
		}
		if err != nil {
			return fmt.Errorf("record event %s for %s %q: %w", reason, involved.GetKind(), involved.GetName(), err)
		}
		return nil
	}
}

// Write is one Event write, to put in a store transaction: the Event and
// the revision it must still be stored at (objects.Absent for a new one),
// which guards against a concurrent writer (retry the transaction on
// conflict).
type Write struct {
	Event    *corev1.Event
	Revision int64
}

// Add adds the write to t: the compare and the put.
func (w Write) Add(t objects.Txn) objects.Txn { return t.Compare(w.Event, w.Revision).Put(w.Event) }

// First returns, without reading the store, the write that records this
// occurrence as the first of its Event: a new Event (count 1), on the
// condition that no Event of its name is stored (objects.Absent). An Event
// names the involved object's uid, so the first report of a new object
// meets no Event; when one is stored (a redelivered cause, a repeated
// occurrence) the transaction fails with a conflict and the caller goes
// on with Prepare, which reads it and counts on top of it or finds the
// cause counted.
func (r *Recorder) First(involved *corev1.ObjectReference, typ, reason, message, causeID string) Write {
	ev := r.fresh(involved, typ, reason, message)
	podrules.SetEventCause(ev, causeID)
	return Write{Event: ev, Revision: objects.Absent}
}

// fresh is the first occurrence of the Event, stamped now.
func (r *Recorder) fresh(involved *corev1.ObjectReference, typ, reason, message string) *corev1.Event {
	now := time.Now
	if r.Now != nil {
		now = r.Now
	}
	return podrules.NewEvent(involved, typ, reason, message, r.Component, r.Instance, timestamppb.New(now()))
}

// Prepare reads the Event aggregating this occurrence and returns the
// write that records it: a new Event, or the existing one counted once
// more. ok is false when causeID was already counted (nothing to write).
// Callers batch several writes with their own in one transaction.
func (r *Recorder) Prepare(ctx context.Context, involved *corev1.ObjectReference, typ, reason, message, causeID string) (w Write, ok bool, err error) {
	fresh := r.fresh(involved, typ, reason, message)
	ts := fresh.GetLastTimestamp()
	ns, name := fresh.GetMetadata().GetNamespace(), fresh.GetMetadata().GetName()
	ev, err := objects.Get[*corev1.Event](ctx, r.Store, ns, name)
	switch {
	case errors.Is(err, raftstore.ErrNotFound):
		ev = fresh
		w.Revision = objects.Absent
	case err != nil:
		return w, false, fmt.Errorf("record event %s for %s %q: %w", reason, involved.GetKind(), involved.GetName(), err)
	default:
		if causeID != "" && podrules.EventCause(ev) == causeID {
			return w, false, nil
		}
		ev.Count++
		ev.LastTimestamp = ts
		w.Revision = objects.Revision(ev)
	}
	podrules.SetEventCause(ev, causeID)
	w.Event = ev
	return w, true, nil
}
