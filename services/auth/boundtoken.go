package auth

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"github.com/google/uuid"
)

// ErrInvalidBoundToken is wrapped by BoundTokens.Verify for a token it
// refuses: malformed, not signed by the key, of another issuer or
// audience, expired or not yet valid.
var ErrInvalidBoundToken = errors.New("auth: invalid bound service account token")

// Bound ServiceAccount tokens (the TokenRequest API, `kubectl create
// token`): JWTs signed ES256 by the cluster's ServiceAccount key, with
// Kubernetes' claims — iss, sub system:serviceaccount:<ns>:<name>, aud,
// exp, iat, nbf, jti (a random UUID: the token's credential id) and
// kubernetes.io.{namespace, serviceaccount.{name, uid}},
// and for a token bound to an object kubernetes.io.pod or
// kubernetes.io.secret {name, uid}. A token authenticates only until it
// expires and only while its ServiceAccount — and the object it is bound
// to — exists with the uid it names (TokenAuthenticator).
const (
	// MinBoundTokenExpiration is the shortest expirationSeconds a
	// TokenRequest may ask for (Kubernetes': 10 minutes).
	MinBoundTokenExpiration = 10 * time.Minute
	// DefaultBoundTokenExpiration is used when a TokenRequest names none
	// (Kubernetes': one hour).
	DefaultBoundTokenExpiration = time.Hour
	// MaxBoundTokenExpiration caps expirationSeconds (Kubernetes caps
	// with --service-account-max-token-expiration; 24 h here).
	MaxBoundTokenExpiration = 24 * time.Hour
	// MaxTokenAudienceBytes bounds the audience of a projected
	// serviceAccountToken (a node's token request), checked at admission
	// and by the api stage.
	MaxTokenAudienceBytes = 1024
)

// MaxTokenExpirationSeconds is the longest expirationSeconds a
// TokenRequest or a projected serviceAccountToken may name, as
// kube-apiserver validates it (2^32 seconds; Issue caps what it grants at
// MaxBoundTokenExpiration).
const MaxTokenExpirationSeconds = 1 << 32

// CheckTokenExpiration is kube-apiserver's validation of the
// expirationSeconds of a TokenRequest, of a projected serviceAccountToken
// and of a node's token request, in one place: it returns why seconds is
// refused — below MinBoundTokenExpiration, or above
// MaxTokenExpirationSeconds — in Kubernetes' words, or "" when it is
// accepted. An expiration the caller leaves unset is not checked.
func CheckTokenExpiration(seconds int64) (why string) {
	switch {
	case seconds < int64(MinBoundTokenExpiration/time.Second):
		return "may not specify a duration less than 10 minutes"
	case seconds > MaxTokenExpirationSeconds:
		return "may not specify a duration larger than 2^32 seconds"
	}
	return ""
}

// BoundTokens issues and verifies bound ServiceAccount tokens with one
// ECDSA key. It is safe for concurrent use.
type BoundTokens struct {
	key    *ecdsa.PrivateKey // nil: verify only
	pub    *ecdsa.PublicKey
	issuer string
	// audiences are what a token must name one of to authenticate here
	// (kube-apiserver's --api-audiences); a TokenRequest without
	// audiences gets them all.
	audiences []string
}

// BoundTokenClaims are what a bound token asserts.
type BoundTokenClaims struct {
	Namespace, Name, UID string
	// Object is what the token is bound to besides its ServiceAccount
	// (zero: nothing).
	Object    BoundObject
	Audiences []string
	Expiry    time.Time
	// ID is the token's jti, its credential id ("" for a token issued
	// before tokens carried one).
	ID string
}

// Kinds of object a token may be bound to (TokenRequest
// spec.boundObjectRef), as Kubernetes: a Pod or a Secret, in the
// ServiceAccount's namespace.
const (
	BoundKindPod    = "Pod"
	BoundKindSecret = "Secret"
)

// BoundObject is the object a token is bound to: BoundKindPod or
// BoundKindSecret, its name and its uid. The zero value binds to nothing.
// A pod's token also names the node the pod was bound to when it was
// issued (NodeName, and NodeUID when that Node was stored), as Kubernetes'
// kubernetes.io.node claim: information, not a binding.
type BoundObject struct{ Kind, Name, UID, NodeName, NodeUID string }

