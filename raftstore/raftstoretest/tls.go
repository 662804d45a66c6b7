package raftstoretest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"math/big"
	"net"
	"sync"
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

// NewCA creates a CA valid for a day.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	ca, err := NewEphemeralCA(name)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// NewEphemeralCA is NewCA for callers without a testing.TB (benchmark
// programs, child processes).
func NewEphemeralCA(name string) (*CA, error) {
	cert, err := sign(&x509.Certificate{
		Subject:  pkix.Name{CommonName: name},
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature, BasicConstraintsValid: true, IsCA: true,
	}, nil)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert.Leaf)
	return &CA{Pool: pool, cert: cert}, nil
}

// Peer issues a certificate named name in groups (its subject's
// Organization) for serverAuth and clientAuth, valid for 127.0.0.1 and
// localhost.
func (ca *CA) Peer(t testing.TB, name string, groups ...string) tls.Certificate {
	t.Helper()
	cert, err := ca.Issue(name, groups...)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

// Issue is Peer for callers without a testing.TB.
func (ca *CA) Issue(name string, groups ...string) (tls.Certificate, error) {
	return sign(&x509.Certificate{
		Subject:     pkix.Name{CommonName: name, Organization: groups},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, DNSNames: []string{"localhost"},
	}, ca)
}

// sign gives tmpl a fresh P-256 key, a serial and a day of validity,
// and signs it with parent (itself when parent is nil).
func sign(tmpl *x509.Certificate, parent *CA) (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("key for %q: %w", tmpl.Subject.CommonName, err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return tls.Certificate{}, err
	}
	tmpl.SerialNumber, tmpl.NotBefore, tmpl.NotAfter = serial, time.Now().Add(-time.Minute), time.Now().Add(24*time.Hour)
	issuer, signer := tmpl, any(key)
	if parent != nil {
		issuer, signer = parent.cert.Leaf, parent.cert.PrivateKey
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, issuer, key.Public(), signer)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("certificate %q: %w", tmpl.Subject.CommonName, err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, nil
}

// peerTLS is the raft transport configuration of PeerTLS, made once per
// process: a CA and one peer certificate of it cost a few milliseconds,
// and tests start hundreds of replicas.
var peerTLS = sync.OnceValues(func() (*tls.Config, error) {
	ca, err := NewEphemeralCA("podflow-test-ca")
	if err != nil {
		return nil, err
	}
	cert, err := ca.Issue("raft-peer", raftstore.PeerGroup)
	if err != nil {
		return nil, err
	}
	return raftstore.MutualTLSConfig(cert, ca.Pool, raftstore.PeerGroup), nil
})

// PeerTLS returns a raft transport configuration (raftstore.Config.TLS)
// that every replica of this process may share: a peer certificate, in
// raftstore.PeerGroup, of a CA made for this process alone. The raft
// transport speaks nothing but mutual TLS, so every replica a test starts
// needs one.
func PeerTLS(t testing.TB) *tls.Config {
	t.Helper()
	cfg, err := peerTLS()
	if err != nil {
		t.Fatalf("raft peer TLS: %v", err)
	}
	return cfg.Clone()
}

// EphemeralPeerTLS is PeerTLS for callers without a testing.TB.
func EphemeralPeerTLS() (*tls.Config, error) {
	cfg, err := peerTLS()
	if err != nil {
		return nil, err
	}
	return cfg.Clone(), nil
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
