package apiserver

import (
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/auth"
)

// Well-known identities of unauthenticated requests.
const (
	UserAnonymous        = "system:anonymous"
	GroupUnauthenticated = "system:unauthenticated"
)

// authenticate runs the chain: a verified client certificate, then a bearer
// token (an OIDC ID token when it looks like a JWT and OIDC is configured,
// else the api stage's static and ServiceAccount tokens), then anonymous.
// On failure the reason is returned for the server log only: the client
// gets a bare 401.
func (s *Server) authenticate(r *http.Request) (*corev1.UserInfo, string) {
	if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
		if s.clientCAs == nil {
			return nil, "client certificate given but no client CA is configured"
		}
		leaf := r.TLS.PeerCertificates[0]
		now := s.now()
		digest := chainDigest(r.TLS.PeerCertificates)
		if !s.certs.verified(digest, now) {
			inter := x509.NewCertPool()
			for _, c := range r.TLS.PeerCertificates[1:] {
				inter.AddCert(c)
			}
			chains, err := leaf.Verify(x509.VerifyOptions{Roots: s.clientCAs, Intermediates: inter, CurrentTime: now,
				KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
			if err != nil {
				return nil, fmt.Sprintf("client certificate %q: %v", leaf.Subject.CommonName, err)
			}
			s.certs.add(digest, chains[0])
		}
		if leaf.Subject.CommonName == "" {
			return nil, "client certificate without a common name"
		}
		return userFromCert(leaf), ""
	}
	if h := r.Header.Get("Authorization"); h != "" {
		token, ok := auth.ParseBearer(h)
		if !ok {
			return nil, "malformed Authorization header"
		}
		if s.oidc != nil && strings.Count(token, ".") == 2 {
			u, err := s.oidc.verify(token, time.Now())
			if err != nil {
				// Bound ServiceAccount tokens are JWTs too (TokenRequest).
				if u, st := s.backend.AuthenticateToken(token); st == nil {
					return u, ""
				}
				return nil, err.Error()
			}
			return u, ""
		}
		u, st := s.backend.AuthenticateToken(token)
		if st != nil {
			return nil, "unknown or malformed bearer token"
		}
		return u, ""
	}
	if s.cfg.Anonymous {
		return &corev1.UserInfo{Username: UserAnonymous, Groups: []string{GroupUnauthenticated}}, ""
	}
	return nil, "no credentials"
}

// userFromCert maps a client certificate to a user as kube-apiserver does:
// CN is the user name, each O a group.
func userFromCert(c *x509.Certificate) *corev1.UserInfo {
	groups := append([]string(nil), c.Subject.Organization...)
	groups = append(groups, auth.GroupAuthenticated)
	return &corev1.UserInfo{Username: c.Subject.CommonName, Groups: groups}
}

// oidcVerifier checks ID tokens against locally configured issuer keys.
type oidcVerifier struct {
	cfg  OIDCConfig
	keys []jose.JSONWebKey
}

var oidcAlgorithms = []jose.SignatureAlgorithm{jose.RS256, jose.RS384, jose.RS512, jose.ES256, jose.ES384, jose.ES512, jose.PS256, jose.PS384, jose.PS512}

func newOIDCVerifier(cfg OIDCConfig) (*oidcVerifier, error) {
	b, err := os.ReadFile(cfg.KeysFile)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidKeys, err)
	}
	keys, err := ParseKeys(b)
	if err != nil {
		return nil, fmt.Errorf("%w: %q: %w", ErrInvalidKeys, cfg.KeysFile, err)
	}
	return &oidcVerifier{cfg: cfg, keys: keys}, nil
}

