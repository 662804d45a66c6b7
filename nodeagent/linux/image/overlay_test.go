package image_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/podflow/podflow/nodeagent/linux/image"
	"github.com/podflow/podflow/nodeagent/linux/image/imagebuild"
	"github.com/podflow/podflow/nodeagent/linux/image/imagetest"
)

func needOverlay(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: overlay mounts need CAP_SYS_ADMIN")
	}
	b, _ := os.ReadFile("/proc/filesystems")
	if !strings.Contains(string(b), "\toverlay\n") {
		t.Skip("needs overlayfs: not in /proc/filesystems (modprobe overlay)")
	}
}

// mountsAt counts the mounts whose mount point is dest.
func mountsAt(t testing.TB, dest string) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && f[4] == dest {
			n++
		}
	}
	return n
}

func TestMountRootfs(t *testing.T) {
	needOverlay(t)
	ctx := context.Background()
	reg := imagetest.NewRegistry(t)
	img := mustImage(t, v1.Config{},
		[]imagebuild.Entry{imagebuild.Dir("etc", 0o755), imagebuild.File("etc/a", 0o644, []byte("a")), imagebuild.File("etc/gone", 0o644, nil)},
		[]imagebuild.Entry{imagebuild.Whiteout("etc/gone"), imagebuild.File("etc/b", 0o644, []byte("b"))})
	reg.Push(t, "library/ovl:1", img)
	s := newStore(t, t.TempDir(), reg.Addr)
	if _, err := s.Pull(ctx, "ovl:1", ""); err != nil {
		t.Fatal(err)
	}
	parent := t.TempDir()
	dests := []string{filepath.Join(parent, "c1", "rootfs"), filepath.Join(parent, "c2", "rootfs")}
	for _, d := range dests {
		t.Cleanup(func() { image.UnmountRootfs(d) })
	}
	// Two containers of one image at once: one snapshot, two mounts.
	var wg sync.WaitGroup
	errs := make([]error, len(dests))
	for i, d := range dests {
		wg.Go(func() { errs[i] = s.MountRootfs(ctx, "ovl:1", d) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	snap, err := s.Snapshot(ctx, "ovl:1")
	if err != nil {
		t.Fatal(err)
	}
	c1, c2 := dests[0], dests[1]
	if b, _ := os.ReadFile(filepath.Join(c1, "etc/b")); string(b) != "b" {
		t.Fatalf("etc/b = %q", b)
	}
	if _, err := os.Stat(filepath.Join(c1, "etc/gone")); err == nil {
		t.Fatal("etc/gone survived its whiteout")
	}
	// Writes go to the container's upper layer only.
	if err := os.WriteFile(filepath.Join(c1, "etc/a"), []byte("changed"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(c2, "etc/a")); string(b) != "a" {
		t.Fatalf("c2 sees c1's write: %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(snap, "etc/a")); string(b) != "a" {
		t.Fatalf("the snapshot was written: %q", b)
	}
	// Idempotent: mounting again (an agent restart) adds no mount.
	if err := s.MountRootfs(ctx, "ovl:1", c1); err != nil {
		t.Fatal(err)
	}
	if n := mountsAt(t, c1); n != 1 {
		t.Fatalf("%d mounts at %s, want 1", n, c1)
	}
	if b, _ := os.ReadFile(filepath.Join(c1, "etc/a")); string(b) != "changed" {
		t.Fatalf("remount lost the container's writes: %q", b)
	}
	for _, d := range dests {
		if err := image.UnmountRootfs(d); err != nil {
			t.Fatal(err)
		}
		if err := image.UnmountRootfs(d); err != nil {
			t.Fatalf("second UnmountRootfs: %v", err)
		}
		if n := mountsAt(t, d); n != 0 {
			t.Fatalf("%d mounts left at %s", n, d)
		}
		for _, p := range []string{d, d + ".rw"} {
			if _, err := os.Lstat(p); err == nil {
				t.Fatalf("%s left behind", p)
			}
		}
	}
	if err := s.MountRootfs(ctx, "absent:1", filepath.Join(parent, "c3", "rootfs")); !errors.Is(err, image.ErrRootfs) || !errors.Is(err, image.ErrNotPresent) {
		t.Fatalf("MountRootfs of an absent image: %v", err)
	}
}

// BenchmarkMountRootfs measures the per-container cost with overlay: mount
// (on the pod start path) and unmount (on delete) of a busybox root
// filesystem whose snapshot exists. Compare BenchmarkRootfs/busybox.
func BenchmarkMountRootfs(b *testing.B) {
	needOverlay(b)
	if _, err := os.Stat("/bin/busybox"); err != nil {
		b.Skip("needs /bin/busybox (Debian's busybox-static)")
	}
	ctx := context.Background()
	reg := imagetest.NewRegistry(b)
	img, err := imagebuild.Busybox(ctx, "/bin/busybox")
	if err != nil {
		b.Fatal(err)
	}
	reg.Push(b, "bench/busybox:1", img)
	s, err := image.NewStore(image.Config{Dir: b.TempDir(), Mirror: reg.Addr, Parallelism: 4})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Pull(ctx, "bench/busybox:1", ""); err != nil {
		b.Fatal(err)
	}
	if _, err := s.Snapshot(ctx, "bench/busybox:1"); err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	dest := filepath.Join(dir, "rootfs")
	b.Cleanup(func() { image.UnmountRootfs(dest) })
	b.Run("mount", func(b *testing.B) {
		for range b.N {
			if err := s.MountRootfs(ctx, "bench/busybox:1", dest); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			if err := image.UnmountRootfs(dest); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
	})
	b.Run("unmount", func(b *testing.B) {
		for range b.N {
			b.StopTimer()
			if err := s.MountRootfs(ctx, "bench/busybox:1", dest); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
			if err := image.UnmountRootfs(dest); err != nil {
				b.Fatal(err)
			}
		}
	})
}
