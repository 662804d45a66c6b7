package raftstore

import (
	"crypto/tls"
	"crypto/x509"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
)

func TestParsePeers(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    []Peer
		wantErr bool
	}{
		{in: "", want: nil},
		{in: "a=127.0.0.1:1, b=127.0.0.1:2", want: []Peer{{"a", "127.0.0.1:1"}, {"b", "127.0.0.1:2"}}},
		{in: "a", wantErr: true},
		{in: "=127.0.0.1:1", wantErr: true},
	} {
		got, err := ParsePeers(tc.in)
		if (err != nil) != tc.wantErr || len(got) != len(tc.want) {
			t.Fatalf("ParsePeers(%q) = %v, %v", tc.in, got, err)
		}
		for i := range got {
			if got[i] != tc.want[i] {
				t.Fatalf("ParsePeers(%q)[%d] = %v, want %v", tc.in, i, got[i], tc.want[i])
			}
		}
	}
}

func TestConfigValidate(t *testing.T) {
	valid := func() Config {
		c := DefaultConfig()
		c.ID, c.DataDir, c.RaftAddr, c.Conn = "a", "/tmp/x", "127.0.0.1:0", &nats.Conn{}
		c.Bootstrap = []Peer{{"a", "127.0.0.1:1"}, {"b", "127.0.0.1:2"}}
		c.TLS = &tls.Config{Certificates: []tls.Certificate{{}}, RootCAs: x509.NewCertPool(), ClientCAs: x509.NewCertPool(), ClientAuth: tls.RequireAndVerifyClientCert}
		return c
	}
	if err := valid().Validate(); err != nil {
		t.Fatalf("valid config: %v", err)
	}
	for _, tc := range []struct {
		name   string
		mutate func(*Config)
		want   string
	}{
		{"no id", func(c *Config) { c.ID = "" }, "ID is required"},
		{"bad addr", func(c *Config) { c.RaftAddr = "nope" }, "RaftAddr"},
		{"self missing", func(c *Config) { c.ID = "z" }, "does not include this replica"},
		{"join and bootstrap", func(c *Config) { c.Join = true }, "exclusive"},
		{"duplicate peer", func(c *Config) { c.Bootstrap = append(c.Bootstrap, Peer{"a", "x:1"}) }, "listed twice"},
		{"no TLS", func(c *Config) { c.TLS = nil }, "TLS is required"},
		{"TLS without client verification", func(c *Config) { c.TLS.ClientAuth = tls.VerifyClientCertIfGiven }, "RequireAndVerifyClientCert"},
		{"TLS without a CA", func(c *Config) { c.TLS.ClientCAs = nil }, "ClientCAs"},
		{"peer addr not host:port", func(c *Config) { c.PeerAddrs = map[string]string{"b": "nope"} }, "PeerAddrs"},
		{"wildcard subject", func(c *Config) { c.Subject = "a.*" }, "literal subject"},
		{"no history", func(c *Config) { c.HistoryRevisions = 0 }, "HistoryRevisions"},
		{"tiny segments", func(c *Config) { c.LogSegmentBytes = 4096 }, "LogSegmentBytes"},
		{"raft lease", func(c *Config) { c.LeaderLeaseTimeout = 2 * c.HeartbeatTimeout }, "LeaderLeaseTimeout"},
		{"negative watch cache", func(c *Config) { c.WatchCacheBytes = -1 }, "WatchCacheBytes"},
		{"coalescing past the heartbeat", func(c *Config) { c.WatchCoalesce = 2 * c.WatchHeartbeat }, "WatchCoalesce"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := valid()
			tc.mutate(&c)
			if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate() = %v, want an error mentioning %q", err, tc.want)
			}
		})
	}
	if err := DefaultClientConfig().Validate(); err != nil {
		t.Fatalf("default client config: %v", err)
	}
	cc := DefaultClientConfig()
	cc.RetryBackoffMax = cc.RetryBackoffMin / 2
	if cc.Validate() == nil {
		t.Fatal("client config with max backoff below min validated")
	}
}
