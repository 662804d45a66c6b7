package nodeagent_test

import (
	"testing"
	"time"

	"github.com/podflow/podflow/nodeagent/nodeagenttest"
	corev1 "github.com/podflow/podflow/proto/corev1"
	"google.golang.org/protobuf/proto"
)

// TestConfigErrorRetriedOnUpdate: a container whose subPathExpr names an
// annotation the pod lacks waits in CreateContainerConfigError; once an
// update adds the annotation it starts at once, not after a crash
// back-off (no instance was ever created), as kubelet syncs a pod on its
// update (conformance: "Variable Expansion should verify that a failing
// subpath expansion can be modified during the lifecycle of a
// container"). The clock never moves: only the update can start it.
func TestConfigErrorRetriedOnUpdate(t *testing.T) {
	clock := nodeagenttest.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	e := fakeClockEnv(t, clock, nil)
	p := newPod("subpath", func(p *corev1.Pod) {
		p.Spec.Volumes = []*corev1.Volume{{Name: "workdir1", EmptyDir: &corev1.EmptyDirVolumeSource{}}}
		c := p.Spec.Containers[0]
		c.Env = []*corev1.EnvVar{{Name: "ANNOTATION", ValueFrom: &corev1.EnvVarSource{
			FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.annotations['mysubpath']"}}}}
		c.VolumeMounts = []*corev1.VolumeMount{{Name: "workdir1", MountPath: "/subpath_mount", SubPathExpr: "$(ANNOTATION)/sub"}}
	})
	p.Metadata.Annotations["notmysubpath"] = "mypath"
	e.bind(p)
	e.waitStatus(p.Metadata.Uid, "CreateContainerConfigError", func(st *corev1.PodStatus) bool {
		cs := st.GetContainerStatuses()
		return len(cs) == 1 && cs[0].GetState().GetWaiting().GetReason() == "CreateContainerConfigError" &&
			cs[0].GetState().GetWaiting().GetMessage() == "missing value for ANNOTATION"
	})
	updated := proto.CloneOf(p)
	updated.Metadata.Annotations["mysubpath"] = "mypath"
	e.bind(updated)
	e.waitStatus(p.Metadata.Uid, "Running", runningReady)
}
