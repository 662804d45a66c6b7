package container_test

import (
	"strings"
	"testing"

	"github.com/podflow/podflow/nodeagent/linux/container"
	"github.com/podflow/podflow/nodeagent/linux/container/containertest"
)

// In a cgroup v2 directory the eBPF device program is the guard: a block
// device made with mknod in the container's /dev (a tmpfs without nodev)
// cannot be opened, while the allowed devices can; a privileged container
// (no program) opens it. On a hybrid host the unified hierarchy takes the
// program and the v1 devices controller stays out of the way.
func TestDeviceProgramV2(t *testing.T) {
	devMajMin := firstBlockDevice(t)
	attack := "mknod /dev/pfdisk b " + devMajMin + " && dd if=/dev/pfdisk of=/dev/null bs=512 count=1"
	run := func(t *testing.T, sec *container.Security, script string) (string, bool) {
		spec := newSpec(t, "sh", "-c", script)
		spec.Security = sec
		spec.Cgroups = map[string]string{"": containertest.CgroupV2(t)}
		c := start(t, spec)
		st, err := c.Wait(ctx20(t))
		if err != nil {
			t.Fatal(err)
		}
		return logText(t, spec.LogPath), st.ExitCode == 0
	}
	if out, ok := run(t, nil, "echo x > /dev/null && head -c 1 /dev/zero > /dev/null && "+attack); ok || !strings.Contains(out, "Operation not permitted") {
		t.Errorf("guarded: the block device was opened (ok=%v):\n%s", ok, out)
	}
	if out, ok := run(t, nil, "echo x > /dev/null && head -c 1 /dev/urandom | wc -c"); !ok {
		t.Errorf("guarded: an allowed device could not be used:\n%s", out)
	}
	if out, ok := run(t, secWith(privileged), attack); !ok {
		t.Errorf("privileged: the attack failed, so the test cannot tell:\n%s", out)
	}
}
