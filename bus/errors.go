package bus

import (
	"errors"
	"fmt"
)

// Error codes. Every error that crosses the bus (a DeadLetter record, a
// publish failure reported to a caller in another process) carries one of
// these codes and is matched by code, never by text.
const (
	// CodeTransient: the handler failed and the message will be retried.
	CodeTransient = "Transient"
	// CodePermanent: the handler said retrying cannot help (see Permanent).
	CodePermanent = "Permanent"
	// CodeMaxDeliver: the message failed on every one of its deliveries, or
	// its last delivery was never acknowledged (the replica died).
	CodeMaxDeliver = "MaxDeliver"
	// CodeDecode: the message is not a valid Envelope.
	CodeDecode = "Decode"
	// CodePanic: the handler panicked (retried like a transient failure).
	CodePanic = "Panic"
	// CodeStreamUnavailable: no stream answered a publish in time.
	CodeStreamUnavailable = "StreamUnavailable"
	// CodeInvalid: the caller passed something malformed.
	CodeInvalid = "Invalid"
	// CodeStreamFull: the stream is at its MaxBytes and refuses new
	// messages (DiscardNew) rather than evict unprocessed ones.
	CodeStreamFull = "StreamFull"
	// CodeMessageTooLarge: the message is larger than the stream's
	// MaxMsgSize or the server's max payload.
	CodeMessageTooLarge = "MessageTooLarge"
	// CodeForbidden: the handler refused the event: its publisher may not
	// say what it says (see Forbidden). Never retried.
	CodeForbidden = "Forbidden"
)

// Error is a bus error with a stable code. Two Errors match under
// errors.Is when their codes are equal, so a code decoded from a
// DeadLetter record matches the package sentinels below.
type Error struct {
	Code    string
	Message string
	err     error
}

// Error implements error.
func (e *Error) Error() string {
	if e.Message == "" {
		return "bus: " + e.Code
	}
	return "bus: " + e.Code + ": " + e.Message
}

// Is reports whether target is an *Error with the same code.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

// Unwrap returns the cause, if any.
func (e *Error) Unwrap() error { return e.err }

// Package sentinels. Match them with errors.Is; they compare by code.
var (
	// ErrStreamUnavailable: no JetStream stream acknowledged a publish
	// (no stream captures the subject, the server is unreachable, or the
	// stream has no leader). A retry is safe: publishes are deduplicated.
	ErrStreamUnavailable = &Error{Code: CodeStreamUnavailable}
	// ErrPermanent marks handler errors that must not be retried.
	ErrPermanent = &Error{Code: CodePermanent}
	// ErrMaxDeliver: a message exhausted its deliveries.
	ErrMaxDeliver = &Error{Code: CodeMaxDeliver}
	// ErrDecode: a message is not a valid Envelope.
	ErrDecode = &Error{Code: CodeDecode}
	// ErrInvalid: an argument or configuration is malformed.
	ErrInvalid = &Error{Code: CodeInvalid}
	// ErrStreamFull: the stream is full (StreamSpec.Discard DiscardNew);
	// nothing was stored. Retrying helps only once consumers catch up and
	// old messages age out: callers answer 429/503 with the reason.
	ErrStreamFull = &Error{Code: CodeStreamFull}
	// ErrMessageTooLarge: the message exceeds the stream's MaxMsgSize or the
	// server's max payload; nothing was stored, not worth retrying.
	ErrMessageTooLarge = &Error{Code: CodeMessageTooLarge}
	// ErrForbidden: a handler refused an event (see Forbidden).
	ErrForbidden = &Error{Code: CodeForbidden}

	// ErrRunnerStarted: Run was called on a Runner that already ran.
	ErrRunnerStarted = errors.New("bus: runner already started")
)

// Permanent wraps err so that the stage runner terminates the message
// and records it on the dead-letter stream instead of retrying it.
// Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &Error{Code: CodePermanent, Message: err.Error(), err: err}
}

// Forbidden wraps err, a handler's refusal of an event its publisher had
// no authority to send (a node speaking for another node's pod), so that
// the runner dead-letters it with CodeForbidden instead of retrying it.
// Forbidden(nil) is nil.
func Forbidden(err error) error {
	if err == nil {
		return nil
	}
	return &Error{Code: CodeForbidden, Message: err.Error(), err: err}
}

// IsPermanent reports whether err (or anything it wraps) was marked
// with Permanent or Forbidden.
func IsPermanent(err error) bool { return errors.Is(err, ErrPermanent) || errors.Is(err, ErrForbidden) }

// CodeOf returns the code of the first *Error in err's chain, or
// CodeTransient for any other non-nil error, or "" for nil.
func CodeOf(err error) string {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return CodeTransient
}

func invalidf(format string, args ...any) error {
	return &Error{Code: CodeInvalid, Message: fmt.Sprintf(format, args...)}
}

// unavailable wraps cause as ErrStreamUnavailable.
func unavailable(subject string, cause error) error {
	return &Error{Code: CodeStreamUnavailable, Message: fmt.Sprintf("publish to %q: %v", subject, cause), err: cause}
}
