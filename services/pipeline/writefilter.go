package pipeline

import (
	"bytes"
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
// A node agent writes only pod CIDR records naming its own node
// (nodePodCIDRWrite), as NodeRestriction lets kubelet write only its own
// Node: other hosts route a pod CIDR to the host of the node it names.
// Other writers and keys: StoreWriteACL alone.
func StoreWriteFilter(user, key string) raftstore.WriteCheck {
	if user == StageRole(GarbageCollector) {
		return gcWrite(key)
	}
	if strings.HasPrefix(user, NodeRolePrefix) && strings.HasPrefix(key, PodCIDRPrefix) {
		return nodePodCIDRWrite(user)
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
	if new != nil {
		var was, is podParts
		if splitPods(old, new, false, &was, &is) {
			if was.hasMeta == is.hasMeta && sameMetaBut(was.meta, is.meta, podrules.AnnotationStatusSeq) {
				// The spec and the metadata are written as stored but for
				// the stage's annotation: the status is all that changes,
				// and it must decode.
				if !is.hasStatus {
					return nil
				}
				if err := vt.Unmarshal(is.status, &corev1.PodStatus{}); err != nil {
					return fmt.Errorf("written pod: %w", err)
				}
				return nil
			}
			// The spec is written as stored, byte for byte: what is left to
			// check is the metadata (and that the status decodes).
			if err := decodeParts(&was, false); err != nil {
				return fmt.Errorf("stored pod: %w", err)
			}
			if err := decodeParts(&is, true); err != nil {
				return fmt.Errorf("written pod: %w", err)
			}
			return statusPodChange(&was.pod, &is.pod)
		}
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
	return statusPodChange(&was, &is)
}

// statusPodChange is statusPodWrite's check of an update, on the decoded
// pods (which it strips).
func statusPodChange(was, is *corev1.Pod) error {
	if m := is.GetMetadata(); m != nil && m.DeletionGracePeriodSeconds != nil && *m.DeletionGracePeriodSeconds == 0 &&
		was.GetMetadata().GetDeletionTimestamp() != nil {
		m.DeletionGracePeriodSeconds = was.GetMetadata().DeletionGracePeriodSeconds
	}
	stripStatus(was)
	stripStatus(is)
	if !was.EqualVT(is) {
		return errors.New("the status stage may change only a pod's status")
	}
	return nil
}

// stripStatus removes from p, a pod decoded for the check, what the status
// stage may write. The checks strip their own copies in place and compare
// them with vtproto's EqualVT (presence kept, as proto.Equal, without
// reflection): they run on the store leader for every write of the stage.
func stripStatus(p *corev1.Pod) {
	p.Status = nil
	if p.Metadata != nil && p.Metadata.Annotations != nil {
		delete(p.Metadata.Annotations, podrules.AnnotationStatusSeq)
		if len(p.Metadata.Annotations) == 0 {
			p.Metadata.Annotations = nil
		}
	}
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
	var wasParts, isParts podParts
	if splitPods(old, new, true, &wasParts, &isParts) {
		// The spec is written as stored but for spec.nodeName, byte for
		// byte: what is left to check is the binding, the metadata and
		// the status.
		if wasParts.hasMeta == isParts.hasMeta && bytes.Equal(wasParts.meta, isParts.meta) &&
			(len(wasParts.nodeName) == 0 || bytes.Equal(wasParts.nodeName, isParts.nodeName)) {
			// The metadata too is written as stored (a bind, a
			// nomination): equal decoded, it need not be (a rebind's
			// refusal names the pod, so it takes the decode below).
			wasParts.hasMeta, isParts.hasMeta = false, false
		}
		if err := decodeParts(&wasParts, true); err != nil {
			return fmt.Errorf("stored pod: %w", err)
		}
		if err := decodeParts(&isParts, true); err != nil {
			return fmt.Errorf("written pod: %w", err)
		}
		return schedulerPodChange(&wasParts.pod, &isParts.pod)
	}
	var was, is corev1.Pod
	if err := vt.Unmarshal(old, &was); err != nil {
		return fmt.Errorf("stored pod: %w", err)
	}
	if err := vt.Unmarshal(new, &is); err != nil {
		return fmt.Errorf("written pod: %w", err)
	}
	return schedulerPodChange(&was, &is)
}

// schedulerPodChange is schedulerPodWrite's check of an update, on the
// decoded pods (which it strips).
func schedulerPodChange(was, is *corev1.Pod) error {
	if n := was.GetSpec().GetNodeName(); n != "" && is.GetSpec().GetNodeName() != n {
		return fmt.Errorf("pod %s/%s is already assigned to node %q", was.GetMetadata().GetNamespace(), was.GetMetadata().GetName(), n)
	}
	if was.GetMetadata().GetDeletionTimestamp() != nil && !was.GetMetadata().EqualVT(is.GetMetadata()) {
		return errors.New("the scheduler may not change a terminating pod's metadata")
	}
	stripBinding(was)
	stripBinding(is)
	if !was.EqualVT(is) {
		return errors.New("the scheduler may change only a pod's binding (spec.nodeName, status.nominatedNodeName, the PodScheduled and DisruptionTarget conditions) and mark a victim terminating")
	}
	return nil
}

// stripBinding removes from p, a pod decoded for the check, what the
// scheduler may write (in place, as stripStatus).
func stripBinding(p *corev1.Pod) {
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
		if p.Status.EqualVT(&corev1.PodStatus{}) {
			p.Status = nil
		}
	}
}

// gcWrite allows the garbage collector's changes to the object at key:
// the removal of some of its ownerReferences (orphaning; a dependent
// keeping a live owner) or turning their blockOwnerDeletion off, the addition or removal of its own finalizers
// ("orphan", "foregroundDeletion"), its deletion when it is a dependent
// (it has ownerReferences) or is marked for deletion (its last finalizer
// went), and marking it deleted (deletionTimestamp and
// deletionGracePeriodSeconds set where none was, the generation bumped
// by one as kube-apiserver's markAsDeleting does). It creates nothing and
// changes nothing else. The object is decoded as its kind (by the key's
// prefix), a custom resource as Unstructured; another key is refused.
func gcWrite(key string) raftstore.WriteCheck {
	newObj, ok := gcDecoder(key)
	if !ok {
		return func([]byte, []byte) error { return errors.New("the garbage collector writes only stored objects") }
	}
	return func(old, new []byte) error {
		if old == nil {
			return errors.New("the garbage collector creates nothing")
		}
		was := newObj()
		if err := proto.Unmarshal(old, was); err != nil {
			return fmt.Errorf("stored object: %w", err)
		}
		wm := was.GetMetadata()
		if new == nil {
			if wm.GetDeletionTimestamp() == nil && len(wm.GetOwnerReferences()) == 0 {
				return errors.New("the garbage collector deletes only dependents and objects marked for deletion")
			}
			return nil
		}
		is := newObj()
		if err := proto.Unmarshal(new, is); err != nil {
			return fmt.Errorf("written object: %w", err)
		}
		im := is.GetMetadata()
		if wm.GetDeletionTimestamp() != nil && !proto.Equal(wm.GetDeletionTimestamp(), im.GetDeletionTimestamp()) {
			return errors.New("the garbage collector may not change a deletion under way")
		}
		for _, ref := range im.GetOwnerReferences() {
			if !slices.ContainsFunc(wm.GetOwnerReferences(), func(r *corev1.OwnerReference) bool { return sameOrUnblocked(r, ref) }) {
				return errors.New("the garbage collector may only remove ownerReferences or make them non-blocking")
			}
		}
		if !slices.Equal(withoutGCFinalizers(wm.GetFinalizers()), withoutGCFinalizers(im.GetFinalizers())) {
			return errors.New("the garbage collector may add or remove only the orphan and foregroundDeletion finalizers")
		}
		marking := wm.GetDeletionTimestamp() == nil && im.GetDeletionTimestamp() != nil
		if g := im.GetGeneration(); g != wm.GetGeneration() && !(marking && g == wm.GetGeneration()+1) {
			return errors.New("the garbage collector may change the generation only when it marks an object deleted")
		}
		if !proto.Equal(gcFree(was), gcFree(is)) {
			return errors.New("the garbage collector may change only ownerReferences, its finalizers and deletion")
		}
		return nil
	}
}

// sameOrUnblocked reports whether ownerReference is is was, or was with
// blockOwnerDeletion turned off (kube's collector does so to break a
// cycle of foreground deletions).
func sameOrUnblocked(was, is *corev1.OwnerReference) bool {
	if proto.Equal(was, is) {
		return true
	}
	if !was.GetBlockOwnerDeletion() || is.GetBlockOwnerDeletion() {
		return false
	}
	was = proto.CloneOf(was)
	was.BlockOwnerDeletion = false
	return proto.Equal(was, is)
}

// gcDecoder is how the object at key decodes: as the stored kind whose
// prefix is the longest one key has, or as a custom resource.
func gcDecoder(key string) (func() objects.Object, bool) {
	var best objects.Kind
	for _, k := range objects.Kinds() {
		if p := k.Prefix(""); strings.HasPrefix(key, p) && len(p) > len(best.Prefix("")) {
			best = k
		}
	}
	if best.Name != "" {
		return best.New, true
	}
	if CustomResourceKey(key) {
		return func() objects.Object { return &corev1.Unstructured{} }, true
	}
	return nil, false
}

// gcFinalizers are the garbage collector's own finalizers.
var gcFinalizers = []string{"orphan", "foregroundDeletion"}

func withoutGCFinalizers(fins []string) []string {
	return slices.DeleteFunc(slices.Clone(fins), func(f string) bool { return slices.Contains(gcFinalizers, f) })
}

// gcFree is obj without what the garbage collector may write.
func gcFree(obj objects.Object) proto.Message {
	obj = proto.Clone(obj).(objects.Object)
	if md := obj.GetMetadata(); md != nil {
		md.OwnerReferences, md.DeletionTimestamp, md.DeletionGracePeriodSeconds = nil, nil, nil
		md.Finalizers, md.Generation = withoutGCFinalizers(md.Finalizers), 0
		if len(md.Finalizers) == 0 {
			md.Finalizers = nil
		}
	}
	return obj
}

// nodePodCIDRWrite confines node role writer to the pod CIDR records of
// its own node: it creates one naming itself and deletes or rewrites only
// one that names itself. A record naming another node would have every
// other host route that node's pods' traffic to the writer's host.
func nodePodCIDRWrite(writer string) raftstore.WriteCheck {
	own := func(value []byte) bool { return NodeRole(string(value)) == writer }
	return func(old, new []byte) error {
		if old != nil && !own(old) {
			return fmt.Errorf("%s may not change the pod CIDR of node %q", writer, old)
		}
		if new != nil && !own(new) {
			return fmt.Errorf("%s may not record a pod CIDR for node %q", writer, new)
		}
		return nil
	}
}
