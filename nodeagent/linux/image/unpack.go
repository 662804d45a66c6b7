package image

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"golang.org/x/sys/unix"

	"github.com/podflow/podflow/nodeagent/linux/openat2"
)

// Whiteout names of the OCI image layer specification.
const (
	whiteoutPrefix = ".wh."
	whiteoutOpaque = ".wh..wh..opq"
)

// Rootfs unpacks the layers of ref (a reference or an image ID, already
// pulled) in order into dest, applying whiteouts (".wh.<name>" deletes
// <name> of the layers below; ".wh..wh..opq" hides everything below in its
// directory), hardlinks and symlinks. Entries are resolved as if dest were
// the root (openat2 RESOLVE_IN_ROOT): a symlink never leads a write out of
// dest, and an entry or hardlink whose name climbs out of dest ("../x")
// fails the unpack with ErrUnsafePath. Device nodes are created and
// ownership applied only when running as root.
//
// Rootfs is idempotent: on success it writes a marker beside dest
// ("<parent>/.<base>.image") holding the image's manifest digest, and a
// later call for the same image returns at once; otherwise dest is removed
// and unpacked afresh. Failures are ErrRootfs.
func (s *Store) Rootfs(ctx context.Context, ref, dest string) error {
	if err := s.rootfs(ctx, ref, dest); err != nil {
		return classify(ErrRootfs, "rootfs of %q in %q: %w", ref, dest, err)
	}
	return nil
}

func (s *Store) rootfs(ctx context.Context, ref, dest string) error {
	rec, err := s.find(ref)
	if err != nil {
		return err
	}
	dest = filepath.Clean(dest)
	if !filepath.IsAbs(dest) {
		return fmt.Errorf("dest %q is not absolute", dest)
	}
	marker := filepath.Join(filepath.Dir(dest), "."+filepath.Base(dest)+".image")
	if b, err := os.ReadFile(marker); err == nil && string(b) == rec.Manifest+"\n" {
		if fi, err := os.Lstat(dest); err == nil && fi.IsDir() {
			return nil
		}
	}
	if err := os.Remove(marker); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if err := os.RemoveAll(dest); err != nil {
		return err
	}
	if err := s.unpack(ctx, rec, dest); err != nil {
		return err
	}
	tmp := marker + ".tmp"
	if err := os.WriteFile(tmp, []byte(rec.Manifest+"\n"), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, marker)
}

// unpack creates dest and applies rec's layers to it in order.
func (s *Store) unpack(ctx context.Context, rec *record, dest string) error {
	if err := os.MkdirAll(dest, 0o755); err != nil {
		return err
	}
	rootFD, err := unix.Open(dest, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: dest, Err: err}
	}
	defer unix.Close(rootFD)
	u := &unpacker{root: rootFD, privileged: os.Geteuid() == 0, buf: make([]byte, 128<<10)}
	for i, l := range rec.Layers {
		h, err := v1.NewHash(l.DiffID)
		if err != nil {
			return err
		}
		f, err := os.Open(s.layerPath(h))
		if err != nil {
			return fmt.Errorf("layer %d (%s): %w", i, l.DiffID, err)
		}
		err = u.apply(ctx, f)
		f.Close()
		if err != nil {
			return fmt.Errorf("layer %d (%s): %w", i, l.DiffID, err)
		}
	}
	return nil
}

// ApplyLayer unpacks one uncompressed layer tarball onto the root
// filesystem at dest with the semantics of Rootfs (whiteouts, confinement,
// ErrUnsafePath). It is for tools and tests; a runtime uses Rootfs.
func ApplyLayer(ctx context.Context, dest string, layer io.Reader) error {
	rootFD, err := unix.Open(dest, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: dest, Err: err}
	}
	defer unix.Close(rootFD)
	u := &unpacker{root: rootFD, privileged: os.Geteuid() == 0, buf: make([]byte, 128<<10)}
	return u.apply(ctx, layer)
}

// unpacker applies layers to one root directory. Every path is resolved
// with openat2(RESOLVE_IN_ROOT) against root, so ".." and symlinks
// (absolute ones included) cannot leave it.
type unpacker struct {
	root       int
	privileged bool
	buf        []byte
}

type dirTimes struct {
	name  string
	mtime time.Time
}

