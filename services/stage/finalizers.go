package stage

import (
	"context"
	"errors"
	"slices"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/raftstore"
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

// HoldForFinalizers marks, in the object, a pod whose deletion its node
// (or, unbound, the api stage) has finished while finalizers remain, as
// kube-apiserver keeps it after kubelet's final delete:
// deletionGracePeriodSeconds 0, and phase Failed unless it Succeeded or
// Failed (kubelet's phase of a pod stopped by its deletion). It returns
// false, changing nothing, for a pod already held.
func HoldForFinalizers(p *corev1.Pod) bool {
	md := p.GetMetadata()
	ph := p.GetStatus().GetPhase()
	if md.GetDeletionGracePeriodSeconds() == 0 && md.DeletionGracePeriodSeconds != nil && (ph == "Succeeded" || ph == "Failed") {
		return false
	}
	zero := int64(0)
	md.DeletionGracePeriodSeconds = &zero
	if ph != "Succeeded" && ph != "Failed" {
		if p.Status == nil {
			p.Status = &corev1.PodStatus{}
		}
		p.Status.Phase = "Failed"
	}
	return true
}

// RemovePodFinalizer removes finalizer from the pod ns/name of uid (read
// fresh, written comparing its revision, retried on a conflict); a pod
// held for its finalizers (HoldForFinalizers) that loses its last one is
// deleted, as kube-apiserver deletes it. It returns the store revision of
// the write, 0 when there was nothing to do (the pod is gone, another
// one, or without the finalizer).
func RemovePodFinalizer(ctx context.Context, st *objects.Store, ns, name, uid, finalizer string) (int64, error) {
	for {
		p, err := objects.Get[*corev1.Pod](ctx, st, ns, name)
		if errors.Is(err, raftstore.ErrNotFound) {
			return 0, nil
		}
		if err != nil {
			return 0, err
		}
		md := p.GetMetadata()
		if md.GetUid() != uid || !slices.Contains(md.Finalizers, finalizer) {
			return 0, nil
		}
		md.Finalizers = slices.DeleteFunc(md.Finalizers, func(f string) bool { return f == finalizer })
		var rev int64
		if len(md.Finalizers) == 0 && md.DeletionTimestamp != nil && md.DeletionGracePeriodSeconds != nil && *md.DeletionGracePeriodSeconds == 0 {
			rev, err = st.Delete(ctx, objects.Pods, ns, name, objects.Revision(p))
		} else {
			rev, err = st.Update(ctx, p)
		}
		if errors.Is(err, raftstore.ErrConflict) {
			continue
		}
		return rev, err
	}
}
