package apiserver

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/podflow/podflow/services/apiserver/pki"
)

func issueClient(t testing.TB, ca *pki.CA, cn string, notBefore time.Time, validity time.Duration) *x509.Certificate {
	t.Helper()
	crt, _, err := ca.Issue(pki.Request{CommonName: cn, Groups: []string{"team"}, NotBefore: notBefore, Validity: validity})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := pem.Decode(crt)
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func certRequest(certs ...*x509.Certificate) *http.Request {
	r := httptest.NewRequest("GET", "/api/v1/pods", nil)
	r.TLS = &tls.ConnectionState{PeerCertificates: certs}
	return r
}

// TestClientCertCacheRefusesWhatVerifyRefuses attacks the verified-chain
// cache: a certificate accepted once is refused after it expires, and a
// certificate with the same name from an untrusted CA, presented after the
// trusted one was remembered, is refused.
func TestClientCertCacheRefusesWhatVerifyRefuses(t *testing.T) {
	trusted, err := pki.NewCA("podflow-test-ca")
	if err != nil {
		t.Fatal(err)
	}
	rogue, err := pki.NewCA("podflow-test-ca") // the same name, another key
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(trusted.Cert)
	clock := time.Now()
	s := &Server{clientCAs: pool, certs: newCertCache(certCacheSize), now: func() time.Time { return clock }}

	alice := issueClient(t, trusted, "alice", clock.Add(-time.Minute), time.Hour)
	for range 2 { // verified, then from the cache
		if u, why := s.authenticate(certRequest(alice)); u.GetUsername() != "alice" {
			t.Fatalf("alice's certificate: user %v, %s", u, why)
		}
	}
	if len(s.certs.m) != 1 {
		t.Fatalf("%d chains remembered, want 1", len(s.certs.m))
	}

	forged := issueClient(t, rogue, "alice", clock.Add(-time.Minute), time.Hour)
	if u, _ := s.authenticate(certRequest(forged)); u != nil {
		t.Fatalf("a certificate from an untrusted CA authenticated as %v", u)
	}
	if u, _ := s.authenticate(certRequest(alice, forged)); u == nil {
		t.Fatal("alice with an extra (unused) intermediate was refused")
	}

	clock = alice.NotAfter.Add(time.Second)
	if u, why := s.authenticate(certRequest(alice)); u != nil {
		t.Fatalf("an expired certificate authenticated as %v (it had been verified before it expired)", u)
	} else if why == "" {
		t.Fatal("refused without a reason")
	}
}

// TestCertCacheBounded: the cache holds at most its size.
func TestCertCacheBounded(t *testing.T) {
	c := newCertCache(10)
	leaf := &x509.Certificate{Raw: []byte{0}, NotAfter: time.Now().Add(time.Hour)}
	for i := range 100 {
		leaf.Raw = []byte{byte(i)}
		c.add(chainDigest([]*x509.Certificate{leaf}), []*x509.Certificate{leaf})
		if len(c.m) > 10 {
			t.Fatalf("%d entries after %d adds, max 10", len(c.m), i+1)
		}
	}
}

// BenchmarkAuthenticateClientCert: a request with a client certificate,
// verified every time (as before the cache) and from the cache.
func BenchmarkAuthenticateClientCert(b *testing.B) {
	ca, err := pki.NewCA("podflow-bench-ca")
	if err != nil {
		b.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	leaf := issueClient(b, ca, "alice", time.Now().Add(-time.Minute), time.Hour)
	r := certRequest(leaf)
	b.Run("verify", func(b *testing.B) {
		s := &Server{clientCAs: pool, certs: newCertCache(0), now: time.Now}
		for b.Loop() {
			s.certs.m = map[[32]byte]time.Time{}
			if u, _ := s.authenticate(r); u == nil {
				b.Fatal("refused")
			}
		}
	})
	b.Run("cached", func(b *testing.B) {
		s := &Server{clientCAs: pool, certs: newCertCache(certCacheSize), now: time.Now}
		for b.Loop() {
			if u, _ := s.authenticate(r); u == nil {
				b.Fatal("refused")
			}
		}
	})
}
