package linux

import (
	"fmt"

	"github.com/opencontainers/selinux/go-selinux"
	"github.com/opencontainers/selinux/go-selinux/label"

	"github.com/podflow/podflow/nodeagent/linux/container"
	corev1 "github.com/podflow/podflow/proto/corev1"
)

// SELinux, as kubelet and containerd's CRI apply it: seLinuxOptions are
// accepted on every node and applied only where SELinux is enabled (the
// selinuxfs is mounted, /sys/fs/selinux): there the container's process
// runs with a label made from the node's default container label with
// the options' user, role, type and level over it (label.InitLabels, as
// containerd), its root filesystem is mounted with the matching file
// label and its volumes (not hostPath) are relabeled, shared by the pod's
// containers (containerd's "z"). Where SELinux is off nothing is applied
// and nothing fails, as on any kubelet of such a machine.

// seLinuxEnabled reports whether this machine enforces or audits SELinux.
func seLinuxEnabled() bool { return selinux.GetEnabled() }

// effectiveSELinux is kubelet's DetermineEffectiveSecurityContext for
// seLinuxOptions: the container's, whole, else the pod's.
func effectiveSELinux(psc *corev1.PodSecurityContext, sc *corev1.SecurityContext) *corev1.SELinuxOptions {
	if o := sc.GetSeLinuxOptions(); o != nil {
		return o
	}
	return psc.GetSeLinuxOptions()
}

// seLinuxLabelOptions are containerd's label options for o (its CRI
// toLabel): "user:u", "role:r", "type:t", "level:l" for the parts set.
func seLinuxLabelOptions(o *corev1.SELinuxOptions) []string {
	var out []string
	for _, kv := range [][2]string{{"user", o.GetUser()}, {"role", o.GetRole()}, {"type", o.GetType()}, {"level", o.GetLevel()}} {
		if kv[1] != "" {
			out = append(out, kv[0]+":"+kv[1])
		}
	}
	return out
}

// withSELinux sets sec's process and mount labels from o when enabled
// (seLinuxEnabled); otherwise it leaves them empty. A privileged
// container keeps the node's label, as containerd runs one unconfined.
func withSELinux(sec *container.Security, o *corev1.SELinuxOptions, enabled bool) error {
	if !enabled || sec.Privileged {
		return nil
	}
	plabel, mlabel, err := label.InitLabels(seLinuxLabelOptions(o))
	if err != nil {
		return fmt.Errorf("SELinux labels %v: %w", seLinuxLabelOptions(o), err)
	}
	sec.ProcessLabel, sec.MountLabel = plabel, mlabel
	return nil
}

// relabelVolume gives a volume directory mountLabel, shared by the pod's
// containers (level s0), when SELinux is enabled and the container has a
// label.
func relabelVolume(dir, mountLabel string) error {
	if mountLabel == "" {
		return nil
	}
	if err := label.Relabel(dir, mountLabel, true); err != nil {
		return fmt.Errorf("relabel %q: %w", dir, err)
	}
	return nil
}
