package raftstoretest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"testing"
	"time"

	"github.com/podflow/podflow/raftstore"
)

// CA is a throwaway certificate authority for the raft transport's
// mutual-TLS tests. It is raftstore's own, so that the raftstore module
// needs no other podflow module to test its TLS.
type CA struct {
	Pool *x509.CertPool
	cert tls.Certificate // Leaf set
}

// NewCA creates a CA valid for an hour.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	cert := sign(t, &x509.Certificate{
		Subject:  pkix.Name{CommonName: name},
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature, BasicConstraintsValid: true, IsCA: true,
	}, nil)
	pool := x509.NewCertPool()
	pool.AddCert(cert.Leaf)
	return &CA{Pool: pool, cert: cert}
}

// Peer issues a certificate named name in groups (its subject's
// Organization) for serverAuth and clientAuth, valid for 127.0.0.1 and
// localhost.
func (ca *CA) Peer(t testing.TB, name string, groups ...string) tls.Certificate {
	t.Helper()
	return sign(t, &x509.Certificate{
		Subject:     pkix.Name{CommonName: name, Organization: groups},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, DNSNames: []string{"localhost"},
	}, ca)
}

// sign gives tmpl a fresh P-256 key, a serial and an hour of validity,
// and signs it with parent (itself when parent is nil).
func sign(t testing.TB, tmpl *x509.Certificate, parent *CA) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("key for %q: %v", tmpl.Subject.CommonName, err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		t.Fatal(err)
	}
	tmpl.SerialNumber, tmpl.NotBefore, tmpl.NotAfter = serial, time.Now().Add(-time.Minute), time.Now().Add(time.Hour)
	issuer, signer := tmpl, any(key)
	if parent != nil {
		issuer, signer = parent.cert.Leaf, parent.cert.PrivateKey
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, issuer, key.Public(), signer)
	if err != nil {
		t.Fatalf("certificate %q: %v", tmpl.Subject.CommonName, err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}
}

// MutualTLS returns the raft transport configuration of a peer named name
// in groups (raftstore.MutualTLSConfig with a certificate from ca that
// requires raftstore.PeerGroup of the other side).
func MutualTLS(t testing.TB, ca *CA, name string, groups ...string) *tls.Config {
	t.Helper()
	return raftstore.MutualTLSConfig(ca.Peer(t, name, groups...), ca.Pool, raftstore.PeerGroup)
}

// WithTLS is an Option that runs every replica's raft transport over mutual
// TLS with a certificate from ca.
func WithTLS(t testing.TB, ca *CA) Option {
	cfg := MutualTLS(t, ca, "raft-peer", raftstore.PeerGroup)
	return func(c *raftstore.Config) { c.TLS = cfg }
}
