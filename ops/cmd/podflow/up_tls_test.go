package main

import (
	"context"
	"crypto/tls"
	"net"
	"os"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/ops/plan"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/apiserver/pki"
)

// TestClusterTLSCertificates issues `up --cluster`'s certificates and
// tries them on the transports: raft peers handshake with each other, a
// bus client's certificate of the same CA is no raft peer; the NATS
// servers' certificate serves clients with TLSVerify, and a role's client
// certificate (not a missing one) lets it in.
func TestClusterTLSCertificates(t *testing.T) {
	l := plan.Layout{Dir: t.TempDir()}
	ca, err := pki.NewCA("podflow-ca")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(l.PKI(), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := ca.WriteFiles(l.PKI("ca.crt"), l.PKI("ca.key")); err != nil {
		t.Fatal(err)
	}
	creds := bus.Credentials{Users: []bus.UserCredential{{Role: bus.RoleAdmin, User: "admin", Password: "pw"}, {Role: "store", User: "store", Password: "pw2"}}}
	if err := ensureClusterTLS(l, ca, creds); err != nil {
		t.Fatal(err)
	}
	mutual := func(f bus.TLSFiles, group string) *tls.Config {
		t.Helper()
		c, err := raftstore.MutualTLS(raftstore.TLSFiles{CertFile: f.CertFile, KeyFile: f.KeyFile, CAFile: f.CAFile}, group)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}

	raftPeer := mutual(l.RaftTLS(), raftstore.PeerGroup)
	for _, tc := range []struct {
		name   string
		dialer *tls.Config
		ok     bool
	}{
		{"raft peer", mutual(l.RaftTLS(), raftstore.PeerGroup), true},
		{"bus client of the same CA", mutual(l.BusTLS("store"), raftstore.PeerGroup), false},
		{"NATS server of the same CA", mutual(l.NATSServerTLS(), raftstore.PeerGroup), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := handshake(t, raftPeer, tc.dialer); (err == nil) != tc.ok {
				t.Fatalf("handshake with the raft listener: %v, want success %v", err, tc.ok)
			}
		})
	}

	// Routes take only the NATS servers' certificates, not a bus client's
	// of the same CA.
	_, routes, err := natsTLS(l.NATSServerTLS())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		dialer *tls.Config
		ok     bool
	}{
		{"route from a NATS server", mutual(l.NATSServerTLS(), bus.ServerGroup), true},
		{"route from a bus client of the same CA", mutual(l.BusTLS("store"), bus.ServerGroup), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := handshake(t, routes, tc.dialer); (err == nil) != tc.ok {
				t.Fatalf("handshake with the route listener: %v, want success %v", err, tc.ok)
			}
		})
	}

	t.Run("NATS with TLSVerify", func(t *testing.T) {
		cfg := bus.DefaultEmbeddedConfig(t.TempDir())
		cfg.TLS = mutual(l.NATSServerTLS(), "")
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		srv, err := bus.StartEmbedded(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer srv.Shutdown()
		admin := srv.Creds().Admin()
		if nc, err := nats.Connect(srv.ClientURL(), nats.UserInfo(admin.User, admin.Password), nats.RootCAs(l.PKI("ca.crt")), nats.NoReconnect()); err == nil {
			nc.Close()
			t.Fatal("a client without a certificate connected")
		}
		bc := bus.DefaultConfig()
		bc.URLs, bc.User, bc.Password, bc.TLSFiles = []string{srv.ClientURL()}, admin.User, admin.Password, l.BusTLS(bus.RoleAdmin)
		conn, err := bus.Connect(ctx, bc)
		if err != nil {
			t.Fatalf("connect with the admin's bus certificate: %v", err)
		}
		conn.Close()
	})
}

// handshake runs a TLS handshake between a listener with server and a
// dialer with client on loopback and returns the server's error, or the
// client's.
func handshake(t *testing.T, server, client *tls.Config) error {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", server)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	done := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			done <- err
			return
		}
		defer c.Close()
		done <- c.(*tls.Conn).Handshake()
	}()
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", ln.Addr().String(), client)
	if err != nil {
		<-done
		return err
	}
	defer c.Close()
	return <-done
}
