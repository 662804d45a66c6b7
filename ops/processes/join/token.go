package join

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"google.golang.org/protobuf/types/known/timestamppb"
	bootstrapapi "k8s.io/cluster-bootstrap/token/api"
	bootstraputil "k8s.io/cluster-bootstrap/token/util"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/objects"
)

// tokenPrefix starts a join token: k3s's, version 1 of its "secure" form,
// which carries the CA's hash.
const tokenPrefix = "K10"

// Usages of a join token (keys of its Secret, set to "true").
const (
	// UsageServer: the token joins a server (NATS, a store replica, every
	// stage); it joins a node agent too.
	UsageServer = bootstrapapi.BootstrapTokenUsagePrefix + "podflow-server"
	// UsageAgent: the token joins a node agent only.
	UsageAgent = bootstrapapi.BootstrapTokenUsagePrefix + "podflow-agent"
)

// ErrToken is wrapped by every error about a malformed join token.
var ErrToken = errors.New("join: invalid token")

// Token is a parsed join token.
type Token struct {
	CAHash string // hex sha256 of the cluster CA certificate (PEM, as /cacerts serves it)
	ID     string // the bootstrap token's id: 6 of [a-z0-9]
	Secret string // its secret: 16 of [a-z0-9]
}

// String is the token as users pass it: K10<hash>::<id>.<secret>.
func (t Token) String() string { return tokenPrefix + t.CAHash + "::" + t.ID + "." + t.Secret }

// Bearer is what the joiner authenticates with: <id>.<secret>.
func (t Token) Bearer() string { return bootstraputil.TokenFromIDAndSecret(t.ID, t.Secret) }

// ParseToken reads a join token, K10<hash>::<id>.<secret>.
func ParseToken(s string) (Token, error) {
	rest, ok := strings.CutPrefix(strings.TrimSpace(s), tokenPrefix)
	hash, bearer, ok2 := strings.Cut(rest, "::")
	if !ok || !ok2 {
		return Token{}, fmt.Errorf("%w: want K10<CA hash>::<id>.<secret>", ErrToken)
	}
	if b, err := hex.DecodeString(hash); err != nil || len(b) != sha256.Size {
		return Token{}, fmt.Errorf("%w: the CA hash must be 64 hex digits", ErrToken)
	}
	if !bootstraputil.IsValidBootstrapToken(bearer) {
		return Token{}, fmt.Errorf("%w: %q is not <id>.<secret> (6 and 16 of [a-z0-9])", ErrToken, redact(bearer))
	}
	id, secret, _ := strings.Cut(bearer, ".")
	return Token{CAHash: strings.ToLower(hash), ID: id, Secret: secret}, nil
}

// redact keeps a token's id and hides its secret, for messages.
func redact(bearer string) string {
	id, _, _ := strings.Cut(bearer, ".")
	return id + ".<secret>"
}

// CAHash is the hash a token names of the CA certificate caPEM.
func CAHash(caPEM []byte) string {
	h := sha256.Sum256(caPEM)
	return hex.EncodeToString(h[:])
}

// TokenSecret is the bootstrap token Secret of tok (kube-system,
// bootstrap-token-<id>) with usages, expiring at expires (zero: never).
func TokenSecret(tok Token, expires time.Time, description string, usages ...string) *corev1.Secret {
	data := map[string][]byte{
		bootstrapapi.BootstrapTokenIDKey:          []byte(tok.ID),
		bootstrapapi.BootstrapTokenSecretKey:      []byte(tok.Secret),
		bootstrapapi.BootstrapTokenDescriptionKey: []byte(description),
	}
	if !expires.IsZero() {
		data[bootstrapapi.BootstrapTokenExpirationKey] = []byte(expires.UTC().Format(time.RFC3339))
	}
	for _, u := range usages {
		data[u] = []byte("true")
	}
	return &corev1.Secret{
		Metadata: &corev1.ObjectMeta{Name: bootstraputil.BootstrapTokenSecretName(tok.ID), Namespace: metav1NamespaceSystem},
		Type:     string(bootstrapapi.SecretTypeBootstrapToken),
		Data:     data,
	}
}

const metav1NamespaceSystem = "kube-system"

// CreateToken creates a join token for the cluster of CA certificate
// caPEM, valid for ttl (0: until deleted), with usages, stored in st.
func CreateToken(ctx context.Context, st *objects.Store, caPEM []byte, ttl time.Duration, usages ...string) (Token, error) {
	if len(usages) == 0 {
		return Token{}, errors.New("join: a token needs a usage")
	}
	bearer, err := bootstraputil.GenerateBootstrapToken()
	if err != nil {
		return Token{}, err
	}
	id, secret, _ := strings.Cut(bearer, ".")
	tok := Token{CAHash: CAHash(caPEM), ID: id, Secret: secret}
	var expires time.Time
	if ttl > 0 {
		expires = time.Now().Add(ttl)
	}
	desc := "podflow join token"
	s := TokenSecret(tok, expires, desc, usages...)
	s.Metadata.Uid, s.Metadata.CreationTimestamp = uuid.NewString(), timestamppb.Now()
	if _, err := st.Create(ctx, s); err != nil {
		return Token{}, fmt.Errorf("join: store the token: %w", err)
	}
	return tok, nil
}

// checkToken authenticates bearer (<id>.<secret>) against its Secret in
// st at now and returns the Secret: a *Error Unauthorized when it is
// malformed, unknown, wrong or expired.
func checkToken(ctx context.Context, st *objects.Store, bearer string, now time.Time) (*corev1.Secret, error) {
	if !bootstraputil.IsValidBootstrapToken(bearer) {
		return nil, refuse(CodeUnauthorized, "the join token is malformed")
	}
	id, secret, _ := strings.Cut(bearer, ".")
	s, err := objects.Get[*corev1.Secret](ctx, st, metav1NamespaceSystem, bootstraputil.BootstrapTokenSecretName(id))
	if errors.Is(err, raftstore.ErrNotFound) {
		return nil, refuse(CodeUnauthorized, "unknown join token %q", id)
	}
	if err != nil {
		return nil, err
	}
	if s.GetType() != string(bootstrapapi.SecretTypeBootstrapToken) ||
		subtle.ConstantTimeCompare(s.GetData()[bootstrapapi.BootstrapTokenSecretKey], []byte(secret)) != 1 {
		return nil, refuse(CodeUnauthorized, "wrong secret for join token %q", id)
	}
	if exp := string(s.GetData()[bootstrapapi.BootstrapTokenExpirationKey]); exp != "" {
		t, err := time.Parse(time.RFC3339, exp)
		if err != nil {
			return nil, refuse(CodeUnauthorized, "join token %q has an unreadable expiration %q", id, exp)
		}
		if !now.Before(t) {
			return nil, refuse(CodeUnauthorized, "join token %q expired at %s", id, exp)
		}
	}
	return s, nil
}

// hasUsage reports whether a token Secret allows usage.
func hasUsage(s *corev1.Secret, usage string) bool { return string(s.GetData()[usage]) == "true" }
