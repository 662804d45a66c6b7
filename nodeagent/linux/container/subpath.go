package container

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/podflow/podflow/nodeagent/linux/openat2"
)

// inRoot is how a path is resolved under a volume root: as if the root
// were "/" (absolute symlinks and ".." stop at it) and never through a
// /proc magic link, by the kernel in one openat2 call, so nothing can swap
// a component between the check and the use (runc's and kubelet's
// subPath rule).
const inRoot = unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS

// openInRoot returns an O_PATH descriptor of path resolved under the
// directory root (see inRoot).
func openInRoot(root *os.File, path string) (*os.File, error) {
	fd, err := openat2.Open(int(root.Fd()), path, &unix.OpenHow{Flags: unix.O_PATH, Resolve: inRoot})
	if err != nil {
		return nil, &os.PathError{Op: "openat2", Path: filepath.Join(root.Name(), path), Err: errors.Unwrap(err)}
	}
	return os.NewFile(uintptr(fd), filepath.Join(root.Name(), path)), nil
}

// openMountSource returns an O_PATH descriptor of what m mounts: Source,
// or SubPath resolved under it (see inRoot). The caller mounts
// /proc/self/fd/<fd>, the very file that was resolved.
func openMountSource(m Mount) (*os.File, error) {
	fd, err := unix.Open(m.Source, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: m.Source, Err: err}
	}
	src := os.NewFile(uintptr(fd), m.Source)
	if m.SubPath == "" {
		return src, nil
	}
	defer src.Close()
	return openInRoot(src, m.SubPath)
}

// fdPath is the path through which a descriptor of this process is
// mounted.
func fdPath(f *os.File) string { return "/proc/self/fd/" + fmt.Sprint(f.Fd()) }

// MkdirInRoot creates the directory path (and its missing parents) under
// root, each component resolved in root as a subPath is: a symlink in the
// volume never makes it create, or reach, anything outside. An existing
// path (directory or file) is left as it is.
func MkdirInRoot(root, path string) error {
	fd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: root, Err: err}
	}
	dir := os.NewFile(uintptr(fd), root)
	defer func() { dir.Close() }()
	var done string
	for _, c := range strings.Split(filepath.Clean("/"+path), "/") {
		if c == "" {
			continue
		}
		next := filepath.Join(done, c)
		f, err := openInRoot(dir, next)
		if errors.Is(err, unix.ENOENT) {
			parent, perr := openInRoot(dir, done+"/.")
			if perr != nil {
				return perr
			}
			merr := unix.Mkdirat(int(parent.Fd()), c, 0o755)
			parent.Close()
			if merr != nil && !errors.Is(merr, unix.EEXIST) {
				return &os.PathError{Op: "mkdirat", Path: filepath.Join(root, next), Err: merr}
			}
			f, err = openInRoot(dir, next)
		}
		if err != nil {
			return err
		}
		f.Close()
		done = next
	}
	return nil
}
