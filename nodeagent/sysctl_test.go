package nodeagent_test

import (
	"errors"
	"testing"

	"github.com/podflow/podflow/nodeagent"
	corev1 "github.com/podflow/podflow/proto/corev1"
)

func TestPodSysctls(t *testing.T) {
	pod := func(hostNet, hostIPC bool, sysctls ...string) *corev1.Pod {
		sc := &corev1.PodSecurityContext{}
		for _, n := range sysctls {
			sc.Sysctls = append(sc.Sysctls, &corev1.Sysctl{Name: n, Value: "1"})
		}
		return &corev1.Pod{Spec: &corev1.PodSpec{HostNetwork: hostNet, HostIpc: hostIPC, SecurityContext: sc}}
	}
	for _, tc := range []struct {
		name    string
		pod     *corev1.Pod
		allowed []string
		want    map[string]string
		err     string // kubelet's message; "" = admitted
	}{
		{"none", pod(false, false), nil, nil, ""},
		{"safe", pod(false, false, "kernel.shm_rmid_forced", "net.ipv4.tcp_syncookies"), nil,
			map[string]string{"kernel.shm_rmid_forced": "1", "net.ipv4.tcp_syncookies": "1"}, ""},
		{"slash form", pod(false, false, "net/ipv4/ip_local_port_range"), nil, map[string]string{"net.ipv4.ip_local_port_range": "1"}, ""},
		{"unsafe", pod(false, false, "kernel.msgmax"), nil, nil, `forbidden sysctl: "kernel.msgmax" not allowlisted`},
		{"unsafe allowed by a pattern", pod(false, false, "kernel.msgmax", "net.core.somaxconn"), []string{"kernel.msg*", "net.core.somaxconn"},
			map[string]string{"kernel.msgmax": "1", "net.core.somaxconn": "1"}, ""},
		{"not namespaced, even allowed", pod(false, false, "kernel.panic"), []string{"kernel.panic"}, nil, `forbidden sysctl: "kernel.panic" not allowlisted`},
		{"net with hostNetwork", pod(true, false, "net.ipv4.tcp_syncookies"), nil, nil, `forbidden sysctl: "net.ipv4.tcp_syncookies" not allowed with host net enabled`},
		{"ipc with hostIPC", pod(false, true, "kernel.shm_rmid_forced"), nil, nil, `forbidden sysctl: "kernel.shm_rmid_forced" not allowed with host ipc enabled`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := nodeagent.PodSysctls(tc.pod, tc.allowed)
			if tc.err != "" {
				var e *nodeagent.Error
				if !errors.Is(err, nodeagent.ErrSysctlForbidden) || !errors.As(err, &e) || e.Msg != tc.err {
					t.Fatalf("err = %v, want SysctlForbidden %q", err, tc.err)
				}
				return
			}
			if err != nil || len(got) != len(tc.want) {
				t.Fatalf("= %v, %v; want %v", got, err, tc.want)
			}
			for k, v := range tc.want {
				if got[k] != v {
					t.Errorf("%s = %q, want %q", k, got[k], v)
				}
			}
		})
	}
}

func TestValidateSysctlPatterns(t *testing.T) {
	for _, tc := range []struct {
		patterns []string
		ok       bool
	}{
		{[]string{"net.*", "kernel.shm*", "kernel.msg*", "fs.mqueue.*", "kernel.sem", "net.core.somaxconn"}, true},
		{[]string{"kernel.*"}, false},
		{[]string{"vm.swappiness"}, false},
		{[]string{"net.*.foo"}, false},
	} {
		if err := nodeagent.ValidateSysctlPatterns(tc.patterns); (err == nil) != tc.ok {
			t.Errorf("ValidateSysctlPatterns(%q) = %v, want ok %v", tc.patterns, err, tc.ok)
		}
	}
}
