package container_test

import (
	"errors"
	"testing"

	"github.com/podflow/podflow/nodeagent/linux/container"
)

// Spec.Validate refuses every sysctl that would reach the host.
func TestSpecSysctls(t *testing.T) {
	base := container.Spec{ID: "c", Dir: "/d", Rootfs: "/r", LogPath: "/l", Args: []string{"true"}, NetnsPath: "/run/netns/x"}
	for _, tc := range []struct {
		name   string
		adjust func(*container.Spec)
		ok     bool
	}{
		{"namespaced in the pod's namespaces", func(s *container.Spec) {
			s.Sysctls = map[string]string{"net.ipv4.tcp_syncookies": "1", "kernel.shm_rmid_forced": "1", "fs.mqueue.msg_max": "10"}
		}, true},
		{"not namespaced", func(s *container.Spec) { s.Sysctls = map[string]string{"kernel.panic": "1"} }, false},
		{"path escape", func(s *container.Spec) { s.Sysctls = map[string]string{"net../../kernel/panic": "1"} }, false},
		{"net in the host's network namespace", func(s *container.Spec) {
			s.NetnsPath, s.Sysctls = "", map[string]string{"net.ipv4.tcp_syncookies": "1"}
		}, false},
		{"ipc in the host's IPC namespace", func(s *container.Spec) {
			s.HostIPC, s.Sysctls = true, map[string]string{"kernel.shm_rmid_forced": "1"}
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := base
			tc.adjust(&s)
			err := s.Validate()
			if (err == nil) != tc.ok || (err != nil && !errors.Is(err, container.ErrInvalidSpec)) {
				t.Fatalf("Validate = %v, want ok %v", err, tc.ok)
			}
		})
	}
}
