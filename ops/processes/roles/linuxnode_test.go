package roles

import (
	"slices"
	"testing"

	"github.com/podflow/podflow/nodeagent/linux"
	"github.com/podflow/podflow/nodeagent/linux/proxy"
)

// TestProxyConfigServiceCIDR: the node agent's service CIDR is its
// proxy's (its unreachable route and the range of its rules); unset, the
// proxy keeps Kubernetes' default.
func TestProxyConfigServiceCIDR(t *testing.T) {
	rcfg := linux.DefaultConfig("linux-node-1", "10.244.1.0/24", t.TempDir(), "")
	for _, tc := range []struct{ flag, want string }{
		{"10.100.0.0/24", "10.100.0.0/24"},
		{"", proxy.DefaultConfig("n", "b", "10.0.0.1").ServiceCIDR},
	} {
		cfg := proxyConfig("linux-node-1", "10.244.1.0/24", tc.flag, "", rcfg)
		if cfg.ServiceCIDR != tc.want {
			t.Errorf("service CIDR %q gives the proxy %q, want %q", tc.flag, cfg.ServiceCIDR, tc.want)
		}
		if err := cfg.Validate(); err != nil {
			t.Errorf("%q: %v", tc.flag, err)
		}
	}
}

// TestProxyConfigNodeIPs: node ports answer on the node's bridge address,
// and on its InternalIP when that is another address and not loopback.
func TestProxyConfigNodeIPs(t *testing.T) {
	rcfg := linux.DefaultConfig("linux-node-1", "10.244.1.0/24", t.TempDir(), "")
	for _, tc := range []struct {
		hostIP string
		want   []string
	}{
		{"", []string{"10.244.1.1"}},
		{"10.244.1.1", []string{"10.244.1.1"}},
		{"127.0.0.1", []string{"10.244.1.1"}},
		{"192.168.7.2", []string{"10.244.1.1", "192.168.7.2"}},
	} {
		cfg := proxyConfig("linux-node-1", "10.244.1.0/24", "", tc.hostIP, rcfg)
		if !slices.Equal(cfg.NodeIPs, tc.want) {
			t.Errorf("host IP %q: node IPs %v, want %v", tc.hostIP, cfg.NodeIPs, tc.want)
		}
		if err := cfg.Validate(); err != nil {
			t.Errorf("%q: %v", tc.hostIP, err)
		}
	}
}
