package stage

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/eventsv1"
)

// Refusal reasons: why a stage refused a node's event (NodeRestriction).
// They are stable codes, carried in the dead-letter record's error and
// matched with RefusalReason, never by text.
const (
	// RefusedSubjectMismatch: the envelope's type, node, namespace or pod
	// name disagrees with the subject it was published on. The bus checks
	// who may publish on a subject; the envelope must say the same.
	RefusedSubjectMismatch = "SubjectMismatch"
	// RefusedNotBoundToNode: the event speaks for a pod that is not bound
	// to the node it comes from.
	RefusedNotBoundToNode = "NotBoundToNode"
	// RefusedNotTerminating: a PodDeleted for a pod that nobody deleted
	// (no deletionTimestamp).
	RefusedNotTerminating = "NotTerminating"
)

// Refusal is a stage's refusal of an event it will never apply. Refuse
// wraps it in bus.Forbidden, so the runner dead-letters the event with
// bus.CodeForbidden.
type Refusal struct {
	Reason  string // one of the Refused* codes
	Message string
}

// Error implements error.
func (r *Refusal) Error() string { return "refused (" + r.Reason + "): " + r.Message }

// RefusalReason returns the reason of the Refusal in err's chain, or "".
func RefusalReason(err error) string {
	var r *Refusal
	if errors.As(err, &r) {
		return r.Reason
	}
	return ""
}

// Refuse logs a refusal of d's event on log (nil: slog.Default) and
// returns it as a bus.Forbidden (permanent) error.
func Refuse(log *slog.Logger, d *bus.Delivery, reason, format string, args ...any) error {
	r := &Refusal{Reason: reason, Message: fmt.Sprintf(format, args...)}
	if log == nil {
		log = slog.Default()
	}
	env := d.Envelope
	log.Warn("refused event", "reason", reason, "type", env.Type(), "id", env.GetId(),
		"subject", d.Subject, "node", env.GetNodeName(), "pod", env.GetNamespace()+"/"+env.GetPodName(), "msg", r.Message)
	return bus.Forbidden(r)
}

// CheckSubject refuses (RefusedSubjectMismatch) an event whose envelope
// would be published on another subject than the one it arrived on: the
// node a pod event names is the node whose identity published it only
// when the two agree.
func CheckSubject(log *slog.Logger, d *bus.Delivery) error {
	if want := bus.Subject(d.Envelope); d.Subject != want {
		return Refuse(log, d, RefusedSubjectMismatch, "envelope says %q, arrived on %q", want, d.Subject)
	}
	return nil
}

// CheckBound refuses (RefusedNotBoundToNode) an event about pod that comes
// from another node than the one pod is bound to, or from no node.
func CheckBound(log *slog.Logger, d *bus.Delivery, pod *corev1.Pod) error {
	if node := d.Envelope.GetNodeName(); node == "" || pod.GetSpec().GetNodeName() != node {
		return Refuse(log, d, RefusedNotBoundToNode, "pod %s/%s is bound to %q, not to %q",
			pod.GetMetadata().GetNamespace(), pod.GetMetadata().GetName(), pod.GetSpec().GetNodeName(), node)
	}
	return nil
}

// CheckTerminating refuses (RefusedNotTerminating) a PodDeleted for a pod
// that is not being deleted.
func CheckTerminating(log *slog.Logger, d *bus.Delivery, pod *corev1.Pod) error {
	if pod.GetMetadata().GetDeletionTimestamp() == nil {
		return Refuse(log, d, RefusedNotTerminating, "pod %s/%s is not being deleted",
			pod.GetMetadata().GetNamespace(), pod.GetMetadata().GetName())
	}
	return nil
}

// CheckPodEvent is what a stage checks, after CheckSubject, before it acts
// on a node's event about pod (nil: the pod is not stored, or is another
// incarnation): the binding, and for PodDeleted that the pod is being
// deleted. A PodDeleted without a node is the api stage's, for a pod it
// removed itself before any node had it.
func CheckPodEvent(log *slog.Logger, d *bus.Delivery, pod *corev1.Pod) error {
	if pod == nil || unboundDeletion(d.Envelope) {
		return nil
	}
	if err := CheckBound(log, d, pod); err != nil {
		return err
	}
	if d.Envelope.Type() == "PodDeleted" {
		return CheckTerminating(log, d, pod)
	}
	return nil
}

func unboundDeletion(e *eventsv1.Envelope) bool {
	return e.Type() == "PodDeleted" && e.GetNodeName() == ""
}
