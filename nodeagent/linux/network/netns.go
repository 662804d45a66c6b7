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

// newNamedNetns creates a named network namespace on a fresh OS thread that
// is thrown away afterwards (the goroutine exits with the thread locked), so
// no thread of the process is ever left in the new namespace.
func newNamedNetns(name string) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		// No UnlockOSThread: the thread moved to the new namespace and dies
		// with this goroutine.
		ns, err := netns.NewNamed(name)
		if err == nil {
			ns.Close()
		}
		errc <- err
	}()
	if err := <-errc; err != nil {
		return fmt.Errorf("create netns %q: %w", name, err)
	}
	return nil
}

// deleteNetns unmounts and removes a named namespace; absent is fine.
func deleteNetns(name string) error {
	path := filepath.Join(NetnsDir, name)
	if err := unix.Unmount(path, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("unmount netns %q: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove netns %q: %w", path, err)
	}
	return nil
}
