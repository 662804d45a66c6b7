package stage

import (
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/eventsv1"
)

// Annotations persistence puts on a stored pod so that work started from
// the store rather than from an event (reconciliation, retries) continues
// the pod's trace.
const (
	AnnotationRequestID   = "podflow.io/request-id"
	AnnotationTraceparent = "podflow.io/traceparent"
)

// PodEvent builds an event about pod that no delivery caused (a retry, a
// reconciliation): identity from the pod, trace continued from the pod's
// stored traceparent.
func PodEvent(env Env, pod *corev1.Pod, attempt int32, payload proto.Message) (*eventsv1.Envelope, error) {
	md := pod.GetMetadata()
	tp := md.GetAnnotations()[AnnotationTraceparent]
	if tp == "" {
		tp = bus.NewTraceparent()
	} else {
		tp = bus.ChildTraceparent(tp)
	}
	e := &eventsv1.Envelope{
		PodUid:      md.GetUid(),
		RequestId:   md.GetAnnotations()[AnnotationRequestID],
		Namespace:   md.GetNamespace(),
		PodName:     md.GetName(),
		NodeName:    pod.GetSpec().GetNodeName(),
		Time:        timestamppb.Now(),
		Stage:       env.Stage,
		Replica:     env.Replica,
		Attempt:     max(attempt, 1),
		Generation:  md.GetGeneration(),
		Traceparent: tp,
	}
	return e, bus.SetPayload(e, payload)
}
