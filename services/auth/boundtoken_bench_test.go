package auth

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

// BenchmarkIssue is a pod-bound token's Issue.
func BenchmarkIssue(b *testing.B) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		b.Fatal(err)
	}
	bt, err := NewBoundTokens(key, ServiceAccountIssuer, nil)
	if err != nil {
		b.Fatal(err)
	}
	obj := BoundObject{Kind: BoundKindPod, Name: "web-7d9f8c6b5-x2x9q", UID: "5f0c1a3e-8a2b-4c1d-9e7f-0a1b2c3d4e5f", NodeName: "sim-node-042", NodeUID: "0a1b2c3d-8a2b-4c1d-9e7f-5f0c1a3e4e5f"}
	now := time.Now()
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := bt.Issue("default", "default", "9e7f0a1b-8a2b-4c1d-5f0c-1a3e2c3d4e5f", obj, nil, time.Hour, now); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSign compares go-jose's serialization of a token's claims
// with BoundTokens.sign's.
func BenchmarkSign(b *testing.B) {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	bt, _ := NewBoundTokens(key, ServiceAccountIssuer, nil)
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: key}, (&jose.SignerOptions{}).WithType("JWT"))
	if err != nil {
		b.Fatal(err)
	}
	c := boundClaims{Claims: jwt.Claims{Issuer: "x", Subject: "system:serviceaccount:default:default", Audience: jwt.Audience{"a"}, ID: "5f0c1a3e-8a2b-4c1d-9e7f-0a1b2c3d4e5f"},
		Kubernetes: &k8sClaims{Namespace: "default", ServiceAccount: objectRef{Name: "default", UID: "9e7f0a1b-8a2b-4c1d-5f0c-1a3e2c3d4e5f"}, Pod: &objectRef{Name: "web-7d9f8c6b5-x2x9q", UID: "5f0c1a3e-8a2b-4c1d-9e7f-0a1b2c3d4e5f"}}}
	b.Run("jose", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := jwt.Signed(signer).Claims(c).Serialize(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("sign", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := bt.sign(&c); err != nil {
				b.Fatal(err)
			}
		}
	})
}