type objectRef struct {
	Name string `json:"name"`
	UID  string `json:"uid"`
}

type k8sClaims struct {
	Namespace      string     `json:"namespace"`
	ServiceAccount objectRef  `json:"serviceaccount"`
	Pod            *objectRef `json:"pod,omitempty"`
	Secret         *objectRef `json:"secret,omitempty"`
	Node           *nodeRef   `json:"node,omitempty"`
}

// nodeRef is the kubernetes.io.node claim: a uid only when the Node was
// stored (Kubernetes' ref, both fields omitempty).
type nodeRef struct {
	Name string `json:"name,omitempty"`
	UID  string `json:"uid,omitempty"`
}

type boundClaims struct {
	jwt.Claims
	Kubernetes *k8sClaims `json:"kubernetes.io,omitempty"`
}

// NewBoundTokens returns an issuer and verifier of tokens signed with key
// for issuer, accepted for audiences (default: the issuer).
func NewBoundTokens(key *ecdsa.PrivateKey, issuer string, audiences []string) (*BoundTokens, error) {
	if key == nil || issuer == "" {
		return nil, fmt.Errorf("%w: bound tokens need a key and an issuer", ErrInvalidConfig)
	}
	if len(audiences) == 0 {
		audiences = []string{issuer}
	}
	if key.Curve != elliptic.P256() {
		return nil, fmt.Errorf("%w: bound tokens are signed ES256: the key must be a P-256 key", ErrInvalidConfig)
	}
	return &BoundTokens{key: key, pub: &key.PublicKey, issuer: issuer, audiences: append([]string(nil), audiences...)}, nil
}

// Audiences are the audiences this server accepts (and a TokenRequest
// without audiences is given).
func (b *BoundTokens) Audiences() []string { return append([]string(nil), b.audiences...) }

// Issue signs a token for the ServiceAccount namespace/name with uid,
// bound to obj (of its namespace; the zero BoundObject: to nothing), for
// audiences (default Audiences()), valid from now for expiration
// (clamped to [MinBoundTokenExpiration, MaxBoundTokenExpiration]; 0 is
// DefaultBoundTokenExpiration). It returns the token and its expiry.
func (b *BoundTokens) Issue(namespace, name, uid string, obj BoundObject, audiences []string, expiration time.Duration, now time.Time) (string, time.Time, error) {
	if namespace == "" || name == "" || uid == "" {
		return "", time.Time{}, fmt.Errorf("%w: a token needs the ServiceAccount's namespace, name and uid", ErrInvalidBoundToken)
	}
	k := &k8sClaims{Namespace: namespace, ServiceAccount: objectRef{Name: name, UID: uid}}
	ref := &objectRef{Name: obj.Name, UID: obj.UID}
	switch {
	case obj == BoundObject{}:
	case obj.Name == "" || obj.UID == "":
		return "", time.Time{}, fmt.Errorf("%w: a bound object needs a name and a uid", ErrInvalidBoundToken)
	case obj.Kind != BoundKindPod && (obj.NodeName != "" || obj.NodeUID != ""):
		return "", time.Time{}, fmt.Errorf("%w: only a pod's token names a node", ErrInvalidBoundToken)
	case obj.Kind == BoundKindPod:
		k.Pod = ref
		if obj.NodeName != "" {
			k.Node = &nodeRef{Name: obj.NodeName, UID: obj.NodeUID}
		}
	case obj.Kind == BoundKindSecret:
		k.Secret = ref
	default:
		return "", time.Time{}, fmt.Errorf("%w: a token cannot be bound to a %s", ErrInvalidBoundToken, obj.Kind)
	}
	switch {
	case expiration == 0:
		expiration = DefaultBoundTokenExpiration
	case expiration < MinBoundTokenExpiration:
		expiration = MinBoundTokenExpiration
	case expiration > MaxBoundTokenExpiration:
		expiration = MaxBoundTokenExpiration
	}
	if len(audiences) == 0 {
		audiences = b.audiences
	}
	now = now.Truncate(time.Second)
	exp := now.Add(expiration)
	c := boundClaims{Claims: jwt.Claims{
		Issuer: b.issuer, Subject: ServiceAccountUsername(namespace, name), Audience: jwt.Audience(audiences),
		Expiry: jwt.NewNumericDate(exp), IssuedAt: jwt.NewNumericDate(now), NotBefore: jwt.NewNumericDate(now),
		ID: uuid.NewString(),
	}, Kubernetes: k}
	tok, err := b.sign(&c)
	if err != nil {
		return "", time.Time{}, fmt.Errorf("auth: sign bound token: %w", err)
	}
	return tok, exp, nil
}

