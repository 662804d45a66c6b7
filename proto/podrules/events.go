package podrules

import (
	"fmt"
	"hash/fnv"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podflow/podflow/proto/corev1"
)

// Event types (event.type).
const (
	EventNormal  = "Normal"
	EventWarning = "Warning"
)

// AnnotationLastCause holds, on an Event, the id of the last lifecycle
// event counted in it, so that a redelivered cause does not count twice.
const AnnotationLastCause = "podflow.io/last-cause"

// PodRef returns the ObjectReference of pod for its Events.
func PodRef(pod *corev1.Pod) *corev1.ObjectReference {
	md := pod.GetMetadata()
	return &corev1.ObjectReference{Kind: "Pod", ApiVersion: "v1", Namespace: md.GetNamespace(), Name: md.GetName(), Uid: md.GetUid()}
}

// EndpointRef returns the ObjectReference of pod as an EndpointSlice's
// endpoint targetRef (Kubernetes sets no apiVersion there); ns is the
// slice's namespace.
func EndpointRef(pod *corev1.Pod, ns string) *corev1.ObjectReference {
	md := pod.GetMetadata()
	return &corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: md.GetName(), Uid: md.GetUid()}
}

// EventName is the deterministic name of the Event aggregating one kind of
// occurrence: the involved object's name and a hash of what happened, as
// Kubernetes names events "<object>.<suffix>".
func EventName(involved *corev1.ObjectReference, typ, reason, message, component string) string {
	h := fnv.New64a()
	for _, s := range []string{involved.GetUid(), involved.GetKind(), typ, reason, message, component} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	return fmt.Sprintf("%s.%016x", involved.GetName(), h.Sum64())
}

// NewEvent returns the first occurrence (count 1) of an Event that
// component, running as instance, reports about involved at ts: named by
// EventName, in the involved object's namespace (NamespaceOrDefault).
func NewEvent(involved *corev1.ObjectReference, typ, reason, message, component, instance string, ts *timestamppb.Timestamp) *corev1.Event {
	return &corev1.Event{
		Metadata: &corev1.ObjectMeta{
			Name:              EventName(involved, typ, reason, message, component),
			Namespace:         NamespaceOrDefault(involved.GetNamespace()),
			CreationTimestamp: ts,
		},
		InvolvedObject:     involved,
		Reason:             reason,
		Message:            message,
		Type:               typ,
		Source:             &corev1.EventSource{Component: component, Host: instance},
		FirstTimestamp:     ts,
		LastTimestamp:      ts,
		Count:              1,
		ReportingComponent: component,
		ReportingInstance:  instance,
	}
}

// SetEventCause records causeID as the last cause counted in ev (nothing
// when causeID is empty).
func SetEventCause(ev *corev1.Event, causeID string) {
	if causeID == "" {
		return
	}
	if ev.Metadata == nil {
		ev.Metadata = &corev1.ObjectMeta{}
	}
	if ev.Metadata.Annotations == nil {
		ev.Metadata.Annotations = map[string]string{}
	}
	ev.Metadata.Annotations[AnnotationLastCause] = causeID
}

// EventCause returns the id of the last cause counted in ev ("" if none).
func EventCause(ev *corev1.Event) string {
	return ev.GetMetadata().GetAnnotations()[AnnotationLastCause]
}
