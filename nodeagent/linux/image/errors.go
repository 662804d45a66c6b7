package image

import (
	"errors"
	"fmt"
)

// Package sentinels. Match them with errors.Is. Every failure of Pull is
// ErrPull or ErrNeverPull, and every failure of Rootfs, Snapshot and
// MountRootfs is ErrRootfs, besides the cause they wrap (ErrNotPresent,
// ErrUnsafePath, a context error …); the node agent maps those three
// classes to its error codes.
var (
	// ErrPull classifies every Pull failure except ErrNeverPull (the
	// agent's ErrImagePull).
	ErrPull = errors.New("image: pull failed")
	// ErrNeverPull classifies a Pull with policy Never of an image that is
	// not present (the agent's ErrImageNeverPull); it wraps ErrNotPresent.
	ErrNeverPull = errors.New("image: not present with pull policy Never")
	// ErrRootfs classifies every failure of Rootfs, Snapshot and
	// MountRootfs (the agent's CreateContainerError).
	ErrRootfs = errors.New("image: root filesystem")
	// ErrInvalidConfig wraps every Config.Validate failure.
	ErrInvalidConfig = errors.New("image: invalid config")
	// ErrInvalidReference is returned for a reference that does not parse.
	ErrInvalidReference = errors.New("image: invalid reference")
	// ErrInvalidPolicy is returned for a pull policy other than Always,
	// IfNotPresent, Never or "".
	ErrInvalidPolicy = errors.New("image: invalid pull policy")
	// ErrNotPresent is returned when an image is not in the store (Pull
	// with policy Never, Rootfs before Pull).
	ErrNotPresent = errors.New("image: image not present")
	// ErrUnsafePath is returned when a layer holds an entry whose name or
	// hardlink target escapes the root filesystem ("../x"); the unpack
	// stops.
	ErrUnsafePath = errors.New("image: unsafe path in layer")
	// ErrDigestMismatch is returned when downloaded content does not
	// match its digest or diffID.
	ErrDigestMismatch = errors.New("image: digest mismatch")
	// ErrClosed is returned by calls after Close.
	ErrClosed = errors.New("image: store closed")
)

// classError puts err in class without changing its text: errors.Is
// matches both the class and err's own chain.
type classError struct{ class, err error }

func (e *classError) Error() string   { return e.err.Error() }
func (e *classError) Unwrap() []error { return []error{e.class, e.err} }

// classify returns the error format and args describe, in class.
func classify(class error, format string, args ...any) error {
	return &classError{class: class, err: fmt.Errorf(format, args...)}
}
