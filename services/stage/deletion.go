package stage

import (
	"context"
	"errors"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/eventsv1"
	"github.com/podflow/podflow/proto/vt"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/objects"
)

// Graceful pod deletion lives here, not in a stage, so that every part
// that deletes pods — the api stage's DELETE, the namespace controller,
// the scheduler's preemption — takes the same path without importing
// another stage.

// DefaultTerminationGracePeriodSeconds is the grace period of a pod that
// sets none (Kubernetes' default, 30 seconds).
const DefaultTerminationGracePeriodSeconds int64 = 30

// MarkTerminating starts a pod's graceful deletion in the object, as the
// API server does: deletionTimestamp now and deletionGracePeriodSeconds
// grace, else the pod's terminationGracePeriodSeconds, else 30. It
// returns false, changing nothing, for a pod already terminating (the
// first grace period holds). The caller writes the pod (comparing its
// revision), then RequestDeletion.
func MarkTerminating(p *corev1.Pod, grace *int64, now *timestamppb.Timestamp) bool {
	if p.GetMetadata().GetDeletionTimestamp() != nil {
		return false
	}
	g := DefaultTerminationGracePeriodSeconds
	if p.GetSpec() != nil && p.Spec.TerminationGracePeriodSeconds != nil {
		g = p.GetSpec().GetTerminationGracePeriodSeconds()
	}
	if grace != nil {
		g = *grace
	}
	if p.Metadata == nil {
		p.Metadata = &corev1.ObjectMeta{}
	}
	p.Metadata.DeletionTimestamp = now
	p.Metadata.DeletionGracePeriodSeconds = &g
	return true
}

// DeletePod starts a pod's graceful deletion: it marks the pod terminating
// in the store (MarkTerminating), then continues with RequestDeletion. A
// pod already terminating is not marked again and its deletion is
// requested again. A missing pod is raftstore.ErrNotFound. It returns the
// pod as marked.
func DeletePod(ctx context.Context, env Env, ns, name string, grace *int64) (*corev1.Pod, error) {
	now := timestamppb.Now()
	pod, err := objects.Mutate(ctx, env.Store, ns, name, func(p *corev1.Pod) error {
		if !MarkTerminating(p, grace, now) {
			return objects.ErrNoChange
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if err := RequestDeletion(ctx, env, pod); err != nil {
		return nil, err
	}
	return pod, nil
}

// RequestDeletion continues the deletion of a pod marked terminating: an
// unbound pod is removed from the store at once (PodDeleted), or, with
// finalizers, held for them (HoldForFinalizers); a bound pod
// is handed to its node (PodDeleteRequested), whose agent stops its
// containers and reports PodDeleted, after which the status stage removes
// it. It is idempotent and is also what reconciliation calls for a
// terminating pod. The scheduler calls it for the victims of a preemption.
func RequestDeletion(ctx context.Context, env Env, pod *corev1.Pod) error {
	md := pod.GetMetadata()
	base := &eventsv1.Envelope{
		PodUid: md.GetUid(), Namespace: md.GetNamespace(), PodName: md.GetName(), NodeName: pod.GetSpec().GetNodeName(),
		Time: timestamppb.Now(), Stage: env.Stage, Replica: env.Replica, Attempt: 1, Generation: md.GetGeneration(),
		Traceparent: bus.NewTraceparent(),
	}
	if pod.GetSpec().GetNodeName() == "" {
		var rev int64
		var err error
		if len(md.GetFinalizers()) > 0 {
			// Held for its finalizers: the writer of the last one deletes it.
			held := vt.Clone(pod)
			if HoldForFinalizers(held) {
				rev, err = env.Store.Update(ctx, held)
			}
		} else {
			rev, err = env.Store.Delete(ctx, objects.Pods, md.GetNamespace(), md.GetName(), objects.Revision(pod))
		}
		if err != nil && !errors.Is(err, raftstore.ErrNotFound) {
			return err
		}
		base.Payload = &eventsv1.Envelope_PodDeleted{PodDeleted: &eventsv1.PodDeleted{Revision: rev}}
	} else {
		base.Payload = &eventsv1.Envelope_PodDeleteRequested{PodDeleteRequested: &eventsv1.PodDeleteRequested{
			GracePeriodSeconds: md.DeletionGracePeriodSeconds,
		}}
	}
	return env.Pub.Publish(ctx, base)
}
