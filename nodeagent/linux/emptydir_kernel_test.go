package linux_test

import (
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/podflow/podflow/nodeagent"
	corev1 "github.com/podflow/podflow/proto/corev1"
)

// A memory emptyDir is a tmpfs of the size the agent computed
// (VolumeData.MemorySize), a 0777 directory, as a disk one is; a container cannot write
// past it. A disk emptyDir's usage is what a container wrote, counted as
// du counts it (a hard link once).
func TestEmptyDirSizeAndUsage(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, 60*time.Second)
	mem := &corev1.Volume{Name: "scratch", EmptyDir: &corev1.EmptyDirVolumeSource{Medium: "Memory", SizeLimit: "8Mi"}}
	disk := &corev1.Volume{Name: "cache", EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: "1Mi"}}
	pd := newPod(e.cfg.NodeName, "emptydir", "sleep", "3600")
	pd.Spec.Volumes = []*corev1.Volume{mem, disk}
	pd.Spec.Containers[0].VolumeMounts = []*corev1.VolumeMount{{Name: "scratch", MountPath: "/scratch"}, {Name: "cache", MountPath: "/cache"}}
	sb, err := e.rt.RunPodSandbox(ctx, pd)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := e.rt.RemovePodSandbox(ctx, pd.Metadata.Uid); err != nil {
			t.Error(err)
		}
	}()
	const size = 8 << 20
	if err := e.rt.MountVolumes(ctx, pd, []nodeagent.VolumeData{{Volume: mem, MemorySize: size}, {Volume: disk}}); err != nil {
		t.Fatal(err)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(filepath.Join(e.cfg.DataDir, "pods", pd.Metadata.Uid, "volumes", "scratch"), &st); err != nil {
		t.Fatal(err)
	}
	if st.Type != unix.TMPFS_MAGIC || int64(st.Blocks)*st.Bsize != size {
		t.Errorf("scratch: filesystem %#x of %d bytes, want a tmpfs of %d", st.Type, int64(st.Blocks)*st.Bsize, size)
	}
	if _, err := e.rt.PullImage(ctx, pd, busyboxImage, "IfNotPresent"); err != nil {
		t.Fatal(err)
	}
	id, err := e.rt.StartContainer(ctx, pd, pd.Spec.Containers[0], sb)
	if err != nil {
		t.Fatalf("StartContainer: %v", err)
	}
	if out := e.execProbe(t, ctx, pd, id, "stat", "-c", "%a", "/scratch"); out != "777" {
		t.Errorf("/scratch mode %q, want 777", out)
	}
	if out := e.execProbe(t, ctx, pd, id, "stat", "-c", "%a", "/cache"); out != "777" {
		t.Errorf("/cache mode %q, want 777 (kubelet's setupDir, past the umask)", out)
	}
	if out := e.execProbe(t, ctx, pd, id, "sh", "-c", "dd if=/dev/zero of=/scratch/big bs=1M count=9 >/dev/null 2>&1; echo $?"); out != "1" {
		t.Errorf("writing 9 MiB into an 8 MiB tmpfs: dd exit %q, want 1 (no space)", out)
	}
	e.execProbe(t, ctx, pd, id, "sh", "-c", "dd if=/dev/zero of=/cache/f bs=1M count=3 && ln /cache/f /cache/g && sync")
	used, err := e.rt.VolumeUsage(ctx, pd, "cache")
	if err != nil {
		t.Fatal(err)
	}
	if used < 3<<20 || used > 3<<20+64<<10 {
		t.Errorf("cache usage %d bytes, want 3 MiB (the hard link counted once) plus the directory", used)
	}
	if _, err := e.rt.VolumeUsage(ctx, pd, "../x"); err == nil {
		t.Error("usage of volume ../x: no error")
	}
}