// jwtHeader is the encoded JOSE header of every token: ES256, type JWT
// (what go-jose's signer, WithType("JWT"), writes).
var jwtHeader = base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"ES256","typ":"JWT"}`))

// sign serializes c as a JWS compact ES256 token (RFC 7515, 7518 3.4):
// the header, the claims' JSON and the signature r||s, each base64url.
// It is what go-jose's jwt.Signed(...).Claims(c).Serialize() makes, in
// one buffer and without go-jose's JSON round trip of the claims.
func (b *BoundTokens) sign(c *boundClaims) (string, error) {
	var scratch [768]byte
	payload := appendClaimsJSON(scratch[:0], c)
	enc := base64.RawURLEncoding
	const sigLen = 64 // P-256: r and s of 32 bytes each
	buf := make([]byte, 0, len(jwtHeader)+1+enc.EncodedLen(len(payload))+1+enc.EncodedLen(sigLen))
	buf = append(buf, jwtHeader...)
	buf = append(buf, '.')
	buf = enc.AppendEncode(buf, payload)
	digest := sha256.Sum256(buf)
	r, s, err := ecdsa.Sign(rand.Reader, b.key, digest[:])
	if err != nil {
		return "", err
	}
	var sig [sigLen]byte
	r.FillBytes(sig[:sigLen/2])
	s.FillBytes(sig[sigLen/2:])
	buf = append(buf, '.')
	buf = enc.AppendEncode(buf, sig[:])
	return string(buf), nil
}

// appendClaimsJSON appends c's JSON, byte for byte what json.Marshal(c)
// makes of it (the fields in their order, omitempty, go-jose's Audience
// and NumericDate encodings, strings escaped as encoding/json escapes
// them), without reflection: a token's claims are a third of the cost of
// its signature when json.Marshal encodes them.
func appendClaimsJSON(buf []byte, c *boundClaims) []byte {
	buf = append(buf, '{')
	field := func(name string) {
		if buf[len(buf)-1] != '{' {
			buf = append(buf, ',')
		}
		buf = append(buf, '"')
		buf = append(buf, name...)
		buf = append(buf, '"', ':')
	}
	str := func(name, v string) {
		if v != "" {
			field(name)
			buf = appendJSONString(buf, v)
		}
	}
	date := func(name string, d *jwt.NumericDate) {
		if d != nil {
			field(name)
			buf = strconv.AppendInt(buf, int64(*d), 10)
		}
	}
	str("iss", c.Issuer)
	str("sub", c.Subject)
	switch aud := c.Audience; {
	case len(aud) == 0:
	case !slices.ContainsFunc(aud, needsJSONEscape):
		field("aud")
		if len(aud) == 1 {
			buf = appendJSONString(buf, aud[0])
			break
		}
		buf = append(buf, '[')
		for i, a := range aud {
			if i > 0 {
				buf = append(buf, ',')
			}
			buf = appendJSONString(buf, a)
		}
		buf = append(buf, ']')
	default:
		// Audience is a json.Marshaler: encoding/json compacts what
		// it makes, which escapes control characters its own way.
		field("aud")
		q, _ := json.Marshal(aud) // strings always encode
		buf = append(buf, q...)
	}
	date("exp", c.Expiry)
	date("nbf", c.NotBefore)
	date("iat", c.IssuedAt)
	str("jti", c.ID)
	if k := c.Kubernetes; k != nil {
		field("kubernetes.io")
		buf = append(buf, `{"namespace":`...)
		buf = appendJSONString(buf, k.Namespace)
		buf = append(buf, `,"serviceaccount":`...)
		buf = appendObjectRef(buf, k.ServiceAccount)
		if k.Pod != nil {
			buf = append(buf, `,"pod":`...)
			buf = appendObjectRef(buf, *k.Pod)
		}
		if k.Secret != nil {
			buf = append(buf, `,"secret":`...)
			buf = appendObjectRef(buf, *k.Secret)
		}
		if k.Node != nil {
			buf = append(buf, `,"node":{`...)
			if k.Node.Name != "" {
				buf = append(buf, `"name":`...)
				buf = appendJSONString(buf, k.Node.Name)
			}
			if k.Node.UID != "" {
				if k.Node.Name != "" {
					buf = append(buf, ',')
				}
				buf = append(buf, `"uid":`...)
				buf = appendJSONString(buf, k.Node.UID)
			}
			buf = append(buf, '}')
		}
		buf = append(buf, '}')
	}
	return append(buf, '}')
}

func appendObjectRef(buf []byte, r objectRef) []byte {
	buf = append(buf, `{"name":`...)
	buf = appendJSONString(buf, r.Name)
	buf = append(buf, `,"uid":`...)
	buf = appendJSONString(buf, r.UID)
	return append(buf, '}')
}

// appendJSONString appends s quoted as encoding/json quotes it: a string
// of printable ASCII but for the characters it escapes (", \, and <, >
// and & for HTML) as it is, any other through json.Marshal.
func appendJSONString(buf []byte, s string) []byte {
	if needsJSONEscape(s) {
		q, _ := json.Marshal(s) // a string always encodes
		return append(buf, q...)
	}
	buf = append(buf, '"')
	buf = append(buf, s...)
	return append(buf, '"')
}

// needsJSONEscape reports whether s holds a byte encoding/json does not
// copy as it is into a string (HTML-escaping, as json.Marshal).
func needsJSONEscape(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return true
		}
	}
	return false
}

// Verify checks a token's signature, issuer, audience (one of
// Audiences()) and validity times at now and returns its claims. It does
// not check that the ServiceAccount exists: TokenAuthenticator does.
func (b *BoundTokens) Verify(token string, now time.Time) (BoundTokenClaims, error) {
	return b.VerifyFor(token, b.audiences, now)
}

// VerifyFor is Verify for a token that must name one of audiences (a
// TokenReview's spec.audiences) instead of one of Audiences().
func (b *BoundTokens) VerifyFor(token string, audiences []string, now time.Time) (BoundTokenClaims, error) {
	tok, err := jwt.ParseSigned(token, []jose.SignatureAlgorithm{jose.ES256})
	if err != nil {
		return BoundTokenClaims{}, fmt.Errorf("%w: %w", ErrInvalidBoundToken, err)
	}
	var c boundClaims
	if err := tok.Claims(b.pub, &c); err != nil {
		return BoundTokenClaims{}, fmt.Errorf("%w: %w", ErrInvalidBoundToken, err)
	}
	if err := c.Claims.ValidateWithLeeway(jwt.Expected{Issuer: b.issuer, AnyAudience: jwt.Audience(audiences), Time: now}, time.Minute); err != nil {
		return BoundTokenClaims{}, fmt.Errorf("%w: %w", ErrInvalidBoundToken, err)
	}
	k := c.Kubernetes
	if c.Expiry == nil || k == nil || k.Namespace == "" || k.ServiceAccount.Name == "" || k.ServiceAccount.UID == "" ||
		c.Subject != ServiceAccountUsername(k.Namespace, k.ServiceAccount.Name) {
		return BoundTokenClaims{}, fmt.Errorf("%w: missing or inconsistent claims", ErrInvalidBoundToken)
	}
	var obj BoundObject
	switch {
	case k.Pod != nil && k.Secret != nil:
		return BoundTokenClaims{}, fmt.Errorf("%w: bound to a pod and a secret", ErrInvalidBoundToken)
	case k.Pod != nil:
		obj = BoundObject{Kind: BoundKindPod, Name: k.Pod.Name, UID: k.Pod.UID}
		if k.Node != nil {
			obj.NodeName, obj.NodeUID = k.Node.Name, k.Node.UID
		}
	case k.Secret != nil:
		obj = BoundObject{Kind: BoundKindSecret, Name: k.Secret.Name, UID: k.Secret.UID}
	}
	if obj.Kind != "" && (obj.Name == "" || obj.UID == "") {
		return BoundTokenClaims{}, fmt.Errorf("%w: a bound %s without a name or uid", ErrInvalidBoundToken, obj.Kind)
	}
	return BoundTokenClaims{Namespace: k.Namespace, Name: k.ServiceAccount.Name, UID: k.ServiceAccount.UID, Object: obj,
		Audiences: c.Audience, Expiry: c.Expiry.Time(), ID: c.ID}, nil
}

// TokenAudiences returns the audiences a token signed by b names,
// whatever they are (Verify checks them).
func (b *BoundTokens) TokenAudiences(token string) ([]string, error) {
	tok, err := jwt.ParseSigned(token, []jose.SignatureAlgorithm{jose.ES256})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidBoundToken, err)
	}
	var c jwt.Claims
	if err := tok.Claims(b.pub, &c); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidBoundToken, err)
	}
	return c.Audience, nil
}

// LoadOrCreateSigningKey reads the ECDSA P-256 ServiceAccount signing key
// (PEM, PKCS#8) at path, creating it (mode 0600) when missing.
func LoadOrCreateSigningKey(path string) (*ecdsa.PrivateKey, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, err
		}
		der, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			return nil, err
		}
		if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
			return nil, fmt.Errorf("auth: write signing key %q: %w", path, err)
		}
		return key, nil
	}
	if err != nil {
		return nil, fmt.Errorf("auth: read signing key %q: %w", path, err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		return nil, fmt.Errorf("%w: signing key %q holds no PEM block", ErrInvalidConfig, path)
	}
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%w: signing key %q: %w", ErrInvalidConfig, path, err)
	}
	key, ok := k.(*ecdsa.PrivateKey)
	if !ok || key.Curve != elliptic.P256() {
		return nil, fmt.Errorf("%w: signing key %q is not ECDSA P-256", ErrInvalidConfig, path)
	}
	return key, nil
}

// ServiceAccountIssuer is the iss (and default audience) of bound
// ServiceAccount tokens, kube-apiserver's default
// --service-account-issuer.
const ServiceAccountIssuer = "https://kubernetes.default.svc.cluster.local"

// LoadBoundTokens returns the BoundTokens of the ECDSA key at path
// (LoadOrCreateSigningKey: created if missing; every api replica must
// share it), issued by ServiceAccountIssuer. They sign bound
// ServiceAccount tokens (the TokenRequest API, `kubectl create token`,
// projected volumes) and authenticate them.
func LoadBoundTokens(path string) (*BoundTokens, error) {
	key, err := LoadOrCreateSigningKey(path)
	if err != nil {
		return nil, fmt.Errorf("auth: %w", err)
	}
	return NewBoundTokens(key, ServiceAccountIssuer, nil)
}

// Issuer is the iss of the tokens b issues.
func (b *BoundTokens) Issuer() string { return b.issuer }

// KeySet is the public key that verifies b's tokens as a JSON Web Key Set,
// what kube-apiserver serves at /openid/v1/jwks: one ES256 signing key
// whose key id is kube's (the base64url SHA-256 of the key's DER form).
func (b *BoundTokens) KeySet() (jose.JSONWebKeySet, error) {
	der, err := x509.MarshalPKIXPublicKey(b.pub)
	if err != nil {
		return jose.JSONWebKeySet{}, fmt.Errorf("auth: encode the signing key: %w", err)
	}
	sum := sha256.Sum256(der)
	return jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: b.pub, KeyID: base64.RawURLEncoding.EncodeToString(sum[:]),
		Algorithm: string(jose.ES256), Use: "sig"}}}, nil
}
