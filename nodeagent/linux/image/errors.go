package image

import "errors"

// Package sentinels, wrapped inside the *nodeagent.Error values the Store
// returns. Match them with errors.Is.
var (
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
