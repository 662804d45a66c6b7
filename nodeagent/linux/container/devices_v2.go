package container

import (
	"fmt"
	"os"

	"github.com/cilium/ebpf/asm"
	"github.com/containerd/cgroups/v3/cgroup2"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// deviceProgramV2 compiles sec's device rules (deny every device, then
// deviceRules) to a BPF_CGROUP_DEVICE program with containerd's
// generator (cgroups/v3 cgroup2.DeviceFilter, runc's
// libcontainer/cgroups/devices/ebpf design): the last matching rule
// decides, nothing matched is denied. A privileged container gets none.
func deviceProgramV2(sec Security) (asm.Instructions, string, error) {
	if sec.Privileged {
		return nil, "", nil
	}
	wildcard := int64(-1) // the generator's "*"
	rules := []specs.LinuxDeviceCgroup{{Allow: false, Type: "a", Major: &wildcard, Minor: &wildcard, Access: "rwm"}}
	for _, r := range sec.deviceRules() {
		if r.Major == nil {
			r.Major = &wildcard
		}
		if r.Minor == nil {
			r.Minor = &wildcard
		}
		rules = append(rules, r)
	}
	insts, license, err := cgroup2.DeviceFilter(rules)
	if err != nil {
		return nil, "", fmt.Errorf("device program: %w", err)
	}
	return insts, license, nil
}

// attachDeviceProgramV2 attaches sec's device program to the cgroup v2
// directory dir (BPF_F_ALLOW_MULTI, as runc), before the init is cloned
// into it. The attachment lives as long as the cgroup: a container's
// cgroup is its own, made for this instance, so nothing detaches it.
func attachDeviceProgramV2(dir string, sec Security) error {
	insts, license, err := deviceProgramV2(sec)
	if err != nil || insts == nil {
		return err
	}
	f, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("device program: open cgroup %q: %w", dir, err)
	}
	defer f.Close()
	if _, err := cgroup2.LoadAttachCgroupDeviceFilter(insts, license, int(f.Fd())); err != nil {
		return fmt.Errorf("device program: attach to %q: %w", dir, err)
	}
	return nil
}
