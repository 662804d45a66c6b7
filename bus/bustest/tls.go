package bustest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/podflow/podflow/bus"
)

// CA is a throwaway certificate authority for mutual-TLS tests.
type CA struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
	Pool *x509.CertPool
}

// NewCA creates a CA valid for an hour.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("CA key: %v", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature, BasicConstraintsValid: true, IsCA: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatalf("CA certificate: %v", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatalf("parse CA certificate: %v", err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &CA{Cert: cert, Key: key, Pool: pool}
}

// Peer issues a certificate named name in groups (its subject's
// Organization) for both serverAuth and clientAuth,
// valid for 127.0.0.1 and localhost: a NATS server (client and route
// listeners), a raft peer or a client.
func (ca *CA) Peer(t testing.TB, name string, groups ...string) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("peer key: %v", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name, Organization: groups},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, DNSNames: []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.Key)
	if err != nil {
		t.Fatalf("peer certificate: %v", err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// MutualTLS returns a configuration with a certificate named name in groups
// that
// requires and verifies the peer's against ca in both directions: for a
// server (EmbeddedConfig.TLS, ClusterTLS) and for a client alike.
func (ca *CA) MutualTLS(t testing.TB, name string, groups ...string) *tls.Config {
	t.Helper()
	return &tls.Config{
		Certificates: []tls.Certificate{ca.Peer(t, name, groups...)},
		RootCAs:      ca.Pool, ClientCAs: ca.Pool,
		ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS13,
	}
}

// WritePeer issues a certificate as Peer does and writes it, its key and
// the CA certificate as PEM files in dir: the client side of a TLS bus
// configuration file.
func (ca *CA) WritePeer(t testing.TB, dir, name string) bus.TLSFiles {
	t.Helper()
	cert := ca.Peer(t, name)
	key, err := x509.MarshalPKCS8PrivateKey(cert.PrivateKey)
	if err != nil {
		t.Fatalf("marshal key: %v", err)
	}
	f := bus.TLSFiles{CAFile: filepath.Join(dir, "ca.crt"), CertFile: filepath.Join(dir, name+".crt"), KeyFile: filepath.Join(dir, name+".key")}
	for path, blk := range map[string]*pem.Block{
		f.CAFile:   {Type: "CERTIFICATE", Bytes: ca.Cert.Raw},
		f.CertFile: {Type: "CERTIFICATE", Bytes: cert.Certificate[0]},
		f.KeyFile:  {Type: "PRIVATE KEY", Bytes: key},
	} {
		if err := os.WriteFile(path, pem.EncodeToMemory(blk), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return f
}
