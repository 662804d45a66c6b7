package linux_test

import (
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/podflow/podflow/nodeagent"
	corev1 "github.com/podflow/podflow/proto/corev1"
)

// A projected volume is a tmpfs in kubelet's atomic-writer layout holding
// every source's files with the modes the agent resolved; busybox reads
// them, and a refresh (a changed Secret) swaps ..data under the running
// container.
func TestProjectedVolumeInContainer(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, 60*time.Second)
	vol := &corev1.Volume{Name: "all", Projected: &corev1.ProjectedVolumeSource{Sources: []*corev1.VolumeProjection{
		{ConfigMap: &corev1.ConfigMapProjection{Name: "app"}},
		{Secret: &corev1.SecretProjection{Name: "creds"}},
	}}}
	pd := newPod(e.cfg.NodeName, "projected", "sleep", "3600")
	pd.Spec.Volumes = []*corev1.Volume{vol}
	pd.Spec.Containers[0].VolumeMounts = []*corev1.VolumeMount{{Name: "all", MountPath: "/etc/all", ReadOnly: true}}
	sb, err := e.rt.RunPodSandbox(ctx, pd)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := e.rt.RemovePodSandbox(ctx, pd.Metadata.Uid); err != nil {
			t.Error(err)
		}
	}()
	vd := nodeagent.VolumeData{Volume: vol,
		Files: map[string][]byte{"greeting": []byte("hello"), "creds/pass": []byte("one")},
		Modes: map[string]uint32{"greeting": 0o644, "creds/pass": 0o400}}
	if err := e.rt.MountVolumes(ctx, pd, []nodeagent.VolumeData{vd}); err != nil {
		t.Fatal(err)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(filepath.Join(e.cfg.DataDir, "pods", pd.Metadata.Uid, "volumes", "all"), &st); err != nil {
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
	if out := e.execProbe(t, ctx, pd, id, "cat", "/etc/all/greeting", "/etc/all/creds/pass"); out != "helloone" {
		t.Errorf("files read %q, want helloone", out)
	}
	if out := e.execProbe(t, ctx, pd, id, "stat", "-L", "-c", "%a", "/etc/all/greeting", "/etc/all/creds/pass"); out != "644\n400" {
		t.Errorf("modes %q, want 644 and 400 (the agent's)", out)
	}
	if out := e.execProbe(t, ctx, pd, id, "readlink", "/etc/all/creds"); out != "..data/creds" {
		t.Errorf("/etc/all/creds links to %q, want ..data/creds", out)
	}
	vd.Files["creds/pass"] = []byte("two")
	if err := e.rt.MountVolumes(ctx, pd, []nodeagent.VolumeData{vd}); err != nil {
		t.Fatal(err)
	}
	if out := e.execProbe(t, ctx, pd, id, "cat", "/etc/all/creds/pass"); out != "two" {
		t.Errorf("/etc/all/creds/pass after the update = %q, want two", out)
	}
}
