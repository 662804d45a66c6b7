package auth

import (
	"crypto/sha256"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/podflow/podflow/proto/corev1"
)

// Well-known identities.
const (
	// GroupAuthenticated is added to every authenticated user.
	GroupAuthenticated = "system:authenticated"
	// GroupServiceAccounts is added to every ServiceAccount user;
	// GroupServiceAccounts+":"+namespace as well.
	GroupServiceAccounts = "system:serviceaccounts"
	// GroupMasters is allowed every request by DefaultRBACConfig.
	GroupMasters = "system:masters"
	// ServiceAccountUsernamePrefix starts the username of a ServiceAccount:
	// "system:serviceaccount:<namespace>:<name>".
	ServiceAccountUsernamePrefix = "system:serviceaccount:"

	// SecretTypeServiceAccountToken is the type of a Secret holding a
	// ServiceAccount token.
	SecretTypeServiceAccountToken = "kubernetes.io/service-account-token"
	// AnnotationServiceAccountName names the ServiceAccount a token Secret
	// belongs to.
	AnnotationServiceAccountName = "kubernetes.io/service-account.name"
	// AnnotationServiceAccountUID, when set, becomes the user's uid.
	AnnotationServiceAccountUID = "kubernetes.io/service-account.uid"
	// SecretTokenKey is the data key of the token in a token Secret.
	SecretTokenKey = "token"
)

// ServiceAccountUsername returns "system:serviceaccount:<namespace>:<name>".
func ServiceAccountUsername(namespace, name string) string {
	return ServiceAccountUsernamePrefix + namespace + ":" + name
}

// AuthenticatorConfig configures a TokenAuthenticator.
type AuthenticatorConfig struct {
	// MaxTokenBytes bounds the length of a bearer token; longer tokens are
	// rejected as malformed before they are hashed. Default 4096.
	MaxTokenBytes int
	// ServiceAccountTokens enables authentication with ServiceAccount token
	// Secrets fed through UpsertSecret. Default true.
	ServiceAccountTokens bool
	// BoundTokens, when set, also authenticates bound ServiceAccount
	// tokens (the TokenRequest API) it verifies, while their
	// ServiceAccount exists with the uid they name. Nil: none.
	BoundTokens *BoundTokens
	// Now is the clock bound tokens are checked against (default
	// time.Now; tests set it).
	Now func() time.Time
	// LookupServiceAccount, when set, reads a ServiceAccount from the
	// store when a verified bound token names one the cache fed by
	// UpsertServiceAccount does not hold (yet), or holds with another uid:
	// a token issued for an account created a moment ago authenticates at
	// once, as
	// kube-apiserver's ServiceAccount getter falls back from its informer
	// to a live read. It returns the account's uid, or found false.
	LookupServiceAccount func(namespace, name string) (uid string, found bool, err error)
}

// DefaultAuthenticatorConfig returns the defaults documented on
// AuthenticatorConfig.
func DefaultAuthenticatorConfig() AuthenticatorConfig {
	return AuthenticatorConfig{MaxTokenBytes: 4096, ServiceAccountTokens: true}
}

// Validate reports a configuration that cannot work.
func (c AuthenticatorConfig) Validate() error {
	if c.MaxTokenBytes < 16 {
		return fmt.Errorf("%w: MaxTokenBytes (%d) must be at least 16", ErrInvalidConfig, c.MaxTokenBytes)
	}
	return nil
}

// StaticToken is one record of a token file.
type StaticToken struct {
	Token string
	User  *corev1.UserInfo
}

