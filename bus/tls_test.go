package bus_test

import (
	"context"
	"crypto/tls"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/bus/bustest"
)

// TestTLSClientsNeedACertificate serves clients over TLS with TLSVerify:
// a client with the admin's password but without a certificate from the
// bus's CA is refused at the handshake, whether it dials in plain TCP,
// with TLS but no certificate, or with a certificate of another CA. A
// client with one connects, from a tls.Config or from files.
func TestTLSClientsNeedACertificate(t *testing.T) {
	ca := bustest.NewCA(t, "podflow-ca")
	rogue := bustest.NewCA(t, "rogue-ca")
	cfg := bus.DefaultEmbeddedConfig(t.TempDir())
	cfg.TLS = ca.MutualTLS(t, "nats")
	cfg.ClientTLS = ca.MutualTLS(t, "admin")
	srv := bustest.ServerAt(t, cfg)
	admin := srv.Creds().Admin()

	otherCA := rogue.MutualTLS(t, "admin")
	otherCA.RootCAs = ca.Pool // it trusts the bus; the bus does not trust it
	for _, tc := range []struct {
		name string
		opts []nats.Option
	}{
		{"plain TCP", nil},
		{"TLS without a client certificate", []nats.Option{nats.Secure(&tls.Config{RootCAs: ca.Pool, MinVersion: tls.VersionTLS13})}},
		{"client certificate from another CA", []nats.Option{nats.Secure(otherCA)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := append([]nats.Option{nats.UserInfo(admin.User, admin.Password), nats.Timeout(3 * time.Second), nats.NoReconnect()}, tc.opts...)
			nc, err := nats.Connect(srv.ClientURL(), opts...)
			if err == nil {
				nc.Close()
				t.Fatal("a client without a certificate of the bus's CA connected")
			}
		})
	}

	t.Run("certificate of the bus's CA", func(t *testing.T) {
		conn := bustest.Connect(t, srv, "tls-admin")
		if err := conn.NATS().Flush(); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("certificate files from the client configuration", func(t *testing.T) {
		dir := t.TempDir()
		path := filepath.Join(dir, "client.json")
		if err := bus.WriteClientConfigTLS(path, []string{srv.ClientURL()}, admin, ca.WritePeer(t, dir, "admin")); err != nil {
			t.Fatal(err)
		}
		cc, err := bus.ReadClientConfig(path)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), bustest.Timeout)
		defer cancel()
		conn, err := bus.Connect(ctx, cc)
		if err != nil {
			t.Fatalf("connect with TLS files: %v", err)
		}
		conn.Close()
	})
}

// TestTLSRoutesNeedACertificate clusters two servers over mutual-TLS
// routes; a third whose certificate comes from another CA, routed to them
// with the cluster's name, gets no route.
func TestTLSRoutesNeedACertificate(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test in -short mode")
	}
	ca := bustest.NewCA(t, "podflow-ca")
	rogue := bustest.NewCA(t, "rogue-ca")
	dir := t.TempDir()
	creds := filepath.Join(dir, "creds.json")
	if _, err := bus.EnsureCredentials(creds, nil); err != nil {
		t.Fatal(err)
	}
	ports, release := reservePorts(t, 3)
	start := func(i int, routeTLS *tls.Config) *bus.Embedded {
		cfg := clusterServerConfig(dir, creds, ports, i)
		cfg.ClusterTLS = routeTLS
		cfg.StartTimeout = 30 * time.Second
		release[i]()
		return bustest.ServerAt(t, cfg)
	}
	// JetStream in a cluster waits for its peers; start in the background.
	servers := make(chan *bus.Embedded, 3)
	for i, c := range []*tls.Config{ca.MutualTLS(t, "n0"), ca.MutualTLS(t, "n1")} {
		go func() { servers <- start(i, c) }()
	}
	n0, n1 := <-servers, <-servers
	bustest.Eventually(t, "the two servers of the CA routed", func() bool {
		return n0.Server().NumRoutes() > 0 && n1.Server().NumRoutes() > 0
	})
	otherCA := rogue.MutualTLS(t, "n2")
	otherCA.RootCAs, otherCA.ClientCAs = ca.Pool, rogue.Pool // trusts the cluster; the cluster does not trust it
	go func() { servers <- start(2, otherCA) }()
	n2 := <-servers
	time.Sleep(2 * time.Second) // routes are retried every second
	if got := n2.Server().NumRoutes(); got != 0 {
		t.Fatalf("a server of another CA has %d routes, want 0", got)
	}
	for _, s := range []*bus.Embedded{n0, n1} {
		for _, r := range routeNames(s) {
			if r == "n2" {
				t.Fatalf("%s routed to the rogue server", s.Server().Name())
			}
		}
	}
}

func routeNames(e *bus.Embedded) []string {
	rz, err := e.Server().Routez(nil)
	if err != nil {
		return nil
	}
	var out []string
	for _, r := range rz.Routes {
		out = append(out, r.RemoteName)
	}
	return out
}

func TestEmbeddedConfigOffLoopbackNeedsTLS(t *testing.T) {
	ca := bustest.NewCA(t, "podflow-ca")
	noVerify := ca.MutualTLS(t, "nats")
	noVerify.ClientAuth = tls.NoClientCert
	for _, tc := range []struct {
		name    string
		set     func(*bus.EmbeddedConfig)
		wantErr string
	}{
		{"loopback without TLS", func(c *bus.EmbeddedConfig) {}, ""},
		{"all addresses without TLS", func(c *bus.EmbeddedConfig) { c.Host = "0.0.0.0" }, "needs TLS"},
		{"all addresses with TLS", func(c *bus.EmbeddedConfig) { c.Host, c.TLS = "0.0.0.0", ca.MutualTLS(t, "nats") }, ""},
		{"TLS without client verification", func(c *bus.EmbeddedConfig) { c.TLS = noVerify }, "require and verify"},
		{"cluster off loopback without route TLS", func(c *bus.EmbeddedConfig) {
			c.Host, c.TLS, c.ServerName, c.ClusterName, c.ClusterPort = "10.0.0.5", ca.MutualTLS(t, "nats"), "n0", "podflow", 6222
		}, "needs ClusterTLS"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := bus.DefaultEmbeddedConfig(t.TempDir())
			tc.set(&c)
			err := c.Validate()
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("Validate() = %v, want %q", err, tc.wantErr)
			}
		})
	}
}
