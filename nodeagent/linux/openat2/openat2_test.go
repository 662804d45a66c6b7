//go:build linux

package openat2

import (
	"errors"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"
)

func openDir(t *testing.T, dir string) int {
	t.Helper()
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}

func TestOpenStaysInRoot(t *testing.T) {
	root := t.TempDir()
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "secret"), []byte("in"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(outside, "secret"), filepath.Join(root, "abs")); err != nil {
		t.Fatal(err)
	}
	rfd := openDir(t, root)
	how := &unix.OpenHow{Flags: unix.O_RDONLY, Resolve: unix.RESOLVE_IN_ROOT}
	// An absolute symlink resolves inside the root: root/<outside>/secret
	// does not exist.
	if _, err := Open(rfd, "abs", how); !errors.Is(err, unix.ENOENT) {
		t.Fatalf("absolute symlink: got %v, want ENOENT", err)
	}
	fd, err := Open(rfd, "../../secret", how)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	buf := make([]byte, 8)
	n, _ := unix.Read(fd, buf)
	if string(buf[:n]) != "in" {
		t.Fatalf("read %q, want the root's own file", buf[:n])
	}
	flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
	if err != nil || flags&unix.FD_CLOEXEC == 0 {
		t.Fatalf("descriptor flags %#x (%v): want FD_CLOEXEC", flags, err)
	}
	var pe *os.PathError
	if _, err := Open(rfd, "missing", how); !errors.As(err, &pe) || pe.Path != "missing" || pe.Op != "openat2" {
		t.Fatalf("error %v: want *os.PathError for openat2 missing", err)
	}
}

// TestOpenRetriesRacingRenames resolves ".." under RESOLVE_BENEATH while
// another goroutine renames on the same file system: the kernel answers
// such lookups with EAGAIN, which Open must absorb.
func TestOpenRetriesRacingRenames(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "a", "b"), 0o755); err != nil {
		t.Fatal(err)
	}
	rfd := openDir(t, root)
	how := &unix.OpenHow{Flags: unix.O_PATH, Resolve: unix.RESOLVE_BENEATH}

	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		x, y := filepath.Join(root, "x"), filepath.Join(root, "y")
		if err := os.WriteFile(x, nil, 0o600); err != nil {
			t.Error(err)
			return
		}
		for !stop.Load() {
			os.Rename(x, y)
			os.Rename(y, x)
		}
	}()
	defer func() { stop.Store(true); wg.Wait() }()

	var raw int
	for range 20000 {
		fd, err := Open(rfd, "a/b/../b/..", how)
		if err != nil {
			t.Fatalf("Open under racing renames: %v", err)
		}
		unix.Close(fd)
		fd, err = unix.Openat2(rfd, "a/b/../b/..", &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_BENEATH})
		if err == nil {
			unix.Close(fd)
		} else if errors.Is(err, unix.EAGAIN) {
			raw++
		}
	}
	t.Logf("raw openat2 returned EAGAIN %d times in 20000 lookups", raw)
}