// ParseTokenFile reads kube-apiserver's --token-auth-file CSV format, one
// record per line:
//
//	token,user,uid,"group1,group2"
//
// The groups column is optional. Empty or duplicate tokens and empty user
// names are errors naming the line, wrapping ErrInvalidTokenFile.
func ParseTokenFile(r io.Reader) ([]StaticToken, error) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = -1
	cr.TrimLeadingSpace = true
	var out []StaticToken
	seen := make(map[string]int)
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidTokenFile, err)
		}
		line, _ := cr.FieldPos(0)
		switch {
		case len(rec) < 3:
			return nil, fmt.Errorf("%w: line %d: want at least 3 columns (token, user name, user uid), found %d",
				ErrInvalidTokenFile, line, len(rec))
		case rec[0] == "":
			return nil, fmt.Errorf("%w: line %d: empty token", ErrInvalidTokenFile, line)
		case rec[1] == "":
			return nil, fmt.Errorf("%w: line %d: empty user name", ErrInvalidTokenFile, line)
		}
		if prev, ok := seen[rec[0]]; ok {
			return nil, fmt.Errorf("%w: line %d: token already used on line %d", ErrInvalidTokenFile, line, prev)
		}
		seen[rec[0]] = line
		u := &corev1.UserInfo{Username: rec[1], Uid: rec[2]}
		if len(rec) >= 4 && rec[3] != "" {
			for _, g := range strings.Split(rec[3], ",") {
				if g = strings.TrimSpace(g); g != "" {
					u.Groups = append(u.Groups, g)
				}
			}
		}
		out = append(out, StaticToken{Token: rec[0], User: u})
	}
}

type tokenHash [sha256.Size]byte

// TokenAuthenticator authenticates bearer tokens from a static token file
// and from ServiceAccount token Secrets. Only SHA-256 digests of tokens are
// kept. It is safe for concurrent use.
type TokenAuthenticator struct {
	cfg    AuthenticatorConfig
	static map[tokenHash]*corev1.UserInfo

	mu       sync.RWMutex
	sa       map[tokenHash]saToken
	saSecret map[string]tokenHash // "namespace/name" of the Secret -> digest
	accounts map[string]string    // "namespace/name" of a ServiceAccount -> its uid
	// bindable are the Pods and Secrets a bound token may name:
	// "<kind>/namespace/name" -> its uid and deletion time.
	bindable map[string]bindable
}

// bindable is a stored Pod or Secret as a bound token's check needs it.
type bindable struct {
	uid      string
	deleting time.Time // its deletionTimestamp; zero when not being deleted
}

// BoundObjectDeletionLeeway is how long an object a token is bound to may
// be terminating before the token is refused, as Kubernetes' validator
// (jwt.DefaultLeeway, one minute).
const BoundObjectDeletionLeeway = time.Minute

// saToken is a ServiceAccount token Secret's user and the account (key
// and uid) it is bound to.
type saToken struct {
	user       *corev1.UserInfo
	account    string // "namespace/name"
	accountUID string
}

// NewTokenAuthenticator returns an authenticator over the given static
// tokens (typically from ParseTokenFile). Every user gets the group
// system:authenticated.
func NewTokenAuthenticator(cfg AuthenticatorConfig, static []StaticToken) (*TokenAuthenticator, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	a := &TokenAuthenticator{
		cfg:      cfg,
		static:   make(map[tokenHash]*corev1.UserInfo, len(static)),
		sa:       make(map[tokenHash]saToken),
		saSecret: make(map[string]tokenHash),
		accounts: make(map[string]string),
		bindable: make(map[string]bindable),
	}
	for i, st := range static {
		if st.Token == "" || st.User.GetUsername() == "" {
			return nil, fmt.Errorf("%w: static token %d: empty token or user name", ErrInvalidTokenFile, i)
		}
		u := &corev1.UserInfo{Username: st.User.Username, Uid: st.User.Uid,
			Groups: withGroup(st.User.Groups, GroupAuthenticated)}
		a.static[sha256.Sum256([]byte(st.Token))] = u
	}
	return a, nil
}

