package linux

import (
	"testing"

	"google.golang.org/protobuf/proto"

	corev1 "github.com/podflow/podflow/proto/corev1"
)

func TestResolvConf(t *testing.T) {
	const host = "# managed\nnameserver 127.0.0.53\nnameserver 192.168.1.10\nsearch corp.example\noptions edns0 trust-ad\n"
	pod := func(policy string, hostNet bool, dc *corev1.PodDNSConfig) *corev1.Pod {
		return &corev1.Pod{Metadata: &corev1.ObjectMeta{Namespace: "shop", Name: "p"},
			Spec: &corev1.PodSpec{DnsPolicy: policy, HostNetwork: hostNet, DnsConfig: dc}}
	}
	cluster := []string{"10.244.1.1"}
	tests := []struct {
		name       string
		pod        *corev1.Pod
		clusterDNS []string
		want       string
	}{
		{"ClusterFirst by default", pod("", false, nil), cluster,
			"nameserver 10.244.1.1\nsearch shop.svc.cluster.local svc.cluster.local cluster.local\noptions ndots:5\n"},
		{"ClusterFirst", pod(DNSClusterFirst, false, nil), cluster,
			"nameserver 10.244.1.1\nsearch shop.svc.cluster.local svc.cluster.local cluster.local\noptions ndots:5\n"},
		{"ClusterFirst without cluster DNS is Default", pod(DNSClusterFirst, false, nil), nil,
			"nameserver 127.0.0.53\nsearch corp.example\noptions edns0 trust-ad\n"},
		{"Default keeps only loopback nameservers", pod(DNSDefault, false, nil), cluster,
			"nameserver 127.0.0.53\nsearch corp.example\noptions edns0 trust-ad\n"},
		{"hostNetwork ClusterFirst is Default, the node's file whole", pod(DNSClusterFirst, true, nil), cluster,
			"nameserver 127.0.0.53\nnameserver 192.168.1.10\nsearch corp.example\noptions edns0 trust-ad\n"},
		{"ClusterFirstWithHostNet", pod(DNSClusterFirstWithHostNet, true, nil), cluster,
			"nameserver 10.244.1.1\nsearch shop.svc.cluster.local svc.cluster.local cluster.local\noptions ndots:5\n"},
		{"None is dnsConfig only", pod(DNSNone, false, &corev1.PodDNSConfig{
			Nameservers: []string{"10.244.1.1"}, Searches: []string{"a.example"},
			Options: []*corev1.PodDNSConfigOption{{Name: "ndots", Value: proto.String("2")}, {Name: "edns0"}}}), cluster,
			"nameserver 10.244.1.1\nsearch a.example\noptions ndots:2 edns0\n"},
		{"None without dnsConfig is empty", pod(DNSNone, false, nil), cluster, ""},
		{"dnsConfig merges: appended, options replaced by name", pod("", false, &corev1.PodDNSConfig{
			Nameservers: []string{"10.244.1.1", "10.244.1.2"}, Searches: []string{"cluster.local", "x.example"},
			Options: []*corev1.PodDNSConfigOption{{Name: "ndots", Value: proto.String("1")}}}), cluster,
			"nameserver 10.244.1.1\nnameserver 10.244.1.2\nsearch shop.svc.cluster.local svc.cluster.local cluster.local x.example\noptions ndots:1\n"},
		{"at most three nameservers", pod(DNSNone, false, &corev1.PodDNSConfig{Nameservers: []string{"10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4"}}), cluster,
			"nameserver 10.0.0.1\nnameserver 10.0.0.2\nnameserver 10.0.0.3\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := string(resolvConfFor(tc.pod, tc.clusterDNS, "cluster.local", []byte(host)).render()); got != tc.want {
				t.Errorf("resolv.conf =\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
}
