package linux_test

import (
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/podflow/podflow/nodeagent"
	corev1 "github.com/podflow/podflow/proto/corev1"
)

// A downwardAPI volume is a tmpfs in kubelet's atomic-writer layout; a
// container reads /etc/podinfo/labels with the item's mode, and a second
// MountVolumes with new labels (the refresh) is seen by the running
// container through the same mount, ..data swapped under it.
func TestDownwardAPIVolumeInContainer(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, 60*time.Second)
	mode := int32(0o640)
	vol := &corev1.Volume{Name: "podinfo", DownwardApi: &corev1.DownwardAPIVolumeSource{Items: []*corev1.DownwardAPIVolumeFile{
		{Path: "labels", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels"}, Mode: &mode},
		{Path: "name", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}},
	}}}
	pd := newPod(e.cfg.NodeName, "downward", "sleep", "3600")
	pd.Spec.Volumes = []*corev1.Volume{vol}
	pd.Spec.Containers[0].VolumeMounts = []*corev1.VolumeMount{{Name: "podinfo", MountPath: "/etc/podinfo", ReadOnly: true}}
	sb, err := e.rt.RunPodSandbox(ctx, pd)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := e.rt.RemovePodSandbox(ctx, pd.Metadata.Uid); err != nil {
			t.Error(err)
		}
	}()
	files := map[string][]byte{"labels": []byte(`app="web"`), "name": []byte("downward")}
	if err := e.rt.MountVolumes(ctx, pd, []nodeagent.VolumeData{{Volume: vol, Files: files}}); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(e.cfg.DataDir, "pods", pd.Metadata.Uid, "volumes", "podinfo")
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	if st.Type != unix.TMPFS_MAGIC {
		t.Errorf("volume filesystem %#x, want tmpfs", st.Type)
	}
	if _, err := e.rt.PullImage(ctx, pd, busyboxImage, "IfNotPresent"); err != nil {
		t.Fatal(err)
	}
	id, err := e.rt.StartContainer(ctx, pd, pd.Spec.Containers[0], sb)
	if err != nil {
		t.Fatalf("StartContainer: %v", err)
	}
	if out := e.execProbe(t, ctx, pd, id, "cat", "/etc/podinfo/labels"); out != `app="web"` {
		t.Errorf("/etc/podinfo/labels = %q, want app=\"web\"", out)
	}
	if out := e.execProbe(t, ctx, pd, id, "stat", "-L", "-c", "%a", "/etc/podinfo/labels", "/etc/podinfo/name"); out != "640\n644" {
		t.Errorf("modes %q, want 640 (the item's) and 644 (the default)", out)
	}
	if out := e.execProbe(t, ctx, pd, id, "readlink", "/etc/podinfo/labels"); out != "..data/labels" {
		t.Errorf("/etc/podinfo/labels links to %q, want ..data/labels", out)
	}

	files["labels"] = []byte("app=\"web\"\ntier=\"front\"")
	if err := e.rt.MountVolumes(ctx, pd, []nodeagent.VolumeData{{Volume: vol, Files: files}}); err != nil {
		t.Fatal(err)
	}
	if out := e.execProbe(t, ctx, pd, id, "cat", "/etc/podinfo/labels"); out != "app=\"web\"\ntier=\"front\"" {
		t.Errorf("/etc/podinfo/labels after the update = %q", out)
	}
}
