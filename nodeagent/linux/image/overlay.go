package image

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"golang.org/x/sys/unix"
)

// overlaySource is the source of every overlay mount MountRootfs makes, so
// /proc/mounts shows whose they are.
const overlaySource = "podflow-rootfs"

// Snapshot returns the directory holding the flattened root filesystem of
// ref (a reference or an image ID, already pulled), unpacking it on first
// use into Dir/snapshots/<manifest hex>. The directory is shared by every
// container of the image and must not be written to: MountRootfs uses it as
// an overlay's read-only lower layer. Concurrent calls for one image unpack
// once. Failures are ErrRootfs.
func (s *Store) Snapshot(ctx context.Context, ref string) (string, error) {
	dir, err := s.snapshot(ctx, ref)
	if err != nil {
		return "", classify(ErrRootfs, "snapshot of %q: %w", ref, err)
	}
	return dir, nil
}

func (s *Store) snapshot(ctx context.Context, ref string) (string, error) {
	rec, err := s.find(ref)
	if err != nil {
		return "", err
	}
	h, err := v1.NewHash(rec.Manifest)
	if err != nil {
		return "", err
	}
	dir := filepath.Join(s.cfg.Dir, "snapshots", h.Hex)
	if _, err := os.Stat(dir); err == nil {
		return dir, nil
	}
	_, _, err = s.snapshots.do(ctx, h.Hex, func(ctx context.Context) (struct{}, error) {
		if _, err := os.Stat(dir); err == nil {
			return struct{}{}, nil
		}
		// Unpack beside, then rename: a snapshot directory is complete.
		tmp, err := os.MkdirTemp(filepath.Join(s.cfg.Dir, "tmp"), "snapshot-")
		if err != nil {
			return struct{}{}, err
		}
		defer os.RemoveAll(tmp)
		root := filepath.Join(tmp, "rootfs")
		if err := s.unpack(ctx, rec, root); err != nil {
			return struct{}{}, err
		}
		if err := os.MkdirAll(filepath.Dir(dir), 0o700); err != nil {
			return struct{}{}, err
		}
		return struct{}{}, os.Rename(root, dir)
	})
	if err != nil {
		return "", err
	}
	return dir, nil
}

// MountRootfs gives a container a writable root filesystem of ref at dest
// without copying: an overlay mount (source "podflow-rootfs") whose lower
// layer is the image's Snapshot and whose upper and work directories live
// in dest+".rw". It is idempotent: if dest already is an overlay mount it
// returns nil, so an agent that restarts finds its containers' root
// filesystems as they were. The caller owns the mount and removes it with
// UnmountRootfs. Needs CAP_SYS_ADMIN. Failures are
// ErrRootfs.
func (s *Store) MountRootfs(ctx context.Context, ref, dest string) error {
	if err := s.mountRootfs(ctx, ref, dest); err != nil {
		return classify(ErrRootfs, "mount rootfs of %q at %q: %w", ref, dest, err)
	}
	return nil
}

func (s *Store) mountRootfs(ctx context.Context, ref, dest string) error {
	dest = filepath.Clean(dest)
	if !filepath.IsAbs(dest) {
		return fmt.Errorf("dest %q is not absolute", dest)
	}
	if mounted, err := isOverlayMount(dest); err != nil {
		return err
	} else if mounted {
		return nil
	}
	lower, err := s.snapshot(ctx, ref)
	if err != nil {
		return err
	}
	rw := dest + ".rw"
	upper, work := filepath.Join(rw, "upper"), filepath.Join(rw, "work")
	for _, d := range []string{dest, upper, work} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	for _, p := range []string{lower, upper, work} {
		if strings.ContainsAny(p, ",:\\") {
			return fmt.Errorf("path %q holds a character overlayfs options cannot carry", p)
		}
	}
	opts := "lowerdir=" + lower + ",upperdir=" + upper + ",workdir=" + work
	if err := unix.Mount(overlaySource, dest, "overlay", 0, opts); err != nil {
		return &os.PathError{Op: "mount overlay", Path: dest, Err: err}
	}
	return nil
}

// UnmountRootfs removes what MountRootfs made at dest: it detaches the
// overlay mount (lazily, should a process still hold it) and deletes dest
// and dest+".rw". It also removes a plain Rootfs unpack at dest and its
// marker. Idempotent: nothing at dest is success.
func UnmountRootfs(dest string) error {
	dest = filepath.Clean(dest)
	mounted, err := isOverlayMount(dest)
	if err != nil {
		return err
	}
	if mounted {
		if err := unix.Unmount(dest, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW); err != nil && err != unix.EINVAL && err != unix.ENOENT {
			return &os.PathError{Op: "unmount", Path: dest, Err: err}
		}
	}
	var errs []error
	for _, p := range []string{dest, dest + ".rw", filepath.Join(filepath.Dir(dest), "."+filepath.Base(dest)+".image")} {
		if err := os.RemoveAll(p); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// isOverlayMount reports whether dest is the root of an overlay mount.
func isOverlayMount(dest string) (bool, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dest, &st); err != nil {
		if err == unix.ENOENT {
			return false, nil
		}
		return false, &os.PathError{Op: "statfs", Path: dest, Err: err}
	}
	if st.Type != unix.OVERLAYFS_SUPER_MAGIC {
		return false, nil
	}
	// dest is on an overlay: its own mount, or inside a larger one (a node
	// agent running in a container). Only the former is ours.
	var d, p unix.Stat_t
	if err := unix.Lstat(dest, &d); err != nil {
		return false, &os.PathError{Op: "lstat", Path: dest, Err: err}
	}
	if err := unix.Lstat(filepath.Dir(dest), &p); err != nil {
		return false, &os.PathError{Op: "lstat", Path: filepath.Dir(dest), Err: err}
	}
	return d.Dev != p.Dev, nil
}
