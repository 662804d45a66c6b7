package linux_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/podflow/podflow/nodeagent"
	corev1 "github.com/podflow/podflow/proto/corev1"
)

// A pod's securityContext reaches the kernel; runAsNonRoot with a root
// image is refused with kubelet's reason and message.
func TestSecurityContextOnTheKernel(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, 60*time.Second)
	uid, gid := int64(1000), int64(2000)
	pd := newPod(e.cfg.NodeName, "restricted", "sleep", "3600")
	pd.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsNonRoot: new(true), RunAsUser: &uid, RunAsGroup: &gid,
		SeccompProfile: &corev1.SeccompProfile{Type: "RuntimeDefault"}}
	c := pd.Spec.Containers[0]
	c.SecurityContext = &corev1.SecurityContext{AllowPrivilegeEscalation: new(false), Capabilities: &corev1.Capabilities{Drop: []string{"ALL"}}}
	_, id := e.startPod(t, ctx, pd)
	res := nodeagent.ProbeResult{Message: e.execProbe(t, ctx, pd, id, "grep", "-E", "^(Uid|Gid|CapBnd|NoNewPrivs|Seccomp):", "/proc/1/status")}
	for _, want := range []string{"Uid:\t1000\t1000", "Gid:\t2000\t2000", "CapBnd:\t0000000000000000", "NoNewPrivs:\t1", "Seccomp:\t2"} {
		if !strings.Contains(res.Message, want) {
			t.Errorf("container status lacks %q:\n%s", want, res.Message)
		}
	}
	// The probe itself runs as the container does (runc exec), not as the agent.
	res.Message = e.execProbe(t, ctx, pd, id, "grep", "-E", "^(Uid|CapEff|NoNewPrivs|Seccomp):", "/proc/self/status")
	for _, want := range []string{"Uid:\t1000\t1000", "CapEff:\t0000000000000000", "NoNewPrivs:\t1", "Seccomp:\t2"} {
		if !strings.Contains(res.Message, want) {
			t.Errorf("exec probe status lacks %q:\n%s", want, res.Message)
		}
	}

	root := newPod(e.cfg.NodeName, "rootimage", "true")
	root.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsNonRoot: new(true)}
	sb2, err := e.rt.RunPodSandbox(ctx, root)
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.rt.StartContainer(ctx, root, root.Spec.Containers[0], sb2)
	want := `container has runAsNonRoot and image will run as root (pod: "rootimage_` + root.Metadata.Namespace + `(` + root.Metadata.Uid + `)", container: ` + root.Spec.Containers[0].Name + `)`
	if !errors.Is(err, nodeagent.ErrCreateContainerConfig) || !strings.Contains(err.Error(), want) {
		t.Fatalf("StartContainer = %v\nwant CreateContainerConfigError: %s", err, want)
	}
}
