package apiserver_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

// TestServiceAccountIssuerDiscovery: the OIDC discovery document names
// the tokens' issuer and a jwks_uri whose key set verifies a token the
// TokenRequest API issued (the conformance test "ServiceAccountIssuerDiscovery
// should support OIDC discovery of service account issuer" verifies its
// pod's token so, with go-oidc).
func TestServiceAccountIssuerDiscovery(t *testing.T) {
	t.Parallel()
	s := startSystem(t, options{})
	admin := s.client(t, adminToken)
	sas := s.url + "/api/v1/namespaces/default/serviceaccounts"
	if code, body, _ := do(t, admin, "POST", sas, "application/json", `{"apiVersion":"v1","kind":"ServiceAccount","metadata":{"name":"robot"}}`); code != http.StatusCreated {
		t.Fatalf("create ServiceAccount: %d %v", code, body)
	}
	code, body, _ := do(t, admin, "POST", sas+"/robot/token", "application/json",
		`{"apiVersion":"authentication.k8s.io/v1","kind":"TokenRequest","spec":{"audiences":["oidc-discovery-test"],"expirationSeconds":600}}`)
	if code != http.StatusCreated {
		t.Fatalf("TokenRequest: %d %v", code, body)
	}
	token, _ := path(body, "status.token").(string)

	get := func(url, wantType string, into any) {
		t.Helper()
		req, _ := http.NewRequest("GET", url, nil)
		req.Header.Set("Authorization", "Bearer "+token) // as the pod asks, with its own token
		resp, err := admin.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != wantType {
			t.Fatalf("GET %s: %d %s %s", url, resp.StatusCode, resp.Header.Get("Content-Type"), b)
		}
		if err := json.Unmarshal(b, into); err != nil {
			t.Fatalf("GET %s: %v: %s", url, err, b)
		}
	}
	var doc struct {
		Issuer  string   `json:"issuer"`
		JWKSURI string   `json:"jwks_uri"`
		Algs    []string `json:"id_token_signing_alg_values_supported"`
	}
	get(s.url+"/.well-known/openid-configuration", "application/json", &doc)
	if doc.Issuer != "https://kubernetes.default.svc.cluster.local" || !strings.HasSuffix(doc.JWKSURI, "/openid/v1/jwks") ||
		len(doc.Algs) != 1 || doc.Algs[0] != "ES256" {
		t.Fatalf("discovery document %+v", doc)
	}
	var keys jose.JSONWebKeySet
	get(s.url+"/openid/v1/jwks", "application/jwk-set+json", &keys)
	if len(keys.Keys) != 1 || keys.Keys[0].KeyID == "" || keys.Keys[0].Use != "sig" || !keys.Keys[0].IsPublic() {
		t.Fatalf("key set %+v", keys)
	}
	parsed, err := jwt.ParseSigned(token, []jose.SignatureAlgorithm{jose.ES256})
	if err != nil {
		t.Fatal(err)
	}
	var claims jwt.Claims
	if err := parsed.Claims(keys.Keys[0].Key, &claims); err != nil {
		t.Fatalf("the token does not verify with the published key: %v", err)
	}
	if claims.Issuer != doc.Issuer || claims.Subject != "system:serviceaccount:default:robot" {
		t.Errorf("claims %+v", claims)
	}
	if code, _, _ := do(t, admin, "POST", s.url+"/openid/v1/jwks", "application/json", `{}`); code != http.StatusMethodNotAllowed {
		t.Errorf("POST jwks: %d, want 405", code)
	}
}
