package nodeagent_test

import (
	"testing"

	corev1 "github.com/podflow/podflow/proto/corev1"
	eventsv1 "github.com/podflow/podflow/proto/eventsv1"
)

// TestCSIVolumeNeverMounts: podflow's nodes have no CSI drivers. A pod
// with an inline csi volume (the CSIInlineVolumes conformance test's) is
// FailedMount with kubelet's message for a driver that is not registered,
// retried, and its containers stay ContainerCreating: none starts.
func TestCSIVolumeNeverMounts(t *testing.T) {
	e := newEnv(t)
	ro, fs := true, "ext4"
	p := newPod("csi-inline", func(p *corev1.Pod) {
		p.Spec.Volumes = []*corev1.Volume{
			{Name: "scratch", EmptyDir: &corev1.EmptyDirVolumeSource{}},
			{Name: "csi-inline-vol2", Csi: &corev1.CSIVolumeSource{Driver: "e2e.example.com", ReadOnly: &ro, FsType: &fs,
				NodePublishSecretRef: &corev1.LocalObjectReference{Name: "publish"}}},
		}
		p.Spec.Containers[0].VolumeMounts = []*corev1.VolumeMount{{Name: "csi-inline-vol2", MountPath: "/mnt/vol2"}}
	})
	e.bind(p)
	envs := e.waitEnvs(p.Metadata.Uid, "two FailedMount", func(envs []*eventsv1.Envelope) bool {
		return len(ofType(envs, "PodFailed")) >= 2
	})
	const want = `MountVolume.SetUp failed for volume "csi-inline-vol2" : kubernetes.io/csi: mounter.SetUpAt failed to get CSI client: ` +
		`driver name e2e.example.com not found in the list of registered CSI drivers`
	if !hasRecord(envs, "Warning", "FailedMount", want) {
		t.Errorf("records = %v, want a FailedMount %q", records(envs), want)
	}
	for _, f := range ofType(envs, "PodFailed") {
		if f.GetPodFailed().GetReason() != eventsv1.ReasonFailedMount {
			t.Errorf("PodFailed = %v", f.GetPodFailed())
		}
	}
	if st := lastStatus(envs); st.GetPhase() != "Pending" || waiting(st) != "ContainerCreating" {
		t.Errorf("status = %v, want Pending, ContainerCreating", st)
	}
	if n := len(ofType(envs, "ContainerStarted")); n != 0 {
		t.Errorf("%d containers started", n)
	}
}
