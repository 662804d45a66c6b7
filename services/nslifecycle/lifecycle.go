package nslifecycle

import (
	"context"
	"errors"
	"slices"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/eventsv1"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/stage"
)

// Kubernetes' names for a namespace's lifecycle.
const (
	// FinalizerKubernetes is the finalizer every namespace is created with;
	// the namespace controller removes it once the content is gone.
	FinalizerKubernetes = "kubernetes"
	PhaseActive         = "Active"
	PhaseTerminating    = "Terminating"
)

// immortal are the namespaces that may not be deleted (kube-apiserver's
// NamespaceLifecycle: default, kube-system, kube-public).
var immortal = []string{"default", "kube-system", "kube-public"}

// Immortal reports whether the namespace name may never be deleted.
func Immortal(name string) bool { return slices.Contains(immortal, name) }

// Terminating reports whether ns is being deleted.
func Terminating(ns *corev1.Namespace) bool {
	return ns.GetMetadata().GetDeletionTimestamp() != nil || ns.GetStatus().GetPhase() == PhaseTerminating
}

// PrepareForCreate makes ns what kube-apiserver stores for a new
// namespace: the "kubernetes" finalizer (whatever the request asked),
// phase Active, no deletionTimestamp and no conditions.
func PrepareForCreate(ns *corev1.Namespace) {
	objects.Meta(ns).DeletionTimestamp = nil
	ns.Spec = &corev1.NamespaceSpec{Finalizers: []string{FinalizerKubernetes}}
	ns.Status = &corev1.NamespaceStatus{Phase: PhaseActive}
}

// PrepareForUpdate keeps what an update of a namespace may not change:
// its finalizers, its status and its deletionTimestamp stay old's (as
// kube-apiserver's namespace strategy, where only the finalize and status
// subresources change them).
func PrepareForUpdate(ns, old *corev1.Namespace) {
	md, omd := objects.Meta(ns), old.GetMetadata()
	md.DeletionTimestamp, md.DeletionGracePeriodSeconds = omd.GetDeletionTimestamp(), omd.DeletionGracePeriodSeconds
	ns.Spec, ns.Status = old.GetSpec(), old.GetStatus()
}

// CheckCreate is NamespaceLifecycle's admission of a new object of
// resource named name in namespace nsName, whose Namespace is ns (nil:
// there is none): 404 NotFound for a missing namespace, 403 Forbidden
// for one being terminated, nil otherwise.
func CheckCreate(ns *corev1.Namespace, nsName, resource, name string) *corev1.Status {
	if ns == nil {
		return stage.Failure(404, eventsv1.ReasonNotFound, "namespaces", nsName, "namespaces %q not found", nsName)
	}
	if Terminating(ns) {
		return stage.Failure(403, eventsv1.ReasonForbidden, resource, name,
			"%s %q is forbidden: unable to create new content in namespace %s because it is being terminated", resource, name, nsName)
	}
	return nil
}

// Get reads the namespace name with a linearizable read; nil when there
// is none.
func Get(ctx context.Context, st *objects.Store, name string) (*corev1.Namespace, error) {
	ns, err := objects.Get[*corev1.Namespace](ctx, st, "", name)
	if errors.Is(err, raftstore.ErrNotFound) {
		return nil, nil
	}
	return ns, err
}

// Delete is a DELETE of the namespace name, as kube-apiserver's: an
// immortal namespace is refused (403 "this namespace may not be deleted");
// otherwise the namespace is not removed but marked — deletionTimestamp,
// phase Terminating and the "kubernetes" finalizer (added to a namespace
// stored without it) — and the namespace controller removes it once its
// content is gone. A second DELETE while it terminates is 409 Conflict,
// kube-apiserver's answer. It returns the namespace as marked.
func Delete(ctx context.Context, st *objects.Store, name string) (*corev1.Status, *corev1.Namespace) {
	if Immortal(name) {
		return stage.Failure(403, eventsv1.ReasonForbidden, "namespaces", name,
			"namespaces %q is forbidden: this namespace may not be deleted", name), nil
	}
	now := timestamppb.Now()
	terminating := false
	ns, err := objects.Mutate(ctx, st, "", name, func(ns *corev1.Namespace) error {
		terminating = false
		if ns.GetMetadata().GetDeletionTimestamp() != nil {
			terminating = true
			return objects.ErrNoChange
		}
		ns.Metadata.DeletionTimestamp = now
		if ns.Spec == nil {
			ns.Spec = &corev1.NamespaceSpec{}
		}
		if !slices.Contains(ns.Spec.Finalizers, FinalizerKubernetes) {
			ns.Spec.Finalizers = append(ns.Spec.Finalizers, FinalizerKubernetes)
		}
		if ns.Status == nil {
			ns.Status = &corev1.NamespaceStatus{}
		}
		ns.Status.Phase = PhaseTerminating
		return nil
	})
	switch {
	case errors.Is(err, raftstore.ErrNotFound):
		return stage.NotFound("namespaces", name), nil
	case err != nil:
		return stage.Internal(err), nil
	case terminating:
		return stage.Failure(409, eventsv1.ReasonConflict, "namespaces", name,
			"Operation cannot be fulfilled on namespaces %q: The system is ensuring all content is removed from this namespace.  Upon completion, this namespace will automatically be purged by the system.", name), nil
	}
	return stage.Success(200, "namespaces", name), ns
}

// ErrNamespaceChanged is CreateIn's error when the namespace changed since
// it was read (it may be being deleted now): read it again and retry.
var ErrNamespaceChanged = errors.New("nslifecycle: the namespace changed since it was read")

// CreateIn is a controller's create-if-absent of obj in the namespace ns,
// as ns was read (at its resourceVersion): one store transaction that
// writes obj only if ns is still at that revision and obj does not
// exist, so that nothing is created in a namespace marked deleted since
// it was read (kube-apiserver's NamespaceLifecycle admission, which
// refuses such a create). created is false and err nil when obj exists
// already — another replica's create, which is as good; err is
// ErrNamespaceChanged when ns changed, and a 403 Status error is never
// returned: a terminating ns creates nothing (false, nil).
func CreateIn(ctx context.Context, st *objects.Store, ns *corev1.Namespace, obj objects.Object) (created bool, err error) {
	if Terminating(ns) {
		return false, nil
	}
	_, err = st.Commit(ctx, objects.Txn{}.Unchanged(ns).Compare(obj, objects.Absent).Put(obj))
	switch {
	case err == nil:
		return true, nil
	case objects.ConflictOn(err, obj):
		return false, nil
	case objects.ConflictOn(err, ns):
		return false, ErrNamespaceChanged
	}
	return false, err
}