// UpsertSecret records or replaces the token of a ServiceAccount token
// Secret. Secrets of any other type, or without the ServiceAccount name
// annotation or a token, are forgotten (an update may have changed them).
// The token authenticates only while its ServiceAccount exists with the
// uid of the Secret's kubernetes.io/service-account.uid annotation (see
// UpsertServiceAccount), as Kubernetes' legacy token validation checks.
//
// Every Secret is also recorded as an object a bound token may name.
func (a *TokenAuthenticator) UpsertSecret(s *corev1.Secret) {
	ns, name := s.GetMetadata().GetNamespace(), s.GetMetadata().GetName()
	key := ns + "/" + name
	token := s.GetData()[SecretTokenKey]
	sa := s.GetMetadata().GetAnnotations()[AnnotationServiceAccountName]
	a.mu.Lock()
	defer a.mu.Unlock()
	a.bindable[BoundKindSecret+"/"+key] = bindableOf(s.GetMetadata())
	if old, ok := a.saSecret[key]; ok {
		delete(a.sa, old)
		delete(a.saSecret, key)
	}
	if s.GetType() != SecretTypeServiceAccountToken || sa == "" || ns == "" || len(token) == 0 {
		return
	}
	h := sha256.Sum256(token)
	uid := s.GetMetadata().GetAnnotations()[AnnotationServiceAccountUID]
	a.sa[h] = saToken{
		user: &corev1.UserInfo{
			Username: ServiceAccountUsername(ns, sa),
			Uid:      uid,
			Groups:   []string{GroupServiceAccounts, GroupServiceAccounts + ":" + ns, GroupAuthenticated},
		},
		account: ns + "/" + sa, accountUID: uid,
	}
	a.saSecret[key] = h
}

// UpsertServiceAccount records a ServiceAccount and its uid: its tokens
// authenticate from now on, those bound to an earlier uid (a deleted and
// recreated account) do not.
func (a *TokenAuthenticator) UpsertServiceAccount(sa *corev1.ServiceAccount) {
	md := sa.GetMetadata()
	a.mu.Lock()
	a.accounts[md.GetNamespace()+"/"+md.GetName()] = md.GetUid()
	a.mu.Unlock()
}

// DeleteServiceAccount forgets a ServiceAccount: its tokens stop
// authenticating at once.
func (a *TokenAuthenticator) DeleteServiceAccount(namespace, name string) {
	a.mu.Lock()
	delete(a.accounts, namespace+"/"+name)
	a.mu.Unlock()
}

// UpsertPod records a Pod as an object a bound token may name: such a
// token authenticates while the pod is stored with the uid it names.
func (a *TokenAuthenticator) UpsertPod(p *corev1.Pod) {
	md := p.GetMetadata()
	a.mu.Lock()
	a.bindable[BoundKindPod+"/"+md.GetNamespace()+"/"+md.GetName()] = bindableOf(md)
	a.mu.Unlock()
}

// DeletePod forgets a Pod: the tokens bound to it stop authenticating.
func (a *TokenAuthenticator) DeletePod(namespace, name string) {
	a.mu.Lock()
	delete(a.bindable, BoundKindPod+"/"+namespace+"/"+name)
	a.mu.Unlock()
}

func bindableOf(md *corev1.ObjectMeta) bindable {
	b := bindable{uid: md.GetUid()}
	if ts := md.GetDeletionTimestamp(); ts != nil {
		b.deleting = ts.AsTime()
	}
	return b
}

// DeleteSecret forgets the token of the named Secret, if any, and the
// Secret as an object a bound token may name.
func (a *TokenAuthenticator) DeleteSecret(namespace, name string) {
	key := namespace + "/" + name
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.bindable, BoundKindSecret+"/"+key)
	if h, ok := a.saSecret[key]; ok {
		delete(a.sa, h)
		delete(a.saSecret, key)
	}
}

