package linux_test

import (
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/podflow/podflow/nodeagent"
	corev1 "github.com/podflow/podflow/proto/corev1"
)

// TestFSGroupOwnsVolumes: with runAsUser 1000, fsGroup 1001 and
// defaultMode 0440, the files of secret, configMap, downwardAPI and
// projected volumes are group 1001 and readable by the container (kubelet's
// SetVolumeOwnership: the group, group read; setgid directories), an
// emptyDir is group 1001, setgid, group-writable, so what the container
// makes there is group 1001 too; a hostPath volume is left alone.
func TestFSGroupOwnsVolumes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a, store, _ := runAgent(t, e)
	ctx := ctxT(t, 40*time.Second)
	host := t.TempDir()
	if err := os.WriteFile(host+"/h", []byte("host\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	store.PutSecret(&corev1.Secret{Metadata: &corev1.ObjectMeta{Name: "s", Namespace: "default"}, Data: map[string][]byte{"data-1": []byte("value-1\n")}})
	store.PutConfigMap(&corev1.ConfigMap{Metadata: &corev1.ObjectMeta{Name: "cm", Namespace: "default"}, Data: map[string]string{"data-1": "value-1\n"}})
	mode := int32(0o440)
	pd := newPod(e.cfg.NodeName, "fsgroup", "sh", "-c", `
for f in /s/data-1 /cm/data-1 /d/name /p/data-1; do echo "$f $(stat -L -c '%u %g %a' $f) $(cat $f | head -c 7)"; done
echo "/e $(stat -c '%g %a' /e)"; touch /e/new; echo "/e/new $(stat -c '%g' /e/new)"
echo "/h $(stat -c '%g %a' /h/h)"; id -G`)
	pd.Spec.RestartPolicy = "Never"
	pd.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsUser: ptrInt64(1000), FsGroup: ptrInt64(1001)}
	pd.Spec.Volumes = []*corev1.Volume{
		{Name: "s", Secret: &corev1.SecretVolumeSource{SecretName: "s", DefaultMode: &mode}},
		{Name: "cm", ConfigMap: &corev1.ConfigMapVolumeSource{Name: "cm", DefaultMode: &mode}},
		{Name: "d", DownwardApi: &corev1.DownwardAPIVolumeSource{DefaultMode: &mode, Items: []*corev1.DownwardAPIVolumeFile{
			{Path: "name", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}}},
		{Name: "p", Projected: &corev1.ProjectedVolumeSource{DefaultMode: &mode, Sources: []*corev1.VolumeProjection{
			{Secret: &corev1.SecretProjection{Name: "s"}}}}},
		{Name: "e", EmptyDir: &corev1.EmptyDirVolumeSource{}},
		{Name: "h", HostPath: &corev1.HostPathVolumeSource{Path: host}},
	}
	for _, v := range pd.Spec.Volumes {
		pd.Spec.Containers[0].VolumeMounts = append(pd.Spec.Containers[0].VolumeMounts, &corev1.VolumeMount{Name: v.Name, MountPath: "/" + v.Name})
	}
	store.PutPod(pd)
	if err := a.HandlePodBound(ctx, pd); err != nil {
		t.Fatal(err)
	}
	waitPhase(t, a, pd.Metadata.Uid, "Succeeded")
	out, err := readAll(a, nodeagent.LogRequest{Namespace: "default", Pod: "fsgroup", Container: "main"})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"/s/data-1 0 1001 440 value-1", "/cm/data-1 0 1001 440 value-1", "/d/name 0 1001 440 fsgroup", "/p/data-1 0 1001 440 value-1",
		"/e 1001 2777", "/e/new 1001", "/h 0 600",
	} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("want %q in the container's view:\n%s", want, out)
		}
	}
	var st syscall.Stat_t
	if err := syscall.Stat(host+"/h", &st); err != nil || st.Gid != 0 || st.Mode&0o777 != 0o600 {
		t.Errorf("the hostPath file: gid %d mode %o, %v; want untouched", st.Gid, st.Mode&0o777, err)
	}
}

func ptrInt64(v int64) *int64 { return &v }
