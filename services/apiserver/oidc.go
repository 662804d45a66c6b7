package apiserver

// ServiceAccount issuer discovery, as kube-apiserver serves it
// (pkg/serviceaccount/openidmetadata.go): an OpenID Connect discovery
// document at /.well-known/openid-configuration and the key set that
// verifies ServiceAccount tokens at /openid/v1/jwks, so that a relying
// party (a pod, another cluster, a cloud's workload identity) can verify
// a token with stock OIDC libraries.

import (
	"encoding/json"
	"errors"
	"net/http"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/podflow/podflow/services/stage"
)

// OIDC discovery paths.
const (
	OIDCDiscoveryPath = "/.well-known/openid-configuration"
	OIDCJWKSPath      = "/openid/v1/jwks"
)

// IssuerPublisher is the optional Backend capability behind the issuer
// discovery endpoints: the tokens' issuer and the keys that verify them.
type IssuerPublisher interface {
	ServiceAccountIssuer() (issuer string, keys jose.JSONWebKeySet, err error)
}

// oidcDiscovery is kube's openIDMetadata.
type oidcDiscovery struct {
	Issuer        string   `json:"issuer"`
	JWKSURI       string   `json:"jwks_uri"`
	ResponseTypes []string `json:"response_types_supported"`
	SubjectTypes  []string `json:"subject_types_supported"`
	SigningAlgs   []string `json:"id_token_signing_alg_values_supported"`
}

// serveOIDC answers the two discovery paths (false: path is another). The
// jwks_uri is on the host the client asked (from a pod,
// kubernetes.default.svc…), as kube's default is the server's own
// address.
func (s *Server) serveOIDC(w http.ResponseWriter, r *http.Request, path string) bool {
	if path != OIDCDiscoveryPath && path != OIDCJWKSPath {
		return false
	}
	if r.Method != http.MethodGet {
		writeStatus(w, methodNotAllowed(r.Method, r.URL.Path))
		return true
	}
	pub, ok := s.backend.(IssuerPublisher)
	if !ok {
		writeStatus(w, notFoundPath(r.URL.Path))
		return true
	}
	issuer, keys, err := pub.ServiceAccountIssuer()
	if errors.Is(err, ErrNoTokenIssuer) {
		writeStatus(w, notFoundPath(r.URL.Path))
		return true
	}
	if err != nil {
		writeStatus(w, stage.Internal(err))
		return true
	}
	var body any = keys
	ct := "application/jwk-set+json"
	if path == OIDCDiscoveryPath {
		algs := []string{}
		for _, k := range keys.Keys {
			algs = append(algs, k.Algorithm)
		}
		body = oidcDiscovery{Issuer: issuer, JWKSURI: "https://" + r.Host + OIDCJWKSPath,
			ResponseTypes: []string{"id_token"}, SubjectTypes: []string{"public"}, SigningAlgs: algs}
		ct = "application/json"
	}
	b, err := json.Marshal(body)
	if err != nil {
		writeStatus(w, stage.Internal(err))
		return true
	}
	w.Header().Set("Content-Type", ct)
	w.Header().Set("Cache-Control", "public, max-age=3600")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b)
	return true
}
