package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/events"
	"github.com/podflow/podflow/services/objects"
)

// KubePod is the part of a stored pod kube's controller helpers read, as
// a k8s.io/api Pod: identity, labels, annotations, owners, node, phase,
// conditions and container restarts — what ranks pods for deletion
// (kube's controller.ActivePodsWithRanks), tells ready and available
// (podutil.IsPodAvailable) and active (controller.IsPodActive). The
// conversion copies no spec but the node and reads no JSON: cheap enough
// for every pod of every sync.
func KubePod(p *corev1.Pod) *v1.Pod {
	md := p.GetMetadata()
	kp := &v1.Pod{ObjectMeta: metav1.ObjectMeta{
		Name: md.GetName(), Namespace: md.GetNamespace(), UID: types.UID(md.GetUid()), ResourceVersion: md.GetResourceVersion(),
		Labels: md.GetLabels(), Annotations: md.GetAnnotations(), Finalizers: md.GetFinalizers(),
		OwnerReferences:   KubeOwners(md.GetOwnerReferences()),
		CreationTimestamp: kubeTime(md.GetCreationTimestamp()),
	}}
	if t := md.GetDeletionTimestamp(); t != nil {
		dt := kubeTime(t)
		kp.DeletionTimestamp = &dt
	}
	kp.Spec.NodeName = p.GetSpec().GetNodeName()
	st := p.GetStatus()
	kp.Status.Phase = v1.PodPhase(st.GetPhase())
	if t := st.GetStartTime(); t != nil {
		s := kubeTime(t)
		kp.Status.StartTime = &s
	}
	for _, c := range st.GetConditions() {
		kp.Status.Conditions = append(kp.Status.Conditions, v1.PodCondition{Type: v1.PodConditionType(c.GetType()),
			Status: v1.ConditionStatus(c.GetStatus()), LastTransitionTime: kubeTime(c.GetLastTransitionTime()), Reason: c.GetReason(), Message: c.GetMessage()})
	}
	for _, c := range st.GetContainerStatuses() {
		kp.Status.ContainerStatuses = append(kp.Status.ContainerStatuses, kubeContainerStatus(c))
	}
	for _, c := range st.GetInitContainerStatuses() {
		kp.Status.InitContainerStatuses = append(kp.Status.InitContainerStatuses, kubeContainerStatus(c))
	}
	return kp
}

// PodReady is kube's podutil.IsPodReady read on a stored pod, not on its
// KubePod: its first Ready condition is True.
func PodReady(p *corev1.Pod) bool {
	c := readyCondition(p)
	return c != nil && c.GetStatus() == string(v1.ConditionTrue)
}

// PodAvailable is kube's podutil.IsPodAvailable read on a stored pod:
// ready, and for minReadySeconds (at now) if that is not 0.
func PodAvailable(p *corev1.Pod, minReadySeconds int32, now time.Time) bool {
	c := readyCondition(p)
	if c == nil || c.GetStatus() != string(v1.ConditionTrue) {
		return false
	}
	if minReadySeconds == 0 {
		return true
	}
	lt := kubeTime(c.GetLastTransitionTime())
	return !lt.IsZero() && lt.Add(time.Duration(minReadySeconds)*time.Second).Compare(now) <= 0
}

// readyCondition is kube's GetPodReadyCondition: the first condition of
// type Ready, nil for none.
func readyCondition(p *corev1.Pod) *corev1.PodCondition {
	for _, c := range p.GetStatus().GetConditions() {
		if c.GetType() == string(v1.PodReady) {
			return c
		}
	}
	return nil
}

