package linux_test

import (
	"strings"
	"testing"
	"time"

	"github.com/podflow/podflow/nodeagent"
	corev1 "github.com/podflow/podflow/proto/corev1"
	eventsv1 "github.com/podflow/podflow/proto/eventsv1"
)

// Updates reach a running busybox container through the same mounts, as
// in Kubernetes: a ConfigMap changed in the store shows up in its
// configMap volume within a SyncPeriod (kubelet's ..data layout, the
// files swapped all at once), new pod labels handed to the agent show up
// in its downwardAPI volume; a subPath mount of the ConfigMap keeps the
// content it was started with (kubelet's documented behaviour).
func TestVolumeUpdatesReachRunningContainer(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a, store, pub := runAgent(t, e)
	ctx := ctxT(t, 60*time.Second)
	cm := func(greeting string) *corev1.ConfigMap {
		return &corev1.ConfigMap{Metadata: &corev1.ObjectMeta{Name: "cfg", Namespace: "default"},
			Data: map[string]string{"greeting": greeting, "lang": "en"}}
	}
	store.PutConfigMap(cm("hello"))
	pd := newPod(e.cfg.NodeName, "propagate", "sleep", "3600")
	pd.Metadata.Labels = map[string]string{"app": "web"}
	pd.Spec.Volumes = []*corev1.Volume{
		{Name: "cfg", ConfigMap: &corev1.ConfigMapVolumeSource{Name: "cfg"}},
		{Name: "podinfo", DownwardApi: &corev1.DownwardAPIVolumeSource{Items: []*corev1.DownwardAPIVolumeFile{
			{Path: "labels", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels"}}}}},
	}
	pd.Spec.Containers[0].VolumeMounts = []*corev1.VolumeMount{
		{Name: "cfg", MountPath: "/etc/cfg", ReadOnly: true},
		{Name: "cfg", MountPath: "/etc/greeting", SubPath: "greeting", ReadOnly: true},
		{Name: "podinfo", MountPath: "/etc/podinfo", ReadOnly: true},
	}
	store.PutPod(pd)
	if err := a.HandlePodBound(ctx, pd); err != nil {
		t.Fatal(err)
	}
	var id nodeagent.ContainerID
	if err := pub.Wait(ctx, func([]*eventsv1.Envelope) bool {
		for _, env := range pub.Pod(pd.Metadata.Uid) {
			if s := env.GetContainerStarted(); s != nil {
				id = nodeagent.ContainerID(s.GetContainerId())
			}
		}
		return id != ""
	}); err != nil {
		t.Fatal(err)
	}
	// cat reads what the container sees; like execProbe it gets the time
	// it needs on a loaded machine, not a probe's default one second.
	cat := func(path string) (string, error) {
		res, err := e.rt.Probe(ctx, pd, pd.Spec.Containers[0], id, nodeagent.ProbeLiveness,
			&corev1.Probe{Exec: &corev1.ExecAction{Command: []string{"cat", path}}, TimeoutSeconds: 30})
		if err == nil && !res.OK {
			return "", &probeError{res.Message}
		}
		return res.Message, err
	}
	shows := func(path, want string) {
		t.Helper()
		eventually(t, path+" = "+want, func() (bool, string) {
			got, err := cat(path)
			if err != nil {
				return false, err.Error()
			}
			return got == want, got
		})
	}
	shows("/etc/cfg/greeting", "hello")
	shows("/etc/greeting", "hello")
	shows("/etc/podinfo/labels", `app="web"`)
	if out := e.execProbe(t, ctx, pd, id, "readlink", "/etc/cfg/greeting"); out != "..data/greeting" {
		t.Errorf("/etc/cfg/greeting links to %q, want ..data/greeting (kubelet's atomic-writer layout)", out)
	}

	store.PutConfigMap(cm("bonjour"))
	shows("/etc/cfg/greeting", "bonjour")
	if got, err := cat("/etc/greeting"); err != nil || got != "hello" {
		t.Errorf("subPath /etc/greeting = %q, %v; want the content it started with, hello", got, err)
	}
	if got, err := cat("/etc/cfg/lang"); err != nil || got != "en" {
		t.Errorf("/etc/cfg/lang = %q, %v; want en", got, err)
	}

	pd.Metadata.Labels = map[string]string{"app": "web", "tier": "front"}
	store.PutPod(pd)
	if err := a.HandlePodBound(ctx, pd); err != nil { // the bind, redelivered
		t.Fatal(err)
	}
	shows("/etc/podinfo/labels", "app=\"web\"\ntier=\"front\"")
}

type probeError struct{ msg string }

func (e *probeError) Error() string { return "probe failed: " + strings.TrimSpace(e.msg) }