// ParseKeys reads a JWKS document or PEM public keys (PKIX "PUBLIC KEY" or
// "CERTIFICATE" blocks). Private and symmetric keys are refused.
func ParseKeys(b []byte) ([]jose.JSONWebKey, error) {
	var out []jose.JSONWebKey
	if t := strings.TrimSpace(string(b)); strings.HasPrefix(t, "{") {
		var set jose.JSONWebKeySet
		if err := json.Unmarshal(b, &set); err != nil {
			return nil, fmt.Errorf("JWKS: %w", err)
		}
		out = set.Keys
	} else {
		for rest := b; ; {
			var blk *pem.Block
			blk, rest = pem.Decode(rest)
			if blk == nil {
				break
			}
			switch blk.Type {
			case "PUBLIC KEY":
				k, err := x509.ParsePKIXPublicKey(blk.Bytes)
				if err != nil {
					return nil, err
				}
				out = append(out, jose.JSONWebKey{Key: k})
			case "CERTIFICATE":
				c, err := x509.ParseCertificate(blk.Bytes)
				if err != nil {
					return nil, err
				}
				out = append(out, jose.JSONWebKey{Key: c.PublicKey})
			}
		}
	}
	for i, k := range out {
		if !k.IsPublic() {
			return nil, fmt.Errorf("key %d (kid %q) is not a public key", i, k.KeyID)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no public key found")
	}
	return out, nil
}

type oidcClaims struct {
	jwt.Claims
	Email         string `json:"email"`
	EmailVerified *bool  `json:"email_verified"`
}

// verify checks signature, issuer, audience and validity times, and maps
// the claims to a user.
func (v *oidcVerifier) verify(token string, now time.Time) (*corev1.UserInfo, error) {
	tok, err := jwt.ParseSigned(token, oidcAlgorithms)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidToken, err)
	}
	kid := ""
	if len(tok.Headers) > 0 {
		kid = tok.Headers[0].KeyID
	}
	var std oidcClaims
	all := map[string]any{}
	verified := false
	for _, k := range v.keys {
		if kid != "" && k.KeyID != "" && k.KeyID != kid {
			continue
		}
		if err := tok.Claims(k.Key, &std, &all); err == nil {
			verified = true
			break
		}
	}
	if !verified {
		return nil, fmt.Errorf("%w: no configured key verifies the signature (kid %q)", ErrInvalidToken, kid)
	}
	if err := std.Claims.ValidateWithLeeway(jwt.Expected{Issuer: v.cfg.IssuerURL, AnyAudience: jwt.Audience{v.cfg.ClientID}, Time: now}, time.Minute); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidToken, err)
	}
	if std.Expiry == nil {
		return nil, fmt.Errorf("%w: no exp claim", ErrInvalidToken)
	}
	name, _ := all[v.cfg.UsernameClaim].(string)
	if name == "" {
		return nil, fmt.Errorf("%w: claim %q is missing or not a string", ErrInvalidToken, v.cfg.UsernameClaim)
	}
	if v.cfg.UsernameClaim == "email" && std.EmailVerified != nil && !*std.EmailVerified {
		return nil, fmt.Errorf("%w: email %q is not verified", ErrInvalidToken, name)
	}
	switch p := v.cfg.UsernamePrefix; {
	case p == "-":
	case p != "":
		name = p + name
	case v.cfg.UsernameClaim != "email":
		name = v.cfg.IssuerURL + "#" + name
	}
	u := &corev1.UserInfo{Username: name}
	if v.cfg.GroupsClaim != "" {
		switch g := all[v.cfg.GroupsClaim].(type) {
		case string:
			u.Groups = append(u.Groups, v.cfg.GroupsPrefix+g)
		case []any:
			for _, e := range g {
				s, ok := e.(string)
				if !ok {
					return nil, fmt.Errorf("%w: claim %q holds a non-string", ErrInvalidToken, v.cfg.GroupsClaim)
				}
				u.Groups = append(u.Groups, v.cfg.GroupsPrefix+s)
			}
		case nil:
		default:
			return nil, fmt.Errorf("%w: claim %q is neither a string nor a list", ErrInvalidToken, v.cfg.GroupsClaim)
		}
	}
	u.Groups = append(u.Groups, auth.GroupAuthenticated)
	return u, nil
}
