package container

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/podflow/podflow/proto/podrules"
)

// validateSysctls refuses every sysctl that would reach the host: one not
// namespaced, a net.* one without a network namespace of the pod's, an
// ipc one in the host's IPC namespace.
func (s Spec) validateSysctls() error {
	for name := range s.Sysctls {
		ns := podrules.SysctlNamespace(name)
		switch {
		case ns == "" || strings.Contains(name, "/") || strings.Contains(name, ".."):
			return fmt.Errorf("%w: sysctl %q is not namespaced", ErrInvalidSpec, name)
		case ns == "net" && s.NetnsPath == "":
			return fmt.Errorf("%w: sysctl %q in the host's network namespace", ErrInvalidSpec, name)
		case ns == "ipc" && s.HostIPC:
			return fmt.Errorf("%w: sysctl %q in the host's IPC namespace", ErrInvalidSpec, name)
		}
	}
	return nil
}

// writeSysctls sets the spec's sysctls through proc, the container's own
// /proc, from the init: the kernel resolves net.* in the writer's network
// namespace (the pod's) and the ipc ones in its IPC namespace (the
// container's), as runc does.
func writeSysctls(proc string, sysctls map[string]string) error {
	for name, value := range sysctls {
		p := filepath.Join(proc, "sys", strings.ReplaceAll(name, ".", "/"))
		if err := os.WriteFile(p, []byte(value), 0); err != nil {
			return fmt.Errorf("sysctl %s=%q: %w", name, value, err)
		}
	}
	return nil
}
