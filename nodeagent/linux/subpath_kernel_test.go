package linux_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/podflow/podflow/nodeagent"
	corev1 "github.com/podflow/podflow/proto/corev1"
)

// A subPath that is a symlink out of its volume (to /etc, or up with
// ../..) resolves inside the volume, for emptyDir and hostPath alike: the
// container sees the volume's etc, never the host's.
func TestSubPathSymlinkStaysInTheVolume(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, 60*time.Second)
	hostDir, err := os.MkdirTemp("", "pf-subpath-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(hostDir) })
	for _, vol := range []*corev1.Volume{
		{Name: "scratch", EmptyDir: &corev1.EmptyDirVolumeSource{}},
		{Name: "host", HostPath: &corev1.HostPathVolumeSource{Path: hostDir}},
	} {
		for link, target := range map[string]string{"abs": "/etc", "up": "../../../../../../../../etc"} {
			t.Run(vol.Name+"/"+link, func(t *testing.T) {
				pd := newPod(e.cfg.NodeName, "subpath", "sleep", "3600")
				pd.Spec.Volumes = []*corev1.Volume{vol}
				pd.Spec.Containers[0].VolumeMounts = []*corev1.VolumeMount{{Name: vol.Name, MountPath: "/mnt", SubPath: link}}
				sb, err := e.rt.RunPodSandbox(ctx, pd)
				if err != nil {
					t.Fatal(err)
				}
				defer func() {
					if err := e.rt.RemovePodSandbox(ctx, pd.Metadata.Uid); err != nil {
						t.Error(err)
					}
				}()
				if err := e.rt.MountVolumes(ctx, pd, []nodeagent.VolumeData{{Volume: vol}}); err != nil {
					t.Fatal(err)
				}
				root := hostDir
				if vol.HostPath == nil {
					root = filepath.Join(e.cfg.DataDir, "pods", pd.Metadata.Uid, "volumes", vol.Name)
				}
				// The attacker's volume: a symlink out, and an etc of its own.
				_ = os.Remove(filepath.Join(root, link))
				if err := os.Symlink(target, filepath.Join(root, link)); err != nil {
					t.Fatal(err)
				}
				if err := os.MkdirAll(filepath.Join(root, "etc"), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(root, "etc", "volume-marker"), []byte("in the volume\n"), 0o644); err != nil {
					t.Fatal(err)
				}
				if _, err := e.rt.PullImage(ctx, pd, busyboxImage, "IfNotPresent"); err != nil {
					t.Fatal(err)
				}
				id, err := e.rt.StartContainer(ctx, pd, pd.Spec.Containers[0], sb)
				if err != nil {
					t.Fatalf("StartContainer: %v", err)
				}
				if out := e.execProbe(t, ctx, pd, id, "ls", "/mnt"); out != "volume-marker" {
					t.Fatalf("/mnt holds %q, want only the volume's etc (volume-marker)", out)
				}
			})
		}
	}
}

// TestSubPathExprMount: a subPathExpr is expanded from the container's
// environment by the agent and mounted as that subPath of the volume
// (made when missing): two pods' containers write into their own
// $(POD_NAME) directory of one hostPath volume.
func TestSubPathExprMount(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a, store, _ := runAgent(t, e)
	ctx := ctxT(t, 40*time.Second)
	hostDir, err := os.MkdirTemp("", "pf-subpathexpr-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(hostDir) })
	var uids []string
	for _, name := range []string{"writer-a", "writer-b"} {
		pd := newPod(e.cfg.NodeName, name, "sh", "-c", "echo $POD_NAME > /logs/who")
		pd.Spec.RestartPolicy = "Never"
		pd.Spec.Volumes = []*corev1.Volume{{Name: "logs", HostPath: &corev1.HostPathVolumeSource{Path: hostDir}}}
		c := pd.Spec.Containers[0]
		c.Env = []*corev1.EnvVar{{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}}
		c.VolumeMounts = []*corev1.VolumeMount{{Name: "logs", MountPath: "/logs", SubPathExpr: "pods/$(POD_NAME)"}}
		store.PutPod(pd)
		if err := a.HandlePodBound(ctx, pd); err != nil {
			t.Fatal(err)
		}
		uids = append(uids, pd.Metadata.Uid)
	}
	for i, uid := range uids {
		waitPhase(t, a, uid, "Succeeded")
		name := []string{"writer-a", "writer-b"}[i]
		if got := readFile(filepath.Join(hostDir, "pods", name, "who")); got != name {
			t.Errorf("%s wrote %q into its subPathExpr directory, want its name", name, got)
		}
	}
}
