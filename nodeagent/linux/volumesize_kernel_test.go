package linux_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/podflow/podflow/nodeagent"
	corev1 "github.com/podflow/podflow/proto/corev1"
)

// The tmpfs under a secret, downwardAPI or projected volume has the size
// the agent computed (VolumeData.MemorySize, kubelet's sizing of the
// memory emptyDir it wraps them in), not a fixed one. A secret's files
// take the stored defaultMode (admission stores Kubernetes' 0644); a
// secret stored before admission did (no defaultMode) keeps 0400.
func TestFileVolumeTmpfsSizeAndModes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, 60*time.Second)
	mode := func(m int32) *int32 { return &m }
	sec := &corev1.Volume{Name: "sec", Secret: &corev1.SecretVolumeSource{SecretName: "s", DefaultMode: mode(0o644)}}
	old := &corev1.Volume{Name: "old", Secret: &corev1.SecretVolumeSource{SecretName: "s"}}
	dapi := &corev1.Volume{Name: "dapi", DownwardApi: &corev1.DownwardAPIVolumeSource{DefaultMode: mode(0o644)}}
	proj := &corev1.Volume{Name: "proj", Projected: &corev1.ProjectedVolumeSource{DefaultMode: mode(0o644)}}
	pd := newPod(e.cfg.NodeName, "volsize", "sleep", "3600")
	pd.Spec.Volumes = []*corev1.Volume{sec, old, dapi, proj}
	if _, err := e.rt.RunPodSandbox(ctx, pd); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := e.rt.RemovePodSandbox(ctx, pd.Metadata.Uid); err != nil {
			t.Error(err)
		}
	}()
	files := func() map[string][]byte { return map[string][]byte{"key": []byte("v")} }
	sizes := map[string]int64{"sec": 3 << 20, "old": 5 << 20, "dapi": 6 << 20, "proj": 7 << 20}
	var vds []nodeagent.VolumeData
	for _, v := range pd.Spec.Volumes {
		vd := nodeagent.VolumeData{Volume: v, Files: files(), MemorySize: sizes[v.Name]}
		if v.Projected != nil {
			vd.Modes = map[string]uint32{"key": 0o644}
		}
		vds = append(vds, vd)
	}
	if err := e.rt.MountVolumes(ctx, pd, vds); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(e.cfg.DataDir, "pods", pd.Metadata.Uid, "volumes")
	for name, size := range sizes {
		var st unix.Statfs_t
		if err := unix.Statfs(filepath.Join(dir, name), &st); err != nil {
			t.Fatal(err)
		}
		if st.Type != unix.TMPFS_MAGIC || int64(st.Blocks)*st.Bsize != size {
			t.Errorf("%s: filesystem %#x of %d bytes, want a tmpfs of %d", name, st.Type, int64(st.Blocks)*st.Bsize, size)
		}
	}
	for name, want := range map[string]os.FileMode{"sec": 0o644, "old": 0o400, "dapi": 0o644, "proj": 0o644} {
		fi, err := os.Stat(filepath.Join(dir, name, "key"))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != want {
			t.Errorf("%s/key mode %#o, want %#o", name, fi.Mode().Perm(), want)
		}
	}
}