func (u *unpacker) apply(ctx context.Context, r io.Reader) error {
	tr := tar.NewReader(r)
	written := map[string]bool{} // entries of this layer, for opaque whiteouts
	var dirs []dirTimes
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("read tar: %w", err)
		}
		name, err := cleanName(hdr.Name)
		if err != nil {
			return err
		}
		if name == "." {
			continue // the root itself
		}
		dir, base := path.Split(name)
		dir = strings.TrimSuffix(dir, "/")
		if dir == "" {
			dir = "."
		}
		if strings.HasPrefix(base, whiteoutPrefix) {
			if err := u.whiteout(dir, base, written); err != nil {
				return fmt.Errorf("whiteout %q: %w", name, err)
			}
			continue
		}
		pfd, err := u.ensureDir(dir)
		if err != nil {
			return fmt.Errorf("parent of %q: %w", name, err)
		}
		err = u.entry(pfd, base, hdr, tr)
		if pfd != u.root {
			unix.Close(pfd)
		}
		if err != nil {
			return fmt.Errorf("entry %q: %w", name, err)
		}
		written[name] = true
		if hdr.Typeflag == tar.TypeDir {
			dirs = append(dirs, dirTimes{name, hdr.ModTime})
		}
	}
	// Directory times last: creating their entries changed them.
	for i := len(dirs) - 1; i >= 0; i-- {
		d := dirs[i]
		ts := []unix.Timespec{unix.NsecToTimespec(d.mtime.UnixNano()), unix.NsecToTimespec(d.mtime.UnixNano())}
		if fd, err := u.open(d.name, unix.O_PATH); err == nil {
			_ = unix.UtimesNanoAt(fd, "", ts, unix.AT_EMPTY_PATH)
			unix.Close(fd)
		}
	}
	return nil
}

// cleanName turns a tar entry name into a clean path relative to the root,
// refusing names that climb out of it. An absolute name is taken as
// relative to the root.
func cleanName(n string) (string, error) {
	p := path.Clean(strings.TrimLeft(n, "/"))
	if p == ".." || strings.HasPrefix(p, "../") {
		return "", fmt.Errorf("%w: %q", ErrUnsafePath, n)
	}
	return p, nil
}

// open resolves name in the root and opens it with flags.
func (u *unpacker) open(name string, flags int) (int, error) {
	return openat2.Open(u.root, name, &unix.OpenHow{
		Flags:   uint64(flags),
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS,
	})
}

// ensureDir returns an O_PATH descriptor of directory dir in the root,
// creating it and its missing parents (mode 0755) as tar streams that omit
// directory entries need. The caller closes it unless it is u.root.
func (u *unpacker) ensureDir(dir string) (int, error) {
	if dir == "." {
		return u.root, nil
	}
	fd, err := u.open(dir, unix.O_PATH|unix.O_DIRECTORY)
	if err == nil || !errors.Is(err, unix.ENOENT) {
		return fd, err
	}
	parent, base := path.Split(dir)
	parent = strings.TrimSuffix(parent, "/")
	if parent == "" {
		parent = "."
	}
	pfd, err := u.ensureDir(parent)
	if err != nil {
		return -1, err
	}
	err = unix.Mkdirat(pfd, base, 0o755)
	if pfd != u.root {
		unix.Close(pfd)
	}
	if err != nil && err != unix.EEXIST {
		return -1, &os.PathError{Op: "mkdirat", Path: dir, Err: err}
	}
	return u.open(dir, unix.O_PATH|unix.O_DIRECTORY)
}

// whiteout applies whiteout file base of directory dir.
func (u *unpacker) whiteout(dir, base string, written map[string]bool) error {
	if base == whiteoutOpaque {
		fd, err := u.open(dir, unix.O_RDONLY|unix.O_DIRECTORY)
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		if err != nil {
			return err
		}
		f := os.NewFile(uintptr(fd), dir)
		defer f.Close()
		names, err := f.Readdirnames(-1)
		if err != nil {
			return err
		}
		for _, n := range names {
			if written[path.Join(dir, n)] {
				continue // added by this layer, above the opaque directory
			}
			if err := removeAt(fd, n); err != nil {
				return err
			}
		}
		return nil
	}
	target := strings.TrimPrefix(base, whiteoutPrefix)
	if target == "" || target == "." || target == ".." || strings.Contains(target, "/") {
		return fmt.Errorf("%w: whiteout %q", ErrUnsafePath, base)
	}
	pfd, err := u.open(dir, unix.O_PATH|unix.O_DIRECTORY)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return err
	}
	defer closeUnlessRoot(u, pfd)
	return removeAt(pfd, target)
}

func closeUnlessRoot(u *unpacker, fd int) {
	if fd != u.root {
		unix.Close(fd)
	}
}

