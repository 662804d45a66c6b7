package linux

import (
	"strings"
	"testing"

	corev1 "github.com/podflow/podflow/proto/corev1"
)

// TestPodHostname is kubelet's GeneratePodHostNameAndDomain: the pod's
// name or spec.hostname, cut to 63 characters and of a trailing "-" or
// "."; the domain from spec.subdomain.
func TestPodHostname(t *testing.T) {
	long := strings.Repeat("a", 70)
	dash := strings.Repeat("b", 62) + "-.cdef"
	for _, tc := range []struct {
		name, hostname, subdomain string
		want, domain              string
	}{
		{name: "web", want: "web"},
		{name: "web-0", hostname: "db", subdomain: "cluster", want: "db", domain: "cluster.shop.svc.cluster.local"},
		{name: long, want: long[:63]},
		{name: dash, want: strings.Repeat("b", 62)},
		{name: "p", hostname: "h", want: "h"},
	} {
		pd := &corev1.Pod{Metadata: &corev1.ObjectMeta{Name: tc.name, Namespace: "shop"},
			Spec: &corev1.PodSpec{Hostname: tc.hostname, Subdomain: tc.subdomain}}
		got, domain, err := podHostname(pd, "cluster.local")
		if err != nil || got != tc.want || domain != tc.domain {
			t.Errorf("%q: hostname %q, domain %q, %v; want %q, %q", tc.name, got, domain, err, tc.want, tc.domain)
		}
	}
}

// TestHostsFile is kubelet's managedHostsFileContent and
// hostsEntriesFromHostAliases, byte for byte.
func TestHostsFile(t *testing.T) {
	pd := &corev1.Pod{Metadata: &corev1.ObjectMeta{Name: "web-0", Namespace: "shop"}, Spec: &corev1.PodSpec{
		HostAliases: []*corev1.HostAlias{{Ip: "10.1.2.3", Hostnames: []string{"foo.local", "bar.local"}}, {Ip: "10.1.2.4", Hostnames: []string{"baz"}}}}}
	got := string(hostsFile(pd, "10.244.0.7", "web-0", "web.shop.svc.cluster.local"))
	want := "# Kubernetes-managed hosts file.\n" +
		"127.0.0.1\tlocalhost\n" +
		"::1\tlocalhost ip6-localhost ip6-loopback\n" +
		"fe00::0\tip6-localnet\n" +
		"fe00::0\tip6-mcastprefix\n" +
		"fe00::1\tip6-allnodes\n" +
		"fe00::2\tip6-allrouters\n" +
		"10.244.0.7\tweb-0.web.shop.svc.cluster.local\tweb-0\n" +
		"\n" +
		"# Entries added by HostAliases.\n" +
		"10.1.2.3\tfoo.local\tbar.local\n" +
		"10.1.2.4\tbaz\n"
	if got != want {
		t.Errorf("hosts file:\n%s\nwant:\n%s", got, want)
	}
	pd.Spec.HostAliases = nil
	if got := string(hostsFile(pd, "10.244.0.7", "web-0", "")); !strings.HasSuffix(got, "fe00::2\tip6-allrouters\n10.244.0.7\tweb-0\n") {
		t.Errorf("without a subdomain:\n%s", got)
	}
	pd.Spec.HostNetwork = true
	pd.Spec.HostAliases = []*corev1.HostAlias{{Ip: "10.1.2.3", Hostnames: []string{"foo"}}}
	got = string(hostsFile(pd, "192.0.2.1", "node", ""))
	if !strings.HasPrefix(got, "# Kubernetes-managed hosts file (host network).\n") || !strings.HasSuffix(got, "\n# Entries added by HostAliases.\n10.1.2.3\tfoo\n") {
		t.Errorf("host network:\n%s", got)
	}
}
