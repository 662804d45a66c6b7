package auth

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

// TestSignAsJose: sign makes the token go-jose's signer made before it:
// the same header, the same claims, an ES256 signature go-jose verifies
// with the public key (and not with another key).
func TestSignAsJose(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	bt, err := NewBoundTokens(key, ServiceAccountIssuer, nil)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: key}, (&jose.SignerOptions{}).WithType("JWT"))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1796611525, 0)
	c := boundClaims{Claims: jwt.Claims{Issuer: ServiceAccountIssuer, Subject: "system:serviceaccount:team:robot", Audience: jwt.Audience{"a<b>&c", "vault"},
		Expiry: jwt.NewNumericDate(now.Add(time.Hour)), IssuedAt: jwt.NewNumericDate(now), NotBefore: jwt.NewNumericDate(now), ID: "id-1"},
		Kubernetes: &k8sClaims{Namespace: "team", ServiceAccount: objectRef{Name: "robot", UID: "uid-robot"},
			Pod: &objectRef{Name: "web", UID: "uid-web"}, Node: &nodeRef{Name: "n1"}}}
	ours, err := bt.sign(&c)
	if err != nil {
		t.Fatal(err)
	}
	theirs, err := jwt.Signed(signer).Claims(c).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	part := func(tok string, i int) any {
		t.Helper()
		b, err := base64.RawURLEncoding.DecodeString(strings.Split(tok, ".")[i])
		if err != nil {
			t.Fatal(err)
		}
		var v any
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	for i, what := range []string{"header", "claims"} {
		if a, b := part(ours, i), part(theirs, i); !reflect.DeepEqual(a, b) {
			t.Errorf("%s %v, go-jose's %v", what, a, b)
		}
	}
	tok, err := jwt.ParseSigned(ours, []jose.SignatureAlgorithm{jose.ES256})
	if err != nil {
		t.Fatal(err)
	}
	var got boundClaims
	if err := tok.Claims(&key.PublicKey, &got); err != nil {
		t.Fatalf("go-jose does not verify the token: %v", err)
	}
	if !reflect.DeepEqual(got, c) {
		t.Errorf("verified claims %+v, want %+v", got, c)
	}
	other, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err := tok.Claims(&other.PublicKey, &got); err == nil {
		t.Errorf("the token verifies with another key")
	}
	if _, err := NewBoundTokens(mustKey(t, elliptic.P384()), ServiceAccountIssuer, nil); err == nil {
		t.Errorf("a P-384 key was taken for ES256")
	}
}

func mustKey(t *testing.T, c elliptic.Curve) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(c, rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// TestClaimsJSONAsMarshal: appendClaimsJSON writes the very bytes
// json.Marshal writes of a token's claims: fields present or omitted,
// one audience or several, strings to escape, and a Node with a name or
// a uid alone.
func TestClaimsJSONAsMarshal(t *testing.T) {
	now := jwt.NewNumericDate(time.Unix(1796611525, 0))
	later := jwt.NewNumericDate(time.Unix(1796615125, 0))
	sa := objectRef{Name: "robot", UID: "uid-robot"}
	for _, tc := range []struct {
		name string
		c    boundClaims
	}{
		{"empty", boundClaims{}},
		{"a pod's token", boundClaims{Claims: jwt.Claims{Issuer: ServiceAccountIssuer, Subject: "system:serviceaccount:team:robot", Audience: jwt.Audience{"https://kubernetes.default.svc.cluster.local"},
			Expiry: later, NotBefore: now, IssuedAt: now, ID: "5f0c1a3e-8a2b-4c1d-9e7f-0a1b2c3d4e5f"},
			Kubernetes: &k8sClaims{Namespace: "team", ServiceAccount: sa, Pod: &objectRef{Name: "web", UID: "uid-web"}, Node: &nodeRef{Name: "n1", UID: "uid-n1"}}}},
		{"a secret's token, audiences", boundClaims{Claims: jwt.Claims{Issuer: "i", Audience: jwt.Audience{"a", "b", "c"}, Expiry: later},
			Kubernetes: &k8sClaims{Namespace: "team", ServiceAccount: sa, Secret: &objectRef{Name: "s", UID: "uid-s"}}}},
		{"no audience, an empty one", boundClaims{Claims: jwt.Claims{Subject: "s", Audience: jwt.Audience{}, IssuedAt: now}}},
		{"an empty audience string", boundClaims{Claims: jwt.Claims{Audience: jwt.Audience{""}}}},
		{"a node's name alone", boundClaims{Kubernetes: &k8sClaims{Namespace: "ns", ServiceAccount: sa, Pod: &objectRef{}, Node: &nodeRef{Name: "n1"}}}},
		{"a node's uid alone", boundClaims{Kubernetes: &k8sClaims{ServiceAccount: sa, Node: &nodeRef{UID: "u"}}}},
		{"an empty node", boundClaims{Kubernetes: &k8sClaims{Node: &nodeRef{}}}},
		{"strings to escape", boundClaims{Claims: jwt.Claims{Issuer: `a"b\c`, Subject: "<script>&amp;</script>", Audience: jwt.Audience{"tab\there", "nl\n\r\b\f\x01\x7f"},
			ID: "é ☃ \u2028\u2029 \xff\xfe"}, Kubernetes: &k8sClaims{Namespace: "日本\b\f", ServiceAccount: objectRef{Name: "\x00", UID: "\\u0041"}}}},
		{"negative and zero dates", boundClaims{Claims: jwt.Claims{Expiry: jwt.NewNumericDate(time.Unix(-5, 0)), NotBefore: new(jwt.NumericDate)}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want, err := json.Marshal(&tc.c)
			if err != nil {
				t.Fatal(err)
			}
			if got := appendClaimsJSON(nil, &tc.c); string(got) != string(want) {
				t.Errorf("got  %s\nwant %s", got, want)
			}
		})
	}
}

// FuzzClaimsJSON: appendClaimsJSON is json.Marshal for any strings.
func FuzzClaimsJSON(f *testing.F) {
	f.Add("iss", "sub", "aud", "aud2", "jti", "ns", "sa", "pod", "node", int64(1796611525))
	f.Add(`"\`, "<>&", "\u2028", "", "\xff", "\x00\x1f", "é", "", "", int64(-1))
	f.Fuzz(func(t *testing.T, iss, sub, aud, aud2, jti, ns, sa, pod, node string, at int64) {
		c := boundClaims{Claims: jwt.Claims{Issuer: iss, Subject: sub, Audience: jwt.Audience{aud}, ID: jti, Expiry: jwt.NewNumericDate(time.Unix(at, 0))},
			Kubernetes: &k8sClaims{Namespace: ns, ServiceAccount: objectRef{Name: sa, UID: jti}, Pod: &objectRef{Name: pod, UID: sub}, Node: &nodeRef{Name: node, UID: aud2}}}
		if aud2 != "" {
			c.Audience = append(c.Audience, aud2)
		}
		want, err := json.Marshal(&c)
		if err != nil {
			t.Fatal(err)
		}
		if got := appendClaimsJSON(nil, &c); string(got) != string(want) {
			t.Errorf("got  %s\nwant %s", got, want)
		}
	})
}
