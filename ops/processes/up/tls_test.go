package up

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/ops/processes/plan"
	"github.com/podflow/podflow/ops/processes/roles"
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
	replicas := []string{"store-1", "store-2", "store-3"}
	if err := ensureRaftTLS(l, ca, replicas); err != nil {
		t.Fatal(err)
	}
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

	raftPeer := mutual(l.RaftTLS("store-1"), raftstore.PeerGroup)
	for _, tc := range []struct {
		name   string
		dialer *tls.Config
		ok     bool
	}{
		{"raft peer", mutual(l.RaftTLS("store-2"), raftstore.PeerGroup), true},
		{"bus client of the same CA", mutual(l.BusTLS("store"), raftstore.PeerGroup), false},
		{"NATS server of the same CA", mutual(l.NATSServerTLS(), raftstore.PeerGroup), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := handshake(t, raftPeer, tc.dialer); (err == nil) != tc.ok {
				t.Fatalf("handshake with the raft listener: %v, want success %v", err, tc.ok)
			}
		})
	}

	// Each replica presents its own certificate: the one a peer is shown
	// names that replica (CN and SAN), in both directions.
	for _, server := range replicas {
		for _, client := range replicas {
			if server == client {
				continue
			}
			seenClient, seenServer, err := exchange(t, mutual(l.RaftTLS(server), raftstore.PeerGroup), mutual(l.RaftTLS(client), raftstore.PeerGroup))
			if err != nil {
				t.Fatalf("%s dials %s: %v", client, server, err)
			}
			for _, c := range []struct {
				who  string
				cert *x509.Certificate
			}{{server, seenServer}, {client, seenClient}} {
				if c.cert.Subject.CommonName != "podflow:raft:"+c.who || !slices.Contains(c.cert.DNSNames, c.who) || !slices.Contains(c.cert.Subject.Organization, raftstore.PeerGroup) {
					t.Errorf("%s dials %s: %s presents CN %q, SAN %v, groups %v; want its own (podflow:raft:%s, %s, %s)",
						client, server, c.who, c.cert.Subject.CommonName, c.cert.DNSNames, c.cert.Subject.Organization, c.who, c.who, raftstore.PeerGroup)
				}
			}
		}
	}

	// Routes take only the NATS servers' certificates, not a bus client's
	// of the same CA.
	_, routes, err := roles.NATSTLS(l.NATSServerTLS())
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
	_, _, err := exchange(t, server, client)
	return err
}

// exchange is handshake that also returns the certificate each side was
// shown: the client's, as the server saw it, and the server's, as the
// client saw it.
func exchange(t *testing.T, server, client *tls.Config) (seenClient, seenServer *x509.Certificate, _ error) {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", server)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	type result struct {
		peer *x509.Certificate
		err  error
	}
	done := make(chan result, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			done <- result{err: err}
			return
		}
		defer c.Close()
		tc := c.(*tls.Conn)
		if err := tc.Handshake(); err != nil {
			done <- result{err: err}
			return
		}
		done <- result{peer: tc.ConnectionState().PeerCertificates[0]}
	}()
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", ln.Addr().String(), client)
	if err != nil {
		<-done
		return nil, nil, err
	}
	defer c.Close()
	r := <-done
	if r.err != nil {
		return nil, nil, r.err
	}
	return r.peer, c.ConnectionState().PeerCertificates[0], nil
}
