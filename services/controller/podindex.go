package controller

import (
	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/informer"
	"github.com/podflow/podflow/services/objects"
)

// PodControllerIndex is the name of a pod informer's index by controller
// (kube's controller.PodControllerIndex), added by AddPodControllerIndex.
const PodControllerIndex = "podController"

// PodControllerIndexKey is kube's: the index value of the pods of
// namespace ns whose controller reference is ref (namespace, kind, name
// and uid), or of the pods of ns with no controller when ref is nil.
func PodControllerIndexKey(ns string, ref *corev1.OwnerReference) string {
	if ref == nil {
		return ns
	}
	return ns + "/" + ref.GetKind() + "/" + ref.GetName() + "/" + ref.GetUid()
}

// AddPodControllerIndex adds the index by controller to a pod informer
// (kube's AddPodControllerIndexer), before the informer runs; a second
// call is a no-op.
func AddPodControllerIndex(inf *informer.Informer[*corev1.Pod]) {
	// ErrIndexExists is the only error: the index is there.
	_ = inf.AddIndex(PodControllerIndex, func(p *corev1.Pod) []string {
		md := p.GetMetadata()
		return []string{PodControllerIndexKey(md.GetNamespace(), ControllerOf(md))}
	})
}

// PodsOf returns the pods a pod informer with the controller index holds
// whose controller is the object of kind, name and uid in namespace ns,
// and with orphans the pods of ns that have no controller (kube's
// FilterPodsByOwner), in no particular order: what a sync of that object
// looks at, without looking at the namespace's other pods.
func PodsOf(inf *informer.Informer[*corev1.Pod], ns, kind, name, uid string, orphans bool) []*corev1.Pod {
	out := inf.ByIndex(PodControllerIndex, PodControllerIndexKey(ns, &corev1.OwnerReference{Kind: kind, Name: name, Uid: uid}))
	if orphans {
		out = append(out, inf.ByIndex(PodControllerIndex, PodControllerIndexKey(ns, nil))...)
	}
	return out
}

// NewPodInformer returns the pod informer of a controller whose objects
// are of kind (a ReplicaSet's "ReplicaSet"): a pod another kind of
// controller controls is kept with its metadata only (identity,
// deletionTimestamp, labels and owner references; informer.NewFiltered),
// since kube's controllers look at such a pod only to see that it is not
// theirs (ClaimOf's Ignore, resolveControllerRef's nil). Its own kind's
// pods and orphans, which it may adopt, are decoded in full. In a cluster
// of ReplicaSets' pods the other controllers' informers so skip decoding
// nearly every pod write.
func NewPodInformer(st *objects.Store, kind string, h informer.Handlers[*corev1.Pod]) (*informer.Informer[*corev1.Pod], error) {
	return informer.NewFiltered(st, "", h, func(md *corev1.ObjectMeta) bool {
		ref := ControllerOf(md)
		return ref == nil || ref.GetKind() == kind
	})
}
