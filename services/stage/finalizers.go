package stage

import (
	"context"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podflow/podflow/services/objects"
)

// Deletion of objects with finalizers, as kube-apiserver's generic store
// deletes them, lives here so that every part that deletes such objects —
// the api stage's DELETE, the CRD controller deleting a definition's
// objects — takes the same path.

// DeleteObject deletes obj (as read, at its revision) as kube-apiserver's
// generic store does: an object with finalizers is only marked —
// deletionTimestamp now (kept if already set) and
// deletionGracePeriodSeconds 0 — and stays until the last finalizer is
// removed (DeletedByUpdate); one without is deleted. It compares obj's
// revision (raftstore.ErrConflict when it moved on: read again). It
// returns the object as marked (nil when deleted) and whether it is gone.
// Its garbage collection finalizers are left as they are: DeleteObjectWith
// sets them from a request's DeleteOptions.
func DeleteObject(ctx context.Context, st *objects.Store, k objects.Kind, obj objects.Object) (objects.Object, bool, error) {
	return DeleteObjectWith(ctx, st, k, obj, nil)
}

// DeleteObjectWith is DeleteObject for a DELETE with opts (nil: the
// finalizers as they are): first the garbage collector's finalizers are
// set as opts and the kind's default policy ask (GCFinalizers) —
// "orphan" or "foregroundDeletion" mark the object for the garbage
// collector, which removes them once the dependents are orphaned or gone
// —, then the object is marked or deleted. As kube-apiserver's store does
// for kinds without graceful deletion, a DELETE of an object already
// marked may still change those finalizers (a foreground deletion turned
// into an orphaning one); the deletionTimestamp stays.
func DeleteObjectWith(ctx context.Context, st *objects.Store, k objects.Kind, obj objects.Object, opts *DeleteOptions) (objects.Object, bool, error) {
	md := obj.GetMetadata()
	changed := false
	if opts != nil {
		var fins []string
		if changed, fins = GCFinalizers(DefaultGCPolicy(k), md.GetFinalizers(), *opts); changed {
			md.Finalizers = fins
		}
	}
	if len(md.GetFinalizers()) == 0 {
		if _, err := st.Delete(ctx, k, md.GetNamespace(), md.GetName(), objects.Revision(obj)); err != nil {
			return nil, false, err
		}
		return nil, true, nil
	}
	if md.GetDeletionTimestamp() != nil && !changed {
		return obj, false, nil // marked already: the finalizers' owners finish it
	}
	if md.GetDeletionTimestamp() == nil { // markAsDeleting
		md.DeletionTimestamp = timestamppb.Now()
		if md.GetGeneration() > 0 {
			md.Generation++
		}
	}
	zero := int64(0)
	md.DeletionGracePeriodSeconds = &zero
	rev, err := st.Update(ctx, obj)
	if err != nil {
		return nil, false, err
	}
	objects.SetRevision(obj, rev)
	return obj, false, nil
}

// DeletedByUpdate reports whether an update that leaves next (the new
// state of prev) is the end of a deletion: prev was marked for deletion
// and next has no finalizer left, so the object is deleted rather than
// written (kube-apiserver's generic store deletes it during the update).
func DeletedByUpdate(prev, next objects.Object) bool {
	return prev != nil && prev.GetMetadata().GetDeletionTimestamp() != nil && len(next.GetMetadata().GetFinalizers()) == 0
}
