package linux_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/podflow/podflow/nodeagent"
	"github.com/podflow/podflow/nodeagent/linux"
	corev1 "github.com/podflow/podflow/proto/corev1"
)

// A pod's sysctls are set in its own network and IPC namespaces, never on
// the host; an unsafe one is refused unless the agent allows it.
func TestSysctlsOnTheKernel(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, func(c *linux.Config) { c.AllowedUnsafeSysctls = []string{"kernel.msgmax"} })
	ctx := ctxT(t, 60*time.Second)
	files := []string{"/proc/sys/net/ipv4/ip_local_port_range", "/proc/sys/kernel/shm_rmid_forced", "/proc/sys/kernel/msgmax"}
	host := map[string]string{}
	for _, f := range files {
		host[f] = readFile(f)
	}
	pd := newPod(e.cfg.NodeName, "sysctls", "sleep", "3600")
	want := map[string]string{"net.ipv4.ip_local_port_range": "20000\t30000", "kernel.shm_rmid_forced": "1", "kernel.msgmax": "12345"}
	if host[files[1]] == "1" {
		want["kernel.shm_rmid_forced"] = "0"
	}
	if host[files[2]] == "12345" {
		want["kernel.msgmax"] = "23456"
	}
	for _, n := range []string{"net.ipv4.ip_local_port_range", "kernel.shm_rmid_forced", "kernel.msgmax"} {
		pd.Spec.SecurityContext = &corev1.PodSecurityContext{Sysctls: append(pd.Spec.GetSecurityContext().GetSysctls(), &corev1.Sysctl{Name: n, Value: want[n]})}
	}
	_, id := e.startPod(t, ctx, pd)
	out := e.execProbe(t, ctx, pd, id, append([]string{"cat"}, files...)...)
	inside := strings.Split(out, "\n")
	for i, n := range []string{"net.ipv4.ip_local_port_range", "kernel.shm_rmid_forced", "kernel.msgmax"} {
		if i >= len(inside) || inside[i] != want[n] {
			t.Errorf("%s inside = %q, want %q", n, inside, want[n])
		}
	}
	for _, f := range files {
		if got := readFile(f); got != host[f] {
			t.Errorf("host %s changed: %q, was %q", f, got, host[f])
		}
	}

	unsafe := newPod(e.cfg.NodeName, "unsafe", "true")
	unsafe.Spec.SecurityContext = &corev1.PodSecurityContext{Sysctls: []*corev1.Sysctl{{Name: "net.core.somaxconn", Value: "1024"}}}
	_, err := e.rt.RunPodSandbox(ctx, unsafe)
	if !errors.Is(err, nodeagent.ErrSysctlForbidden) || !strings.Contains(err.Error(), `forbidden sysctl: "net.core.somaxconn" not allowlisted`) {
		t.Fatalf("RunPodSandbox with an unsafe sysctl = %v, want SysctlForbidden", err)
	}
}
