package linux

import (
	"slices"
	"testing"

	"github.com/podflow/podflow/nodeagent/linux/container"
	corev1 "github.com/podflow/podflow/proto/corev1"
)

// TestSELinuxOptions: the container's seLinuxOptions replace the pod's
// whole (kubelet's DetermineEffectiveSecurityContext) and become
// containerd's label options; where SELinux is off (seLinuxEnabled
// false) no label is set and nothing fails, as kubelet ignores them.
func TestSELinuxOptions(t *testing.T) {
	pod := &corev1.PodSecurityContext{SeLinuxOptions: &corev1.SELinuxOptions{User: "system_u", Level: "s0:c1,c2"}}
	ctr := &corev1.SecurityContext{SeLinuxOptions: &corev1.SELinuxOptions{Type: "container_t"}}
	if got := effectiveSELinux(pod, ctr); got != ctr.SeLinuxOptions {
		t.Errorf("effective = %v, want the container's whole", got)
	}
	if got := effectiveSELinux(pod, &corev1.SecurityContext{}); got != pod.SeLinuxOptions {
		t.Errorf("effective = %v, want the pod's", got)
	}
	if got, want := seLinuxLabelOptions(&corev1.SELinuxOptions{User: "u", Role: "r", Type: "t", Level: "s0:c1,c2"}),
		[]string{"user:u", "role:r", "type:t", "level:s0:c1,c2"}; !slices.Equal(got, want) {
		t.Errorf("label options %q, want %q", got, want)
	}
	if got := seLinuxLabelOptions(nil); got != nil {
		t.Errorf("label options of none: %q", got)
	}
	sec := container.DefaultSecurity()
	if err := withSELinux(&sec, pod.SeLinuxOptions, false); err != nil || sec.ProcessLabel != "" || sec.MountLabel != "" {
		t.Errorf("SELinux off: labels %q %q, %v; want none", sec.ProcessLabel, sec.MountLabel, err)
	}
	sec.Privileged = true
	if err := withSELinux(&sec, pod.SeLinuxOptions, true); err != nil || sec.ProcessLabel != "" {
		t.Errorf("privileged: label %q, %v; want the node's (none set)", sec.ProcessLabel, err)
	}
	// This machine's containers get labels exactly when SELinux is on.
	pd := &corev1.Pod{Metadata: &corev1.ObjectMeta{Name: "p", Namespace: "d", Uid: "u"}, Spec: &corev1.PodSpec{SecurityContext: pod}}
	got, err := containerSecurity(pd, &corev1.Container{Name: "c", SecurityContext: ctr}, "", seccompOptions{selinux: seLinuxEnabled()})
	if err != nil {
		t.Fatal(err)
	}
	if (got.ProcessLabel != "") != seLinuxEnabled() {
		t.Errorf("SELinux enabled %v, process label %q", seLinuxEnabled(), got.ProcessLabel)
	}
}
