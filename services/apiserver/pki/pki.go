// Package pki is the cluster's small certificate authority: it creates the
// cluster CA, issues the API server's serving certificate and client
// certificates (CN = user name, O = groups, as kube-apiserver reads
// them), and writes kubeconfig files.
//
// Callers must:
//
//  1. Keep the CA key private (WriteFiles writes keys 0600).
//  2. Reuse the CA across restarts (LoadCA): certificates signed by an
//     older CA stop verifying when it is replaced.
//
// Example:
//
//	ca, _ := pki.NewCA("podflow-ca")
//	srvCert, srvKey, _ := ca.Issue(pki.Request{CommonName: "podflow-apiserver", Hosts: []string{"127.0.0.1", "localhost"}, Server: true})
//	cert, key, _ := ca.Issue(pki.Request{CommonName: "alice", Groups: []string{"dev"}})
//	kc := pki.Kubeconfig("https://127.0.0.1:6443", ca.CertPEM, cert, key, "alice")
package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"time"
)

// ErrInvalid is wrapped when a certificate or key file cannot be used.
var ErrInvalid = errors.New("pki: invalid certificate or key")

// CA is a certificate authority with its key.
type CA struct {
	Cert    *x509.Certificate
	Key     crypto.Signer
	CertPEM []byte
}

// NewCA creates a self-signed ECDSA P-256 CA valid for ten years.
func NewCA(commonName string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: commonName},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.AddDate(10, 0, 0),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, Key: key, CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}, nil
}

// LoadCA reads a CA written by WriteFiles.
func LoadCA(certFile, keyFile string) (*CA, error) {
	cb, err := os.ReadFile(certFile)
	if err != nil {
		return nil, err
	}
	kb, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, err
	}
	blk, _ := pem.Decode(cb)
	if blk == nil || blk.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("%w: %q holds no PEM certificate", ErrInvalid, certFile)
	}
	cert, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%w: %q: %w", ErrInvalid, certFile, err)
	}
	key, err := ParseKey(kb)
	if err != nil {
		return nil, fmt.Errorf("%w: %q: %w", ErrInvalid, keyFile, err)
	}
	return &CA{Cert: cert, Key: key, CertPEM: cb}, nil
}

// ParseKey reads a PEM private key (PKCS#8, EC or PKCS#1).
func ParseKey(b []byte) (crypto.Signer, error) {
	blk, _ := pem.Decode(b)
	if blk == nil {
		return nil, fmt.Errorf("%w: no PEM block", ErrInvalid)
	}
	if k, err := x509.ParsePKCS8PrivateKey(blk.Bytes); err == nil {
		if s, ok := k.(crypto.Signer); ok {
			return s, nil
		}
	}
	if k, err := x509.ParseECPrivateKey(blk.Bytes); err == nil {
		return k, nil
	}
	if k, err := x509.ParsePKCS1PrivateKey(blk.Bytes); err == nil {
		return k, nil
	}
	return nil, fmt.Errorf("%w: unsupported private key", ErrInvalid)
}

// WriteFiles writes the CA certificate (0644) and key (0600).
func (ca *CA) WriteFiles(certFile, keyFile string) error {
	kb, err := keyPEM(ca.Key)
	if err != nil {
		return err
	}
	if err := os.WriteFile(keyFile, kb, 0o600); err != nil {
		return err
	}
	return os.WriteFile(certFile, ca.CertPEM, 0o644)
}

// Request describes a certificate to issue.
type Request struct {
	// CommonName is the user name of a client certificate.
	CommonName string
	// Groups become the subject's Organization: the user's groups.
	Groups []string
	// Hosts are the DNS names and IP addresses of a serving certificate.
	Hosts []string
	// Server issues a serving certificate (else a client certificate).
	Server bool
	// Peer, with Server, makes it a client certificate too: a raft
	// replica's or a NATS server's, which both serves and dials its peers.
	Peer bool
	// Validity defaults to one year.
	Validity time.Duration
	// NotBefore defaults to an hour ago (tests pass a future or past time).
	NotBefore time.Time
}

// Issue signs a new ECDSA P-256 key's certificate and returns both in PEM.
func (ca *CA) Issue(r Request) (certPEM, privPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	if certPEM, err = ca.Sign(r, key.Public()); err != nil {
		return nil, nil, err
	}
	kb, err := keyPEM(key)
	if err != nil {
		return nil, nil, err
	}
	return certPEM, kb, nil
}

// Sign issues the certificate r describes for pub, a key whose private
// half stays with its holder (a host joining the cluster sends only a
// certificate request), and returns it in PEM.
func (ca *CA) Sign(r Request, pub crypto.PublicKey) (certPEM []byte, err error) {
	nb := r.NotBefore
	if nb.IsZero() {
		nb = time.Now().Add(-time.Hour)
	}
	v := r.Validity
	if v <= 0 {
		v = 365 * 24 * time.Hour
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: r.CommonName, Organization: r.Groups},
		NotBefore:    nb,
		NotAfter:     nb.Add(v),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if r.Server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		if r.Peer {
			tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageClientAuth)
		}
		for _, h := range r.Hosts {
			if ip := net.ParseIP(h); ip != nil {
				tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
			} else {
				tmpl.DNSNames = append(tmpl.DNSNames, h)
			}
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, pub, ca.Key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nil
}

// KeyPEM encodes a private key as PKCS#8 PEM, as Issue and WriteFiles
// write keys.
func KeyPEM(k crypto.Signer) ([]byte, error) { return keyPEM(k) }

func keyPEM(k crypto.Signer) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 126))
	return n
}

// Kubeconfig returns a kubeconfig with one cluster, user and context (all
// named after user, the context current), embedding the certificates.
func Kubeconfig(server string, caPEM, certPEM, keyPEM []byte, user string) []byte {
	b64 := base64.StdEncoding.EncodeToString
	return fmt.Appendf(nil, `apiVersion: v1
kind: Config
clusters:
- name: podflow
  cluster:
    server: %s
    certificate-authority-data: %s
users:
- name: %s
  user:
    client-certificate-data: %s
    client-key-data: %s
contexts:
- name: podflow-%s
  context:
    cluster: podflow
    user: %s
    namespace: default
current-context: podflow-%s
`, server, b64(caPEM), user, b64(certPEM), b64(keyPEM), user, user, user)
}