// kubeContainerStatus converts a container's status: its name,
// readiness, restarts and, for a container that ended, how (exit code,
// reason, when) — what kube's Job controller matches a podFailurePolicy
// on.
func kubeContainerStatus(c *corev1.ContainerStatus) v1.ContainerStatus {
	out := v1.ContainerStatus{Name: c.GetName(), Ready: c.GetReady(), RestartCount: c.GetRestartCount()}
	if t := c.GetState().GetTerminated(); t != nil {
		out.State.Terminated = &v1.ContainerStateTerminated{ExitCode: t.GetExitCode(), Signal: t.GetSignal(), Reason: t.GetReason(),
			Message: t.GetMessage(), StartedAt: kubeTime(t.GetStartedAt()), FinishedAt: kubeTime(t.GetFinishedAt())}
	}
	return out
}

func kubeTime(t *timestamppb.Timestamp) metav1.Time {
	if t == nil {
		return metav1.Time{}
	}
	return metav1.NewTime(t.AsTime())
}

// KubeOwners converts owner references to Kubernetes'.
func KubeOwners(refs []*corev1.OwnerReference) []metav1.OwnerReference {
	if len(refs) == 0 {
		return nil
	}
	out := make([]metav1.OwnerReference, 0, len(refs))
	for _, r := range refs {
		ref := metav1.OwnerReference{APIVersion: r.GetApiVersion(), Kind: r.GetKind(), Name: r.GetName(), UID: types.UID(r.GetUid())}
		if r.GetController() {
			t := true
			ref.Controller = &t
		}
		if r.GetBlockOwnerDeletion() {
			t := true
			ref.BlockOwnerDeletion = &t
		}
		out = append(out, ref)
	}
	return out
}

// ControllerOf returns md's controller reference (the owner reference
// with controller true), nil for none.
func ControllerOf(md *corev1.ObjectMeta) *corev1.OwnerReference {
	for _, r := range md.GetOwnerReferences() {
		if r.GetController() {
			return r
		}
	}
	return nil
}

// ControllerRef returns the controller reference an object of
// apiVersion/kind named name with uid puts on its dependents (controller
// and blockOwnerDeletion true, as kube's metav1.NewControllerRef).
func ControllerRef(apiVersion, kind, name, uid string) *corev1.OwnerReference {
	return &corev1.OwnerReference{ApiVersion: apiVersion, Kind: kind, Name: name, Uid: uid, Controller: true, BlockOwnerDeletion: true}
}

// Claim is the outcome of a controller's claim on one pod, as kube's
// PodControllerRefManager.ClaimPods decides it.
type Claim int

const (
	// Ignore: not the controller's (another's, or an orphan it may not
	// adopt).
	Ignore Claim = iota
	// Owned: the controller's already, and matching.
	Owned
	// Adopt: an orphan matching the selector: the controller adopts it.
	Adopt
	// Release: the controller's, but no longer matching: it lets it go.
	Release
)

// ClaimOf decides a controller's claim on pod (kube's ClaimObject): the
// controller has uid and selector sel and is being deleted when deleting.
func ClaimOf(pod *corev1.Pod, uid string, sel labels.Selector, deleting bool) Claim {
	md := pod.GetMetadata()
	match := sel != nil && !sel.Empty() && sel.Matches(labels.Set(md.GetLabels()))
	return ClaimMatched(md, ControllerOf(md), uid, match, sel == nil || sel.Empty(), deleting)
}

// ClaimMatched is ClaimOf for a caller that has found the pod's
// controller reference already (ref, ControllerOf(md)) and matched its
// labels: match is whether the selector is usable (not nil, not empty) and
// matches them, unusable whether it is nil or empty.
func ClaimMatched(md *corev1.ObjectMeta, ref *corev1.OwnerReference, uid string, match, unusable, deleting bool) Claim {
	if ref != nil {
		switch {
		case ref.GetUid() != uid:
			return Ignore
		case match:
			return Owned
		case deleting || unusable:
			return Ignore
		}
		return Release
	}
	if deleting || !match || md.GetDeletionTimestamp() != nil {
		return Ignore
	}
	return Adopt
}

