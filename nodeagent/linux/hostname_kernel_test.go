package linux_test

import (
	"strings"
	"testing"
	"time"

	corev1 "github.com/podflow/podflow/proto/corev1"
)

// TestLongPodNameHostname: a pod whose name is longer than the kernel's
// 63-character hostname starts, with the name's first 63 characters as
// its hostname (kubelet's truncatePodHostnameIfNeeded); sethostname
// refused the whole name before.
func TestLongPodNameHostname(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, 30*time.Second)
	name := "long-" + strings.Repeat("n", 60) + "-named" // 71 characters
	pd := newPod(e.cfg.NodeName, name, "sleep", "1000")
	_, id := e.startPod(t, ctx, pd)
	want := name[:63]
	if got := strings.TrimSpace(e.execProbe(t, ctx, pd, id, "hostname")); got != want {
		t.Fatalf("hostname %q, want %q", got, want)
	}
	if got := strings.TrimSpace(e.execProbe(t, ctx, pd, id, "sh", "-c", "echo $HOSTNAME")); got != want {
		t.Fatalf("HOSTNAME %q, want %q", got, want)
	}
}

// TestHostnameSubdomainHostAliases: spec.hostname is the container's
// hostname, its /etc/hosts is kubelet's managed file with the pod's FQDN
// (hostname.subdomain.namespace.svc.cluster.local) and the hostAliases;
// seLinuxOptions are accepted, and ignored where SELinux is off.
func TestHostnameSubdomainHostAliases(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, 30*time.Second)
	pd := newPod(e.cfg.NodeName, "web-7f9c", "sleep", "1000")
	pd.Spec.Hostname, pd.Spec.Subdomain = "web-0", "web"
	pd.Spec.HostAliases = []*corev1.HostAlias{{Ip: "10.9.8.7", Hostnames: []string{"foo.local", "bar.local"}}}
	pd.Spec.SecurityContext = &corev1.PodSecurityContext{SeLinuxOptions: &corev1.SELinuxOptions{Level: "s0:c123,c456"}}
	pd.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{SeLinuxOptions: &corev1.SELinuxOptions{Type: "container_t"}}
	sb, id := e.startPod(t, ctx, pd)
	if got := strings.TrimSpace(e.execProbe(t, ctx, pd, id, "hostname")); got != "web-0" {
		t.Fatalf("hostname %q, want web-0", got)
	}
	hosts := e.execProbe(t, ctx, pd, id, "cat", "/etc/hosts")
	for _, line := range []string{
		"# Kubernetes-managed hosts file.",
		"127.0.0.1\tlocalhost",
		sb.IP + "\tweb-0.web.default.svc.cluster.local\tweb-0",
		"# Entries added by HostAliases.",
		"10.9.8.7\tfoo.local\tbar.local",
	} {
		if !strings.Contains(hosts+"\n", line+"\n") { // the probe's output has no final newline
			t.Errorf("/etc/hosts lacks %q:\n%s", line, hosts)
		}
	}
}
