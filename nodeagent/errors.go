package nodeagent

import (
	"errors"
	"fmt"
)

// Package sentinels. Match them with errors.Is.
var (
	// ErrStopped is returned by entry points called after Stop.
	ErrStopped = errors.New("nodeagent: agent stopped")
	// ErrWrongNode is returned by HandlePodBound for a pod whose
	// spec.nodeName is not this agent's node.
	ErrWrongNode = errors.New("nodeagent: pod bound to another node")
	// ErrNotFound is what a NodeStore returns (wrapped or not) when the
	// object asked for does not exist.
	ErrNotFound = errors.New("nodeagent: not found")
	// ErrInvalidConfig wraps every Config.Validate failure.
	ErrInvalidConfig = errors.New("nodeagent: invalid config")
)

// Code classifies a runtime failure. The core turns it into the Kubernetes
// reason of the same name (a container's waiting reason, an Event reason, a
// PodFailed reason), so a runtime never chooses the words users see.
type Code string

// Runtime error codes. The values are the Kubernetes reasons they map to.
const (
	CodeImagePull       Code = "ErrImagePull"
	CodeImageNeverPull  Code = "ErrImageNeverPull"
	CodeSandbox         Code = "FailedCreatePodSandBox"
	CodeMount           Code = "FailedMount"
	CodeCreateContainer Code = "CreateContainerError"
	// CodeCreateContainerConfig: the container's configuration cannot be
	// honoured (runAsNonRoot with a root image), kubelet's reason.
	CodeCreateContainerConfig Code = "CreateContainerConfigError"
	CodeRunContainer          Code = "RunContainerError"
	// CodeSysctlForbidden: the pod sets a sysctl the node does not allow,
	// kubelet's admission reason.
	CodeSysctlForbidden Code = "SysctlForbidden"
	CodeNotFound        Code = "NotFound"
)

// Error is a classified runtime error. Two Errors match under errors.Is when
// their codes are equal, so callers compare against the code sentinels below
// and never against text.
type Error struct {
	Code Code
	Msg  string
	Err  error
}

// Code sentinels: errors.Is(err, nodeagent.ErrImagePull) is true for every
// *Error with CodeImagePull, however it was wrapped.
var (
	ErrImagePull       = &Error{Code: CodeImagePull}
	ErrImageNeverPull  = &Error{Code: CodeImageNeverPull}
	ErrSandbox         = &Error{Code: CodeSandbox}
	ErrMount           = &Error{Code: CodeMount}
	ErrCreateContainer = &Error{Code: CodeCreateContainer}
	// ErrCreateContainerConfig matches CodeCreateContainerConfig.
	ErrCreateContainerConfig = &Error{Code: CodeCreateContainerConfig}
	ErrRunContainer          = &Error{Code: CodeRunContainer}
	ErrNoSuchObject          = &Error{Code: CodeNotFound}
	// ErrSysctlForbidden matches CodeSysctlForbidden.
	ErrSysctlForbidden = &Error{Code: CodeSysctlForbidden}
)

// Errorf returns an *Error with code and a formatted message; a %w verb in
// format wraps its operand.
func Errorf(code Code, format string, args ...any) error {
	err := fmt.Errorf(format, args...)
	return &Error{Code: code, Msg: err.Error(), Err: errors.Unwrap(err)}
}

func (e *Error) Error() string {
	if e.Msg == "" {
		return string(e.Code)
	}
	return string(e.Code) + ": " + e.Msg
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// Is reports whether target is an *Error with the same code.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

// CodeOf returns the code of the first *Error in err's chain, or def.
func CodeOf(err error, def Code) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return def
}

// message returns err's text without its code prefix, for Kubernetes-style
// messages ("Failed to pull image \"x\": <message>").
func message(err error) string {
	var e *Error
	if errors.As(err, &e) && e.Msg != "" {
		return e.Msg
	}
	return err.Error()
}