// AuthenticateToken returns the user a bearer token belongs to, or the
// Unauthorized Status when the token is missing, malformed or unknown. The
// token is looked up by its SHA-256 digest, never compared as text: the
// time a lookup takes depends only on digests, which a caller cannot steer
// towards a stored token, so timing reveals nothing about stored tokens. The returned
// UserInfo is a copy the caller may keep.
func (a *TokenAuthenticator) AuthenticateToken(token string) (*corev1.UserInfo, *corev1.Status) {
	if !wellFormed(token, a.cfg.MaxTokenBytes) {
		return nil, Unauthorized()
	}
	h := sha256.Sum256([]byte(token))
	if u, ok := a.static[h]; ok {
		return cloneUser(u), nil
	}
	if a.cfg.BoundTokens != nil && strings.Count(token, ".") == 2 {
		return a.authenticateBound(token)
	}
	if a.cfg.ServiceAccountTokens {
		a.mu.RLock()
		t, ok := a.sa[h]
		uid, exists := a.accounts[t.account]
		a.mu.RUnlock()
		if ok && exists && t.accountUID != "" && uid == t.accountUID {
			return cloneUser(t.user), nil
		}
	}
	return nil, Unauthorized()
}

// authenticateBound verifies a bound token and checks that its
// ServiceAccount exists with the uid it names, and so does the Pod or
// Secret it is bound to, not deleted for longer than
// BoundObjectDeletionLeeway (Kubernetes' "service account token has been
// invalidated").
func (a *TokenAuthenticator) authenticateBound(token string) (*corev1.UserInfo, *corev1.Status) {
	now := time.Now
	if a.cfg.Now != nil {
		now = a.cfg.Now
	}
	at := now()
	c, err := a.cfg.BoundTokens.Verify(token, at)
	if err != nil {
		return nil, Unauthorized()
	}
	return a.authenticateClaims(c, at)
}

// authenticateClaims checks a verified bound token's ServiceAccount and
// bound object at time at.
func (a *TokenAuthenticator) authenticateClaims(c BoundTokenClaims, at time.Time) (*corev1.UserInfo, *corev1.Status) {
	a.mu.RLock()
	uid, exists := a.accounts[c.Namespace+"/"+c.Name]
	obj, objExists := a.bindable[c.Object.Kind+"/"+c.Namespace+"/"+c.Object.Name]
	a.mu.RUnlock()
	if (!exists || uid != c.UID) && a.cfg.LookupServiceAccount != nil {
		var err error
		if uid, exists, err = a.cfg.LookupServiceAccount(c.Namespace, c.Name); err != nil {
			return nil, Unauthorized()
		}
	}
	if !exists || uid != c.UID {
		return nil, Unauthorized()
	}
	if c.Object.Kind != "" && (!objExists || obj.uid != c.Object.UID ||
		!obj.deleting.IsZero() && obj.deleting.Before(at.Add(-BoundObjectDeletionLeeway))) {
		return nil, Unauthorized()
	}
	return &corev1.UserInfo{Username: ServiceAccountUsername(c.Namespace, c.Name), Uid: c.UID,
		Groups: []string{GroupServiceAccounts, GroupServiceAccounts + ":" + c.Namespace, GroupAuthenticated}}, nil
}

// ParseBearer extracts the token from an HTTP Authorization header value
// ("Bearer <token>", scheme case-insensitive). ok is false otherwise.
func ParseBearer(header string) (token string, ok bool) {
	scheme, rest, found := strings.Cut(strings.TrimSpace(header), " ")
	if !found || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimSpace(rest)
	return token, token != ""
}

// wellFormed accepts printable ASCII without spaces: what a bearer token can be.
func wellFormed(token string, max int) bool {
	if token == "" || len(token) > max {
		return false
	}
	for i := 0; i < len(token); i++ {
		if c := token[i]; c <= ' ' || c > '~' {
			return false
		}
	}
	return true
}

func withGroup(groups []string, g string) []string {
	out := append([]string(nil), groups...)
	for _, have := range out {
		if have == g {
			return out
		}
	}
	return append(out, g)
}

func cloneUser(u *corev1.UserInfo) *corev1.UserInfo {
	return &corev1.UserInfo{Username: u.Username, Uid: u.Uid, Groups: append([]string(nil), u.Groups...)}
}

