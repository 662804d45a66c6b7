package auth

import (
	"errors"
	"fmt"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/eventsv1"
)

// Package sentinel errors. They describe local configuration problems;
// failures that cross the bus are *corev1.Status values (see Unauthorized
// and Forbidden).
var (
	// ErrInvalidTokenFile is wrapped by ParseTokenFile for every malformed
	// record, with the line number.
	ErrInvalidTokenFile = errors.New("auth: invalid token file")
	// ErrInvalidConfig is wrapped by the Validate methods.
	ErrInvalidConfig = errors.New("auth: invalid config")
	// ErrUnsupportedObject is returned by RBAC.Upsert and RBAC.Delete for
	// objects that are not RBAC kinds.
	ErrUnsupportedObject = errors.New("auth: unsupported object")
)

// Unauthorized is the Status for a request whose credentials are missing,
// unknown or malformed. Its message deliberately says nothing about which.
func Unauthorized() *corev1.Status {
	return &corev1.Status{
		Status:  "Failure",
		Message: "Unauthorized",
		Reason:  eventsv1.ReasonUnauthorized,
		Code:    401,
	}
}

// Forbidden is the Status for a request RBAC denied, worded as
// kube-apiserver words it, e.g.
//
//	pods is forbidden: User "alice" cannot create resource "pods" in API group "" in the namespace "default"
//
// reason, when not empty, is appended after a colon.
func Forbidden(a Attributes, reason string) *corev1.Status {
	msg := forbiddenMessage(a)
	if reason != "" {
		msg += ": " + reason
	}
	return forbiddenStatus(a.Resource, a.APIGroup, a.Name, msg)
}

// forbiddenStatus is kube-apiserver's NewForbidden: "<resource>.<group>
// <name> is forbidden: <msg>", 403 with reason Forbidden.
func forbiddenStatus(resource, group, name, msg string) *corev1.Status {
	gr := resource
	if group != "" {
		gr += "." + group
	}
	if name == "" {
		msg = fmt.Sprintf("%s is forbidden: %s", gr, msg)
	} else {
		msg = fmt.Sprintf("%s %q is forbidden: %s", gr, name, msg)
	}
	return &corev1.Status{
		Status:  "Failure",
		Message: msg,
		Reason:  eventsv1.ReasonForbidden,
		Code:    403,
		Kind:    resource,
		Name:    name,
	}
}

func forbiddenMessage(a Attributes) string {
	resource := a.Resource
	if a.Subresource != "" {
		resource += "/" + a.Subresource
	}
	username := a.User.GetUsername()
	if a.Namespace != "" {
		return fmt.Sprintf("User %q cannot %s resource %q in API group %q in the namespace %q",
			username, a.Verb, resource, a.APIGroup, a.Namespace)
	}
	return fmt.Sprintf("User %q cannot %s resource %q in API group %q at the cluster scope",
		username, a.Verb, resource, a.APIGroup)
}