// AdoptPod gives pod ns/name the controller reference ref, if it still has
// no controller and still matches sel (read fresh, compared on write); it
// returns the pod's revision after it (0 when the pod is gone).
func AdoptPod(ctx context.Context, st *objects.Store, ns, name string, ref *corev1.OwnerReference, sel labels.Selector) (int64, error) {
	p, err := objects.Mutate(ctx, st, ns, name, func(p *corev1.Pod) error {
		md := p.GetMetadata()
		if ControllerOf(md) != nil || md.GetDeletionTimestamp() != nil || !sel.Matches(labels.Set(md.GetLabels())) {
			return objects.ErrNoChange
		}
		md.OwnerReferences = slices.DeleteFunc(md.OwnerReferences, func(r *corev1.OwnerReference) bool { return r.GetUid() == ref.GetUid() })
		md.OwnerReferences = append(md.OwnerReferences, ref)
		return nil
	})
	return revisionOf(p, err)
}

// ReleasePod removes the owner reference of uid from pod ns/name (read
// fresh, compared on write); it returns the pod's revision after it (0
// when the pod is gone).
func ReleasePod(ctx context.Context, st *objects.Store, ns, name, uid string) (int64, error) {
	p, err := objects.Mutate(ctx, st, ns, name, func(p *corev1.Pod) error {
		md := p.GetMetadata()
		n := len(md.OwnerReferences)
		md.OwnerReferences = slices.DeleteFunc(md.OwnerReferences, func(r *corev1.OwnerReference) bool { return r.GetUid() == uid })
		if len(md.OwnerReferences) == n {
			return objects.ErrNoChange
		}
		return nil
	})
	return revisionOf(p, err)
}

func revisionOf(p *corev1.Pod, err error) (int64, error) {
	switch {
	case errors.Is(err, objects.ErrNoChange), errors.Is(err, raftstore.ErrNotFound):
		return 0, nil
	case err != nil:
		return 0, err
	}
	return objects.Revision(p), nil
}

// Events records a controller's Events, at most Burst per object and then
// one per Refill, as kube's event recorder's spam filter does (a
// ReplicaSet of 10,000 pods records its first creations, not 10,000
// Events). Failures to record are ignored: an Event is a hint.
type Events struct {
	Recorder *events.Recorder
	Burst    int           // default 25
	Refill   time.Duration // default 5m

	mu      sync.Mutex
	buckets map[string]*bucket
}

type bucket struct {
	tokens float64
	last   time.Time
}

// Record records an Event about obj (kind, ns, name, uid) if its bucket
// has room.
func (e *Events) Record(ctx context.Context, apiVersion, kind, ns, name, uid, typ, reason, message string) {
	if e == nil || e.Recorder == nil || !e.allow(uid) {
		return
	}
	ref := &corev1.ObjectReference{ApiVersion: apiVersion, Kind: kind, Namespace: ns, Name: name, Uid: uid}
	_ = e.Recorder.Record(ctx, ref, typ, reason, message, "")
}

func (e *Events) allow(uid string) bool {
	burst, refill := e.Burst, e.Refill
	if burst <= 0 {
		burst = 25
	}
	if refill <= 0 {
		refill = 5 * time.Minute
	}
	now := time.Now()
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.buckets == nil {
		e.buckets = map[string]*bucket{}
	}
	b := e.buckets[uid]
	if b == nil {
		if len(e.buckets) > 10000 { // forget idle objects
			for k, o := range e.buckets {
				if now.Sub(o.last) > refill*time.Duration(burst) {
					delete(e.buckets, k)
				}
			}
		}
		b = &bucket{tokens: float64(burst), last: now}
		e.buckets[uid] = b
	}
	b.tokens = min(float64(burst), b.tokens+float64(now.Sub(b.last))/float64(refill))
	b.last = now
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// SplitKey splits a "namespace/name" key.
func SplitKey(key string) (ns, name string, err error) {
	for i := 0; i < len(key); i++ {
		if key[i] == '/' {
			return key[:i], key[i+1:], nil
		}
	}
	return "", "", fmt.Errorf("controller: key %q is not namespace/name", key)
}

// Key is the key of ns/name.
func Key(ns, name string) string { return ns + "/" + name }