// entry creates hdr as base in directory pfd.
func (u *unpacker) entry(pfd int, base string, hdr *tar.Header, tr io.Reader) error {
	mode := uint32(hdr.FileInfo().Mode().Perm())
	if hdr.Mode&04000 != 0 {
		mode |= unix.S_ISUID
	}
	if hdr.Mode&02000 != 0 {
		mode |= unix.S_ISGID
	}
	if hdr.Mode&01000 != 0 {
		mode |= unix.S_ISVTX
	}

	switch hdr.Typeflag {
	case tar.TypeDir:
		var st unix.Stat_t
		err := unix.Fstatat(pfd, base, &st, unix.AT_SYMLINK_NOFOLLOW)
		if err == nil && st.Mode&unix.S_IFMT != unix.S_IFDIR {
			if err := removeAt(pfd, base); err != nil {
				return err
			}
			err = unix.ENOENT
		}
		if err == unix.ENOENT {
			if err := unix.Mkdirat(pfd, base, 0o700); err != nil {
				return err
			}
		} else if err != nil {
			return err
		}
		if err := u.chown(pfd, base, hdr); err != nil {
			return err
		}
		return unix.Fchmodat(pfd, base, mode, 0)

	case tar.TypeReg, tar.TypeRegA:
		if err := removeAt(pfd, base); err != nil {
			return err
		}
		fd, err := unix.Openat(pfd, base, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if err != nil {
			return err
		}
		f := os.NewFile(uintptr(fd), base)
		_, err = io.CopyBuffer(f, tr, u.buf)
		if err == nil && u.privileged {
			err = f.Chown(hdr.Uid, hdr.Gid)
		}
		if err == nil {
			err = unix.Fchmod(fd, mode) // after chown, which clears set-id bits
		}
		if err == nil {
			err = unix.Futimes(fd, []unix.Timeval{unix.NsecToTimeval(hdr.ModTime.UnixNano()), unix.NsecToTimeval(hdr.ModTime.UnixNano())})
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		return err

	case tar.TypeSymlink:
		if err := removeAt(pfd, base); err != nil {
			return err
		}
		if err := unix.Symlinkat(hdr.Linkname, pfd, base); err != nil {
			return err
		}
		if err := u.chown(pfd, base, hdr); err != nil {
			return err
		}
		return u.times(pfd, base, hdr)

	case tar.TypeLink:
		target, err := cleanName(hdr.Linkname)
		if err != nil {
			return err
		}
		tdir, tbase := path.Split(target)
		tdir = strings.TrimSuffix(tdir, "/")
		if tdir == "" {
			tdir = "."
		}
		tfd, err := u.open(tdir, unix.O_PATH|unix.O_DIRECTORY)
		if err != nil {
			return fmt.Errorf("hardlink target %q: %w", hdr.Linkname, err)
		}
		defer closeUnlessRoot(u, tfd)
		if err := removeAt(pfd, base); err != nil {
			return err
		}
		return unix.Linkat(tfd, tbase, pfd, base, 0)

	case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
		kind := uint32(unix.S_IFIFO)
		switch hdr.Typeflag {
		case tar.TypeChar:
			kind = unix.S_IFCHR
		case tar.TypeBlock:
			kind = unix.S_IFBLK
		}
		if kind != unix.S_IFIFO {
			// Device nodes in a layer are never created, privileged or
			// not: an image must not carry the host's disk into a
			// container. A container's devices come from its runtime
			// (container.Security.Devices), as with containerd's
			// rootless unpack, which skips them too.
			return nil
		}
		if err := removeAt(pfd, base); err != nil {
			return err
		}
		if err := unix.Mknodat(pfd, base, kind|mode, int(unix.Mkdev(uint32(hdr.Devmajor), uint32(hdr.Devminor)))); err != nil {
			return err
		}
		if err := u.chown(pfd, base, hdr); err != nil {
			return err
		}
		return unix.Fchmodat(pfd, base, mode, 0)

	default:
		return nil // global PAX headers and types a rootfs does not need
	}
}

func (u *unpacker) chown(pfd int, base string, hdr *tar.Header) error {
	if !u.privileged {
		return nil
	}
	return unix.Fchownat(pfd, base, hdr.Uid, hdr.Gid, unix.AT_SYMLINK_NOFOLLOW)
}

func (u *unpacker) times(pfd int, base string, hdr *tar.Header) error {
	t := unix.NsecToTimespec(hdr.ModTime.UnixNano())
	return unix.UtimesNanoAt(pfd, base, []unix.Timespec{t, t}, unix.AT_SYMLINK_NOFOLLOW)
}

// removeAt removes name in directory dirfd, recursively if it is a
// directory, without following symlinks. A missing name is not an error.
func removeAt(dirfd int, name string) error {
	err := unix.Unlinkat(dirfd, name, 0)
	if err == nil || err == unix.ENOENT {
		return nil
	}
	if err != unix.EISDIR && err != unix.EPERM {
		return &os.PathError{Op: "unlinkat", Path: name, Err: err}
	}
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "openat", Path: name, Err: err}
	}
	f := os.NewFile(uintptr(fd), name)
	names, err := f.Readdirnames(-1)
	if err == nil {
		for _, n := range names {
			if err = removeAt(fd, n); err != nil {
				break
			}
		}
	}
	f.Close()
	if err != nil {
		return err
	}
	if err := unix.Unlinkat(dirfd, name, unix.AT_REMOVEDIR); err != nil && err != unix.ENOENT {
		return &os.PathError{Op: "unlinkat", Path: name, Err: err}
	}
	return nil
}
