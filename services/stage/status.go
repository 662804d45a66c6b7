package stage

import (
	"fmt"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/eventsv1"
)

// Statuses in Kubernetes' shape (meta/v1 Status), built in one place so
// every stage words them alike.

// Success is the Status of a successful request.
func Success(code int32, kind, name string) *corev1.Status {
	return &corev1.Status{Status: "Success", Code: code, Kind: kind, Name: name}
}

// Failure returns a failure Status.
func Failure(code int32, reason, kind, name, format string, args ...any) *corev1.Status {
	return &corev1.Status{Status: "Failure", Code: code, Reason: reason, Kind: kind, Name: name, Message: fmt.Sprintf(format, args...)}
}

// AlreadyExists is Kubernetes' 409 for a create of an existing object.
func AlreadyExists(resource, name string) *corev1.Status {
	return Failure(409, eventsv1.ReasonAlreadyExists, resource, name, "%s %q already exists", resource, name)
}

// NotFound is Kubernetes' 404.
func NotFound(resource, name string) *corev1.Status {
	return Failure(404, eventsv1.ReasonNotFound, resource, name, "%s %q not found", resource, name)
}

// Internal is a 500 with the error's text.
func Internal(err error) *corev1.Status {
	return Failure(500, eventsv1.ReasonInternalError, "", "", "Internal error occurred: %v", err)
}
