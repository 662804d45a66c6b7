//go:build linux

// Package openat2 opens paths with the kernel's scoped lookups
// (RESOLVE_IN_ROOT, RESOLVE_BENEATH), retrying as the kernel asks.
package openat2

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// maxTries bounds the retries of one open. A scoped lookup fails with
// EAGAIN when any rename or mount on the machine raced it (the kernel
// cannot then prove ".." stayed inside the root); a busy node mounts and
// renames all the time, so a few retries are normal and an endless run of
// them is not. filepath-securejoin uses the same bound.
const maxTries = 128

// Open is unix.Openat2 that retries EAGAIN and EINTR up to maxTries times.
// It always adds O_CLOEXEC. Errors are *os.PathError naming path.
func Open(dirfd int, path string, how *unix.OpenHow) (int, error) {
	h := *how
	h.Flags |= unix.O_CLOEXEC
	var err error
	for range maxTries {
		var fd int
		fd, err = unix.Openat2(dirfd, path, &h)
		if err == nil {
			return fd, nil
		}
		if !errors.Is(err, unix.EAGAIN) && !errors.Is(err, unix.EINTR) {
			break
		}
	}
	return -1, &os.PathError{Op: "openat2", Path: path, Err: err}
}
