package pipeline

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/podrules"
	"github.com/podflow/podflow/proto/vt"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/objects"
	"google.golang.org/protobuf/proto"
)

// StoreWriteFilter is the store's field confinement
// (raftstore.Config.WriteFilter), within the kinds StoreWriteACL lets a
// writer write: the scheduler writes a pod's binding and nothing else of
// it (schedulerPodWrite), as kube-apiserver lets kube-scheduler write the
// binding subresource and not the pod; the status stage, which writes what
// nodes report, a pod's status and nothing else of it, and deletes only a
// pod being deleted (statusPodWrite), as NodeRestriction confines kubelet.
// The garbage collector changes only its dependents' ownerReferences
// (dropping some) and deletion (gcWrite).
// Other writers and keys: StoreWriteACL alone.
func StoreWriteFilter(user, key string) raftstore.WriteCheck {
	if user == StageRole(GarbageCollector) {
		for _, k := range gcDependents {
			if strings.HasPrefix(key, k.Prefix("")) {
				return gcWrite(k)
			}
		}
		return nil
	}
	if !strings.HasPrefix(key, objects.Pods.Prefix("")) {
		return nil
	}
	switch user {
	case StageRole(Scheduler):
		return schedulerPodWrite
	case StageRole(Status):
		return statusPodWrite
	}
	return nil
}

// statusPodWrite allows the status stage's changes to a stored pod: its
// status and the annotation recording the last report applied
// (podrules.AnnotationStatusSeq), and the deletion of a pod being deleted
// (its node finished with it), or, for such a pod with finalizers,
// deletionGracePeriodSeconds 0 (kubelet's final delete: the pod is held
// for its finalizers, stage.HoldForFinalizers). It creates no pod.
func statusPodWrite(old, new []byte) error {
	if old == nil {
		return errors.New("the status stage creates no pods")
	}
	var was corev1.Pod
	if err := vt.Unmarshal(old, &was); err != nil {
		return fmt.Errorf("stored pod: %w", err)
	}
	if new == nil {
		if was.GetMetadata().GetDeletionTimestamp() == nil {
			return errors.New("the status stage deletes only a pod being deleted")
		}
		return nil
	}
	var is corev1.Pod
	if err := vt.Unmarshal(new, &is); err != nil {
		return fmt.Errorf("written pod: %w", err)
	}
	free := statusFree(&is)
	if g := is.GetMetadata().DeletionGracePeriodSeconds; was.GetMetadata().GetDeletionTimestamp() != nil && g != nil && *g == 0 {
		free.Metadata.DeletionGracePeriodSeconds = was.GetMetadata().DeletionGracePeriodSeconds
	}
	if !proto.Equal(statusFree(&was), free) {
		return errors.New("the status stage may change only a pod's status")
	}
	return nil
}

// statusFree is p without what the status stage may write.
func statusFree(p *corev1.Pod) *corev1.Pod {
	p = vt.Clone(p)
	p.Status = nil
	if p.Metadata != nil && p.Metadata.Annotations != nil {
		delete(p.Metadata.Annotations, podrules.AnnotationStatusSeq)
		if len(p.Metadata.Annotations) == 0 {
			p.Metadata.Annotations = nil
		}
	}
	return p
}

// disruptionTarget is the condition the scheduler sets on a preemption's
// victims (kube-scheduler's DisruptionTarget).
const disruptionTarget = "DisruptionTarget"

