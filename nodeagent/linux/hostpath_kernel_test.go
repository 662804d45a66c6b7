package linux_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/podflow/podflow/nodeagent"
	"github.com/podflow/podflow/nodeagent/linux"
	corev1 "github.com/podflow/podflow/proto/corev1"
)

// TestHostPathReadOnlyAllowed: a hostPath file the node allows read-only
// ("<file>:ro", as the conformance harness allows the host's /etc/hosts)
// is mounted read-only though the volumeMount asks for read-write: the
// container reads it, its write fails, the host's file is unchanged.
func TestHostPathReadOnlyAllowed(t *testing.T) {
	t.Parallel()
	host := filepath.Join(t.TempDir(), "hosts")
	if err := os.WriteFile(host, []byte("127.0.0.1 pf-host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	e := newEnvWith(t, func(c *linux.Config) { c.HostPathPrefixes = []string{host + linux.HostPathReadOnlySuffix} })
	a, store, _ := runAgent(t, e)
	ctx := ctxT(t, 40*time.Second)
	pd := newPod(e.cfg.NodeName, "hostro", "sh", "-c", `cat /etc/hosts-original; echo x >> /etc/hosts-original 2>&1 || echo refused`)
	pd.Spec.RestartPolicy = "Never"
	pd.Spec.Volumes = []*corev1.Volume{{Name: "h", HostPath: &corev1.HostPathVolumeSource{Path: host, Type: "FileOrCreate"}}}
	pd.Spec.Containers[0].VolumeMounts = []*corev1.VolumeMount{{Name: "h", MountPath: "/etc/hosts-original"}}
	store.PutPod(pd)
	if err := a.HandlePodBound(ctx, pd); err != nil {
		t.Fatal(err)
	}
	waitPhase(t, a, pd.Metadata.Uid, "Succeeded")
	out, err := readAll(a, nodeagent.LogRequest{Namespace: "default", Pod: "hostro", Container: "main"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "127.0.0.1 pf-host\n") || !strings.Contains(out, "Read-only file system") || !strings.Contains(out, "refused\n") {
		t.Errorf("the container's view:\n%s\nwant the host's file, read-only", out)
	}
	if b, _ := os.ReadFile(host); string(b) != "127.0.0.1 pf-host\n" {
		t.Errorf("the host's file is now %q", b)
	}
}
