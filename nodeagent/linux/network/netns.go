package network

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// NetnsDir is where named network namespaces are bind-mounted, as by
// `ip netns add`.
const NetnsDir = "/run/netns"

// isNetnsMount reports whether path is a mounted network namespace.
func isNetnsMount(path string) bool {
	var st unix.Statfs_t
	return unix.Statfs(path, &st) == nil && st.Type == unix.NSFS_MAGIC
}

// ensureNetns returns a handle on the named network namespace, creating it
// when it does not exist; created says whether this call did. A leftover
// file that is not a mounted namespace (a crash between create and mount)
// is replaced.
func ensureNetns(name string) (h netns.NsHandle, created bool, err error) {
	if name == "" || name != filepath.Base(name) || name == "." || name == ".." {
		return netns.None(), false, fmt.Errorf("%w: netns name %q", ErrInvalidArgument, name)
	}
	path := filepath.Join(NetnsDir, name)
	if isNetnsMount(path) {
		h, err := netns.GetFromPath(path)
		return h, false, err
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return netns.None(), false, fmt.Errorf("remove stale %q: %w", path, err)
	}
	if err := newNamedNetns(name); err != nil {
		if errors.Is(err, fs.ErrExist) && isNetnsMount(path) { // lost a race
			h, err := netns.GetFromPath(path)
			return h, false, err
		}
		return netns.None(), false, err
	}
	h, err = netns.GetFromPath(path)
	if err != nil {
		_ = deleteNetns(name)
		return netns.None(), false, err
	}
	return h, true, nil
}

// newNamedNetns creates a named network namespace from a thread that
// returns to its own namespace afterwards (onLockedThread).
func newNamedNetns(name string) error {
	return onLockedThread(func() error {
		ns, err := netns.NewNamed(name)
		if err != nil {
			return fmt.Errorf("create netns %q: %w", name, err)
		}
		ns.Close()
		return nil
	})
}

// inNetns runs fn on a thread in ns (onLockedThread): /proc/sys/net shows
// the namespace of the thread that opens it.
func inNetns(ns netns.NsHandle, fn func() error) error {
	return onLockedThread(func() error {
		if err := netns.Set(ns); err != nil {
			return fmt.Errorf("enter netns: %w", err)
		}
		return fn()
	})
}

// onLockedThread runs fn, which may move its thread to another network
// namespace, on a goroutine locked to its thread, and moves the thread
// back to the namespace it came from. Should moving back fail, the
// goroutine exits still locked and the runtime throws the thread away, so
// no thread of the process is ever left in another namespace. (A thread is
// never simply left to die in it: the main thread is not terminated but
// wedged, and /proc/self follows it.)
func onLockedThread(fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("current netns: %w", err)
			return
		}
		defer orig.Close()
		ferr := fn()
		if err := netns.Set(orig); err != nil {
			errc <- errors.Join(ferr, fmt.Errorf("return to the original netns: %w", err))
			return // still locked: the thread is discarded
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

// deleteNetns unmounts and removes a named namespace; absent is fine.
func deleteNetns(name string) error {
	if name == "" || name != filepath.Base(name) || name == "." || name == ".." {
		return fmt.Errorf("%w: netns name %q", ErrInvalidArgument, name)
	}
	path := filepath.Join(NetnsDir, name)
	if err := unix.Unmount(path, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("unmount netns %q: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove netns %q: %w", path, err)
	}
	return nil
}
