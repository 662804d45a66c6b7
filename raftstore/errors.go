package raftstore

import (
	"errors"
	"fmt"

	"github.com/podflow/podflow/proto/storev1"
)

// Code is the class of an error that crosses the wire; errors are matched by
// code with errors.Is, never by text.
type Code = storev1.Code

// Errors returned by the client and the node. Every one carries a wire code;
// errors.Is(err, ErrConflict) matches any *Error with the same code, whatever
// its message or key.
var (
	// ErrNotFound: the key does not exist.
	ErrNotFound = &Error{Code: storev1.Code_CODE_NOT_FOUND, Message: "raftstore: key not found"}
	// ErrAlreadyExists: Create of a key that exists.
	ErrAlreadyExists = &Error{Code: storev1.Code_CODE_ALREADY_EXISTS, Message: "raftstore: key already exists"}
	// ErrConflict: an expected revision (Update, Delete, Txn compare) did not
	// hold. Error.Key names the key.
	ErrConflict = &Error{Code: storev1.Code_CODE_CONFLICT, Message: "raftstore: revision conflict"}
	// ErrUnavailable: no replica could serve the request before the deadline.
	// Nothing was written.
	ErrUnavailable = &Error{Code: storev1.Code_CODE_UNAVAILABLE, Message: "raftstore: unavailable"}
	// ErrNotLeader: the replica that received a leader-only request is not the
	// leader (the client retries these itself).
	ErrNotLeader = &Error{Code: storev1.Code_CODE_NOT_LEADER, Message: "raftstore: not the leader"}
	// ErrGone: a watch asked for history older than the compacted revision;
	// relist and watch from the list's revision.
	ErrGone = &Error{Code: storev1.Code_CODE_GONE, Message: "raftstore: revision compacted"}
	// ErrIndeterminate: a write may or may not have been applied (leadership
	// lost mid-apply, or the deadline passed after the request was sent).
	ErrIndeterminate = &Error{Code: storev1.Code_CODE_INDETERMINATE, Message: "raftstore: write outcome unknown"}
	// ErrInvalid: the request is malformed (empty key, bad revision, ...).
	ErrInvalid = &Error{Code: storev1.Code_CODE_INVALID, Message: "raftstore: invalid request"}
	// ErrInternal: a bug or a corrupt message; not retried.
	ErrInternal = &Error{Code: storev1.Code_CODE_INTERNAL, Message: "raftstore: internal error"}
	// ErrForbidden: the client's writer may not write the key (see
	// Config.WriteACL). Error.Key names the key; not retried.
	ErrForbidden = &Error{Code: storev1.Code_CODE_FORBIDDEN, Message: "raftstore: write forbidden"}
	// ErrTooLarge: the request is larger than Config.MaxRequestBytes
	// (etcd's "request is too large") or than the bus carries; nothing
	// applied, not retried.
	ErrTooLarge = &Error{Code: storev1.Code_CODE_TOO_LARGE, Message: "raftstore: request is too large"}
	// ErrNoSpace: the store is at Config.QuotaBackendBytes (etcd's "mvcc:
	// database space exceeded"); a write that adds data is refused until
	// deletes free space. Reads and deletes work. Not retried.
	ErrNoSpace = &Error{Code: storev1.Code_CODE_NO_SPACE, Message: "raftstore: database space exceeded"}
)

// Errors of Node.Start that never cross the wire.
var (
	// ErrDataDirLocked: another live replica (or process) holds the data
	// directory's LOCK.
	ErrDataDirLocked = errors.New("raftstore: data dir locked")
)

// Error is a coded raftstore error. Key names the key the error is about, if
// any (for a failed Txn compare, the key whose compare failed).
type Error struct {
	Code    Code
	Message string
	Key     string
}

func (e *Error) Error() string {
	if e.Key != "" {
		return fmt.Sprintf("%s (key %q)", e.Message, e.Key)
	}
	return e.Message
}

// Is reports whether target is an *Error with the same code.
func (e *Error) Is(target error) bool {
	var t *Error
	if !errors.As(target, &t) {
		return false
	}
	return t.Code == e.Code
}

// newError returns an *Error of code with a formatted message.
func newError(code Code, key, format string, args ...any) *Error {
	return &Error{Code: code, Key: key, Message: "raftstore: " + fmt.Sprintf(format, args...)}
}

// toWire converts err to its wire form; nil stays nil. Errors without a code
// become CODE_INTERNAL.
func toWire(err error) *storev1.Error {
	if err == nil {
		return nil
	}
	if e, ok := err.(*Error); ok {
		return &storev1.Error{Code: e.Code, Message: e.Message, Key: e.Key}
	}
	var e *Error
	if errors.As(err, &e) {
		return &storev1.Error{Code: e.Code, Message: err.Error()}
	}
	return &storev1.Error{Code: storev1.Code_CODE_INTERNAL, Message: err.Error()}
}

// fromWire converts a wire error to an *Error; nil or CODE_OK is nil.
func fromWire(w *storev1.Error) error {
	if w == nil || w.Code == storev1.Code_CODE_OK {
		return nil
	}
	return &Error{Code: w.Code, Message: w.Message, Key: w.Key}
}