// Extra keys of a bound ServiceAccount token's user, as Kubernetes'
// (pkg/serviceaccount, k8s.io/apiserver's serviceaccount.UserInfo).
const (
	ExtraPodName = "authentication.kubernetes.io/pod-name"
	ExtraPodUID  = "authentication.kubernetes.io/pod-uid"
	// ExtraCredentialID is a bound token's credential id, "JTI=<jti>"
	// (k8s.io/apiserver's user.CredentialIDKey).
	ExtraCredentialID = "authentication.kubernetes.io/credential-id"
	// ExtraNodeName and ExtraNodeUID name the node of a pod-bound
	// token's pod (its kubernetes.io.node claim).
	ExtraNodeName = "authentication.kubernetes.io/node-name"
	ExtraNodeUID  = "authentication.kubernetes.io/node-uid"
)

// TokenReviewResult is what a TokenReview learns of a token: the user it
// authenticates as, that user's extra attributes, and the audiences it is
// valid for among those asked.
type TokenReviewResult struct {
	User      *corev1.UserInfo
	Extra     map[string][]string
	Audiences []string
}

// ReviewToken authenticates token for audiences, as kube-apiserver's
// TokenReview: no audiences means the server's own (BoundTokens'). A bound
// token must name one of them (Audiences is the intersection; none is an
// error worded as Kubernetes' "token audiences ... is invalid for the
// target audiences ..."), and is checked as AuthenticateToken checks it
// (its ServiceAccount and bound object). Static and legacy
// ServiceAccount tokens carry no audience: they are valid for the asked
// audiences that are the server's, and for none when there are none of
// those. ok is false for a token that does not authenticate; err says
// why when Kubernetes would say it.
func (a *TokenAuthenticator) ReviewToken(token string, audiences []string) (r TokenReviewResult, ok bool, err error) {
	var server []string
	if a.cfg.BoundTokens != nil {
		server = a.cfg.BoundTokens.Audiences()
	}
	if len(audiences) == 0 {
		audiences = server
	}
	if a.cfg.BoundTokens != nil && strings.Count(token, ".") == 2 && wellFormed(token, a.cfg.MaxTokenBytes) {
		now := time.Now
		if a.cfg.Now != nil {
			now = a.cfg.Now
		}
		c, verr := a.cfg.BoundTokens.VerifyFor(token, audiences, now())
		if verr != nil {
			if tokAuds, aerr := a.cfg.BoundTokens.TokenAudiences(token); aerr == nil && len(intersect(tokAuds, audiences)) == 0 {
				return r, false, fmt.Errorf("token audiences %q is invalid for the target audiences %q", tokAuds, audiences)
			}
			return r, false, nil
		}
		u, st := a.authenticateClaims(c, now())
		if st != nil {
			return r, false, nil
		}
		r = TokenReviewResult{User: u, Audiences: intersect(c.Audiences, audiences), Extra: map[string][]string{}}
		if c.Object.Kind == BoundKindPod {
			r.Extra[ExtraPodName] = []string{c.Object.Name}
			r.Extra[ExtraPodUID] = []string{c.Object.UID}
			if c.Object.NodeName != "" {
				r.Extra[ExtraNodeName] = []string{c.Object.NodeName}
				if c.Object.NodeUID != "" {
					r.Extra[ExtraNodeUID] = []string{c.Object.NodeUID}
				}
			}
		}
		if c.ID != "" {
			r.Extra[ExtraCredentialID] = []string{"JTI=" + c.ID}
		}
		return r, true, nil
	}
	auds := intersect(server, audiences)
	if len(server) > 0 && len(auds) == 0 {
		return r, false, nil
	}
	u, st := a.AuthenticateToken(token)
	if st != nil {
		return r, false, nil
	}
	return TokenReviewResult{User: u, Audiences: auds}, true, nil
}

// intersect returns the elements of a that are in b, in a's order.
func intersect(a, b []string) []string {
	var out []string
	for _, x := range a {
		if slices.Contains(b, x) && !slices.Contains(out, x) {
			out = append(out, x)
		}
	}
	return out
}
