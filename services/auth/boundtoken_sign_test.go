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