// schedulerPodWrite allows the scheduler's changes to a stored pod: bind it
// (spec.nodeName from none to a node, once: "already assigned" as
// kube-apiserver's binding), nominate it (status.nominatedNodeName), set
// its PodScheduled and DisruptionTarget conditions, and mark a preemption
// victim terminating (metadata.deletionTimestamp and
// deletionGracePeriodSeconds, once). Anything else — the containers, their
// images and security contexts, host namespaces, volumes, labels — must
// stay as stored; it creates and deletes no pod.
func schedulerPodWrite(old, new []byte) error {
	switch {
	case old == nil:
		return errors.New("the scheduler creates no pods")
	case new == nil:
		return errors.New("the scheduler deletes no pods (it marks a preemption's victims terminating)")
	}
	var was, is corev1.Pod
	if err := vt.Unmarshal(old, &was); err != nil {
		return fmt.Errorf("stored pod: %w", err)
	}
	if err := vt.Unmarshal(new, &is); err != nil {
		return fmt.Errorf("written pod: %w", err)
	}
	if n := was.GetSpec().GetNodeName(); n != "" && is.GetSpec().GetNodeName() != n {
		return fmt.Errorf("pod %s/%s is already assigned to node %q", was.GetMetadata().GetNamespace(), was.GetMetadata().GetName(), n)
	}
	if was.GetMetadata().GetDeletionTimestamp() != nil && !proto.Equal(was.GetMetadata(), is.GetMetadata()) {
		return errors.New("the scheduler may not change a terminating pod's metadata")
	}
	if !proto.Equal(bindingFree(&was), bindingFree(&is)) {
		return errors.New("the scheduler may change only a pod's binding (spec.nodeName, status.nominatedNodeName, the PodScheduled and DisruptionTarget conditions) and mark a victim terminating")
	}
	return nil
}

// bindingFree is p without what the scheduler may write.
func bindingFree(p *corev1.Pod) *corev1.Pod {
	p = vt.Clone(p)
	if p.Spec != nil {
		p.Spec.NodeName = ""
	}
	if p.Metadata != nil {
		p.Metadata.DeletionTimestamp, p.Metadata.DeletionGracePeriodSeconds = nil, nil
	}
	if p.Status != nil {
		p.Status.NominatedNodeName = ""
		p.Status.Conditions = slices.DeleteFunc(p.Status.Conditions, func(c *corev1.PodCondition) bool {
			return c.GetType() == podrules.PodScheduled || c.GetType() == disruptionTarget
		})
		if proto.Equal(p.Status, &corev1.PodStatus{}) {
			p.Status = nil
		}
	}
	return p
}

// gcWrite allows the garbage collector's changes to a dependent of kind
// k: its deletion (the object removed, or marked: deletionTimestamp and
// deletionGracePeriodSeconds set where none was) and the removal of some
// of its ownerReferences. It creates nothing and changes nothing else.
func gcWrite(k objects.Kind) raftstore.WriteCheck {
	return func(old, new []byte) error {
		if old == nil {
			return errors.New("the garbage collector creates nothing")
		}
		if new == nil {
			return nil
		}
		was, is := k.New(), k.New()
		if err := proto.Unmarshal(old, was); err != nil {
			return fmt.Errorf("stored %s: %w", k.Name, err)
		}
		if err := proto.Unmarshal(new, is); err != nil {
			return fmt.Errorf("written %s: %w", k.Name, err)
		}
		wm, im := was.GetMetadata(), is.GetMetadata()
		if wm.GetDeletionTimestamp() != nil && !proto.Equal(wm.GetDeletionTimestamp(), im.GetDeletionTimestamp()) {
			return errors.New("the garbage collector may not change a deletion under way")
		}
		for _, ref := range im.GetOwnerReferences() {
			if !slices.ContainsFunc(wm.GetOwnerReferences(), func(r *corev1.OwnerReference) bool { return proto.Equal(r, ref) }) {
				return errors.New("the garbage collector may only remove ownerReferences")
			}
		}
		if !proto.Equal(gcFree(was), gcFree(is)) {
			return errors.New("the garbage collector may change only ownerReferences and deletion")
		}
		return nil
	}
}

// gcFree is obj without what the garbage collector may write.
func gcFree(obj objects.Object) proto.Message {
	obj = proto.Clone(obj).(objects.Object)
	if md := obj.GetMetadata(); md != nil {
		md.OwnerReferences, md.DeletionTimestamp, md.DeletionGracePeriodSeconds = nil, nil, nil
	}
	return obj
}
