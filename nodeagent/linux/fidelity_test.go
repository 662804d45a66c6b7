package linux_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "github.com/podflow/podflow/proto/corev1"
	eventsv1 "github.com/podflow/podflow/proto/eventsv1"
)

// One pod on the kernel through the agent, proving from inside what the
// kubelet core resolves and orders: its environment from a ConfigMap, a
// Secret and the downward API ($(VAR) expanded), a sidecar running before
// the app, the postStart hook run in the container, and the preStop hook
// run before SIGTERM.
func TestEnvSidecarAndHooksOnTheKernel(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a, store, pub := runAgent(t, e)
	out := t.TempDir()
	store.PutConfigMap(&corev1.ConfigMap{Metadata: &corev1.ObjectMeta{Name: "cfg", Namespace: "default"},
		Data: map[string]string{"level": "debug", "mode": "fast"}})
	store.PutSecret(&corev1.Secret{Metadata: &corev1.ObjectMeta{Name: "creds", Namespace: "default"},
		Data: map[string][]byte{"password": []byte("s3cret")}})
	pd := newPod(e.cfg.NodeName, "fidelity", "sh", "-c", `test -f /out/side && echo sidecar-first
while [ ! -f /tmp/poststart ]; do sleep 0.1; done
echo "poststart=$(cat /tmp/poststart)"
echo "GREETING=$GREETING PASSWORD=$PASSWORD CFG_mode=$CFG_mode POD_IP=$POD_IP"
trap 'test -f /out/prestop && echo term-after-prestop > /out/term; exit 0' TERM
while true; do sleep 0.1; done`)
	mount := []*corev1.VolumeMount{{Name: "out", MountPath: "/out"}}
	pd.Spec.Volumes = []*corev1.Volume{{Name: "out", HostPath: &corev1.HostPathVolumeSource{Path: out, Type: "Directory"}}}
	pd.Spec.InitContainers = []*corev1.Container{{Name: "side", Image: busyboxImage, ImagePullPolicy: "IfNotPresent",
		RestartPolicy: "Always", VolumeMounts: mount, Command: []string{"sh", "-c", "echo up > /out/side; exec sleep 3600"}}}
	c := pd.Spec.Containers[0]
	c.VolumeMounts = mount
	c.EnvFrom = []*corev1.EnvFromSource{{Prefix: "CFG_", ConfigMapRef: &corev1.ConfigMapEnvSource{Name: "cfg"}}}
	c.Env = []*corev1.EnvVar{
		{Name: "LEVEL", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.KeySelector{Name: "cfg", Key: "level"}}},
		{Name: "PASSWORD", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.KeySelector{Name: "creds", Key: "password"}}},
		{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}},
		{Name: "GREETING", Value: "level=$(LEVEL)"},
	}
	c.Lifecycle = &corev1.Lifecycle{
		PostStart: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"sh", "-c", "echo hooked > /tmp/poststart"}}},
		PreStop:   &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"touch", "/out/prestop"}}},
	}
	store.PutPod(pd)
	ctx := ctxT(t, 60*time.Second)
	if err := a.HandlePodBound(ctx, pd); err != nil {
		t.Fatal(err)
	}
	uid := pd.Metadata.Uid
	if err := pub.Wait(ctx, func([]*eventsv1.Envelope) bool { return count(pub.Pod(uid), "PodReady") > 0 }); err != nil {
		t.Fatal(err)
	}
	var podIP string
	for _, x := range pub.Pod(uid) {
		if sb := x.GetPodSandboxReady(); sb != nil {
			podIP = sb.GetPodIp()
		}
	}
	logPath := filepath.Join(e.cfg.DataDir, "pods", uid, "logs", "main", "0.log")
	eventually(t, "the app's environment in its log", func() (bool, string) {
		got := readFile(logPath)
		return strings.Contains(got, "GREETING="), got
	})
	log := readFile(logPath)
	for _, want := range []string{
		"stdout F sidecar-first",
		"stdout F poststart=hooked",
		"stdout F GREETING=level=debug PASSWORD=s3cret CFG_mode=fast POD_IP=" + podIP,
	} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %q:\n%s", want, log)
		}
	}
	if err := a.HandlePodDelete(ctx, pd, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := pub.Wait(ctx, func([]*eventsv1.Envelope) bool { return count(pub.Pod(uid), "PodDeleted") > 0 }); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(out, "term")); strings.TrimSpace(string(b)) != "term-after-prestop" {
		t.Errorf("SIGTERM handler wrote %q, want term-after-prestop (preStop ran first)", b)
	}
}
