package network

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sync"

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
	if err := ensureNetnsDir(); err != nil {
		return netns.None(), false, err
	}
	netnsDirMu.RLock()
	defer netnsDirMu.RUnlock()
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
		_ = deleteNetnsLocked(name)
		return netns.None(), false, err
	}
	return h, true, nil
}

// newNamedNetns creates a named network namespace from a thread that
// returns to its own namespace afterwards (onLockedThread). The caller
// holds netnsDirMu for reading, after ensureNetnsDir.
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

// ensureNetnsDir gives NetnsDir the layout `ip netns add` makes
// (iproute2 ip/ipnetns.c netns_add; CNI pkg/testutils netns_linux.go does
// the same): a mount point of its own, bind-mounted onto itself when it
// is a plain directory, with shared propagation, so that a namespace file
// unmounted in one mount namespace is unmounted in all of them. Without
// it, the first `ip netns add` by anyone on the host covers the directory
// with a new mount holding copies of podflow's namespace mounts: podflow's
// unmount then removes only the copy and the file can never be unlinked
// (EBUSY). Namespaces already mounted in a plain directory are moved into
// the new mount point (migrateNetnsMounts). Cheap when the layout is
// there already (one mount call on NetnsDir's own mount; namespaces
// mounted below a shared mount are shared too); safe to call concurrently.
func ensureNetnsDir() error {
	netnsDirMu.RLock()
	err := unix.Mount("", NetnsDir, "none", unix.MS_SHARED, "") // the mount itself: O(1)
	netnsDirMu.RUnlock()
	if err == nil {
		return nil
	}
	netnsDirMu.Lock()
	defer netnsDirMu.Unlock()
	if err := os.MkdirAll(NetnsDir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", NetnsDir, err)
	}
	if err = unix.Mount("", NetnsDir, "none", unix.MS_SHARED|unix.MS_REC, ""); err == nil {
		return nil
	}
	if !errors.Is(err, unix.EINVAL) { // EINVAL: not a mount point
		return fmt.Errorf("mount --make-shared %s: %w", NetnsDir, err)
	}
	return migrateNetnsMounts(func() error {
		if err := unix.Mount(NetnsDir, NetnsDir, "none", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("mount --bind %s %s: %w", NetnsDir, NetnsDir, err)
		}
		if err := unix.Mount("", NetnsDir, "none", unix.MS_SHARED|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("mount --make-shared %s: %w", NetnsDir, err)
		}
		return nil
	})
}

// netnsDirMu is held for writing while ensureNetnsDir changes the layout
// of NetnsDir (and moves the namespaces mounted in it), for reading by
// everything else that looks at, creates or removes a namespace file.
var netnsDirMu sync.RWMutex

// migrateNetnsMounts runs upgrade, which turns the plain directory
// NetnsDir into a mount point, so that no namespace mounted in it stays
// pinned underneath: each mounted namespace file is held open, unmounted,
// and after upgrade mounted again from the held descriptor. A namespace
// is never freed in between (the descriptor keeps it alive).
func migrateNetnsMounts(upgrade func() error) error {
	entries, err := os.ReadDir(NetnsDir)
	if err != nil {
		return fmt.Errorf("list %s: %w", NetnsDir, err)
	}
	held := map[string]*os.File{}
	defer func() {
		for _, f := range held {
			f.Close()
		}
	}()
	for _, e := range entries {
		path := filepath.Join(NetnsDir, e.Name())
		if !isNetnsMount(path) {
			continue
		}
		f, err := os.Open(path)
		if err != nil {
			return fmt.Errorf("hold netns %q: %w", path, err)
		}
		held[path] = f
		if err := unmountAll(path); err != nil {
			return err
		}
	}
	uerr := upgrade()
	var errs []error
	for path, f := range held {
		src := fmt.Sprintf("/proc/self/fd/%d", f.Fd())
		if err := unix.Mount(src, path, "none", unix.MS_BIND, ""); err != nil {
			errs = append(errs, fmt.Errorf("mount netns %q again: %w", path, err))
		}
	}
	return errors.Join(append([]error{uerr}, errs...)...)
}

// unmountAll detaches every mount stacked on path (MNT_DETACH: lazily,
// even while a process has the namespace open) until it is no mount
// point; absent or not mounted is fine.
func unmountAll(path string) error {
	for range 16 {
		err := unix.Unmount(path, unix.MNT_DETACH)
		switch {
		case err == nil:
			continue
		case errors.Is(err, unix.EINVAL), errors.Is(err, unix.ENOENT):
			return nil
		default:
			return fmt.Errorf("unmount netns %q: %w", path, err)
		}
	}
	return fmt.Errorf("unmount netns %q: still mounted after 16 unmounts", path)
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

// deleteNetns unmounts every mount on a named namespace's file and
// removes it; absent is fine. A file that cannot be removed because a
// covering mount of NetnsDir pins it is ErrNetnsBusy.
func deleteNetns(name string) error {
	if name == "" || name != filepath.Base(name) || name == "." || name == ".." {
		return fmt.Errorf("%w: netns name %q", ErrInvalidArgument, name)
	}
	netnsDirMu.RLock()
	defer netnsDirMu.RUnlock()
	return deleteNetnsLocked(name)
}

// deleteNetnsLocked is deleteNetns for a caller holding netnsDirMu.
func deleteNetnsLocked(name string) error {
	path := filepath.Join(NetnsDir, name)
	if err := unmountAll(path); err != nil {
		return err
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		if errors.Is(err, unix.EBUSY) {
			return fmt.Errorf("remove netns %q: %w: it is still mounted underneath a mount that covers %s "+
				"(made by a tool that found %s a plain directory); only a reboot frees it (%w)", path, err, NetnsDir, NetnsDir, ErrNetnsBusy)
		}
		return fmt.Errorf("remove netns %q: %w", path, err)
	}
	return nil
}
