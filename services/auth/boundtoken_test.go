package auth

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podflow/podflow/proto/corev1"
)

func boundTokens(t *testing.T, issuer string) *BoundTokens {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewBoundTokens(key, issuer, nil)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// boundAuthenticator is an authenticator of the bound tokens the returned
// BoundTokens issue, checked at *clock.
func boundAuthenticator(t *testing.T, clock *time.Time) (*BoundTokens, *TokenAuthenticator) {
	t.Helper()
	b := boundTokens(t, "https://podflow.local")
	cfg := DefaultAuthenticatorConfig()
	cfg.BoundTokens, cfg.Now = b, func() time.Time { return *clock }
	a, err := NewTokenAuthenticator(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	return b, a
}

// TestBoundTokens: a bound token authenticates as its ServiceAccount only
// while it is unexpired, for this server's audience, signed by this
// server's key, and while the account exists with the uid it names.
func TestBoundTokens(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	clock := now
	b, a := boundAuthenticator(t, &clock)
	sa := func(uid string) *corev1.ServiceAccount {
		return &corev1.ServiceAccount{Metadata: &corev1.ObjectMeta{Namespace: "team", Name: "robot", Uid: uid}}
	}
	a.UpsertServiceAccount(sa("sa-uid"))
	issue := func(b *BoundTokens, aud []string, exp time.Duration) string {
		tok, _, err := b.Issue("team", "robot", "sa-uid", BoundObject{}, aud, exp, now)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	good := issue(b, nil, time.Hour)
	otherKey := issue(boundTokens(t, "https://podflow.local"), nil, time.Hour)
	otherAud := issue(b, []string{"vault"}, time.Hour)
	short := issue(b, nil, time.Second) // clamped to the 10-minute minimum
	tampered := good[:strings.LastIndex(good, ".")] + ".AAAA"

	for _, tc := range []struct {
		name  string
		setup func()
		token string
		ok    bool
	}{
		{"issued for this server", nil, good, true},
		{"signed by another key", nil, otherKey, false},
		{"for another audience", nil, otherAud, false},
		{"signature tampered", nil, tampered, false},
		{"minimum expiry still valid at 9 minutes", func() { clock = now.Add(9 * time.Minute) }, short, true},
		{"expired (past the leeway)", func() { clock = now.Add(time.Hour + 2*time.Minute) }, good, false},
		{"account recreated with another uid", func() { clock = now; a.UpsertServiceAccount(sa("sa-uid-2")) }, good, false},
		{"account deleted", func() { a.DeleteServiceAccount("team", "robot") }, good, false},
		{"account back with its uid", func() { a.UpsertServiceAccount(sa("sa-uid")) }, good, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.setup != nil {
				tc.setup()
			}
			u, st := a.AuthenticateToken(tc.token)
			if got := st == nil; got != tc.ok {
				t.Fatalf("authenticated %v (%v), want %v", got, st, tc.ok)
			}
			if tc.ok && (u.Username != "system:serviceaccount:team:robot" || u.Uid != "sa-uid" ||
				!strings.Contains(strings.Join(u.Groups, ","), "system:serviceaccounts:team")) {
				t.Fatalf("user %+v", u)
			}
		})
	}
}

func TestBoundTokenIssue(t *testing.T) {
	b := boundTokens(t, "https://podflow.local")
	now := time.Now()
	for _, tc := range []struct {
		ask, want time.Duration
	}{
		{0, DefaultBoundTokenExpiration},
		{time.Minute, MinBoundTokenExpiration},
		{2 * time.Hour, 2 * time.Hour},
		{48 * time.Hour, MaxBoundTokenExpiration},
	} {
		tok, exp, err := b.Issue("ns", "sa", "u1", BoundObject{}, nil, tc.ask, now)
		if err != nil {
			t.Fatal(err)
		}
		if got := exp.Sub(now.Truncate(time.Second)); got != tc.want {
			t.Errorf("expiration %s: got %s, want %s", tc.ask, got, tc.want)
		}
		c, err := b.Verify(tok, now)
		if err != nil || c.Namespace != "ns" || c.Name != "sa" || c.UID != "u1" || c.Audiences[0] != "https://podflow.local" {
			t.Errorf("verify: %+v, %v", c, err)
		}
	}
	if _, _, err := b.Issue("ns", "sa", "", BoundObject{}, nil, 0, now); !errors.Is(err, ErrInvalidBoundToken) {
		t.Errorf("issue without a uid: %v", err)
	}
}

// TestTokensBoundToObjects: a token bound to a Pod or a Secret
// authenticates only while that object is known with the uid it names —
// not once it is deleted or recreated with another uid, nor after it has
// been terminating for longer than BoundObjectDeletionLeeway — and Issue
// binds only to a Pod or a Secret with a name and a uid.
func TestTokensBoundToObjects(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	clock := now
	b, a := boundAuthenticator(t, &clock)
	a.UpsertServiceAccount(&corev1.ServiceAccount{Metadata: &corev1.ObjectMeta{Namespace: "team", Name: "robot", Uid: "sa-uid"}})
	pod := func(uid string, deleting *time.Time) *corev1.Pod {
		p := &corev1.Pod{Metadata: &corev1.ObjectMeta{Namespace: "team", Name: "web", Uid: uid}}
		if deleting != nil {
			p.Metadata.DeletionTimestamp = timestamppb.New(*deleting)
		}
		return p
	}
	secret := func(uid string) *corev1.Secret {
		return &corev1.Secret{Metadata: &corev1.ObjectMeta{Namespace: "team", Name: "creds", Uid: uid}}
	}
	a.UpsertPod(pod("pod-uid", nil))
	a.UpsertSecret(secret("secret-uid"))
	issue := func(obj BoundObject) string {
		tok, _, err := b.Issue("team", "robot", "sa-uid", obj, nil, time.Hour, now)
		if err != nil {
			t.Fatal(err)
		}
		c, err := b.Verify(tok, now)
		if err != nil || c.Object != obj {
			t.Fatalf("verify: %+v %v, want bound to %+v", c, err, obj)
		}
		return tok
	}
	toPod := issue(BoundObject{Kind: BoundKindPod, Name: "web", UID: "pod-uid"})
	toSecret := issue(BoundObject{Kind: BoundKindSecret, Name: "creds", UID: "secret-uid"})
	deleting := now.Add(-30 * time.Second)
	for _, tc := range []struct {
		name  string
		setup func()
		token string
		ok    bool
	}{
		{"bound to a stored pod", nil, toPod, true},
		{"bound to a stored secret", nil, toSecret, true},
		{"pod terminating within the leeway", func() { a.UpsertPod(pod("pod-uid", &deleting)) }, toPod, true},
		{"pod terminating past the leeway", func() { clock = now.Add(time.Minute) }, toPod, false},
		{"pod deleted", func() { clock = now; a.DeletePod("team", "web") }, toPod, false},
		{"pod recreated with another uid", func() { a.UpsertPod(pod("pod-uid-2", nil)) }, toPod, false},
		{"pod back with its uid", func() { a.UpsertPod(pod("pod-uid", nil)) }, toPod, true},
		{"secret recreated with another uid", func() { a.UpsertSecret(secret("secret-uid-2")) }, toSecret, false},
		{"secret deleted", func() { a.DeleteSecret("team", "creds") }, toSecret, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.setup != nil {
				tc.setup()
			}
			if _, st := a.AuthenticateToken(tc.token); (st == nil) != tc.ok {
				t.Fatalf("authenticated %v (%v), want %v", st == nil, st, tc.ok)
			}
		})
	}
	for _, obj := range []BoundObject{{Kind: "ConfigMap", Name: "c", UID: "u"}, {Kind: BoundKindPod, Name: "web"}, {Kind: BoundKindSecret, UID: "u"}} {
		if _, _, err := b.Issue("team", "robot", "sa-uid", obj, nil, 0, now); !errors.Is(err, ErrInvalidBoundToken) {
			t.Errorf("issue bound to %+v: %v, want ErrInvalidBoundToken", obj, err)
		}
	}
}

// TestCheckTokenExpiration pins kube-apiserver's bounds of
// expirationSeconds (TokenRequest, projected serviceAccountToken, a node's
// token request), each edge on both sides.
func TestCheckTokenExpiration(t *testing.T) {
	const short = "may not specify a duration less than 10 minutes"
	const long = "may not specify a duration larger than 2^32 seconds"
	for _, tc := range []struct {
		given int64
		want  string
	}{
		{-1, short},
		{0, short},
		{599, short},
		{600, ""},
		{3600, ""},
		{int64(MaxBoundTokenExpiration / time.Second * 2), ""}, // accepted, capped at issue
		{1 << 32, ""},
		{1<<32 + 1, long},
	} {
		if got := CheckTokenExpiration(tc.given); got != tc.want {
			t.Errorf("CheckTokenExpiration(%d) = %q, want %q", tc.given, got, tc.want)
		}
	}
}

// TestBoundTokenCredentialID: every bound token carries its own jti, and a
// TokenReview of it returns Kubernetes' single credential-id extra
// "JTI=<jti>" (the sig-auth conformance test "should mount an API token
// into pods" asks for exactly one, starting with JTI=).
func TestBoundTokenCredentialID(t *testing.T) {
	now := time.Now()
	clock := now
	b, a := boundAuthenticator(t, &clock)
	a.UpsertServiceAccount(&corev1.ServiceAccount{Metadata: &corev1.ObjectMeta{Namespace: "team", Name: "robot", Uid: "sa-uid"}})
	ids := map[string]bool{}
	for range 2 {
		tok, _, err := b.Issue("team", "robot", "sa-uid", BoundObject{}, nil, time.Hour, now)
		if err != nil {
			t.Fatal(err)
		}
		c, err := b.Verify(tok, now)
		if err != nil || c.ID == "" || ids[c.ID] {
			t.Fatalf("verify: jti %q (seen %v), %v; want a fresh jti", c.ID, ids[c.ID], err)
		}
		ids[c.ID] = true
		r, ok, err := a.ReviewToken(tok, nil)
		if !ok || err != nil {
			t.Fatalf("review: %v %v", ok, err)
		}
		if got := r.Extra[ExtraCredentialID]; len(got) != 1 || got[0] != "JTI="+c.ID {
			t.Fatalf("credential-id extra %q, want [JTI=%s]", got, c.ID)
		}
	}
}

// TestBoundTokenAccountLookup: a verified token whose ServiceAccount the
// cache has not seen (created a moment ago) or holds with an older uid is
// checked against the store (LookupServiceAccount), as kube-apiserver's
// getter falls back to a live read; an account the store does not hold,
// holds with another uid, or cannot be read still refuses the token.
func TestBoundTokenAccountLookup(t *testing.T) {
	now := time.Now()
	b := boundTokens(t, "https://podflow.local")
	stored := map[string]string{}
	var readErr error
	reads := 0
	cfg := DefaultAuthenticatorConfig()
	cfg.BoundTokens = b
	cfg.LookupServiceAccount = func(ns, name string) (string, bool, error) {
		reads++
		uid, ok := stored[ns+"/"+name]
		return uid, ok, readErr
	}
	a, err := NewTokenAuthenticator(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	tok, _, err := b.Issue("team", "robot", "sa-uid", BoundObject{}, nil, time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name      string
		setup     func()
		ok        bool
		wantReads int
	}{
		{"not in the store", nil, false, 1},
		{"stored, not cached yet", func() { stored["team/robot"] = "sa-uid" }, true, 1},
		{"store unreadable", func() { readErr = errors.New("no quorum") }, false, 1},
		{"stored with another uid", func() { readErr = nil; stored["team/robot"] = "sa-uid-2" }, false, 1},
		{"cached: no read", func() {
			a.UpsertServiceAccount(&corev1.ServiceAccount{Metadata: &corev1.ObjectMeta{Namespace: "team", Name: "robot", Uid: "sa-uid"}})
		}, true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.setup != nil {
				tc.setup()
			}
			reads = 0
			if _, st := a.AuthenticateToken(tok); (st == nil) != tc.ok {
				t.Fatalf("authenticated %v (%v), want %v", st == nil, st, tc.ok)
			}
			if _, ok, _ := a.ReviewToken(tok, nil); ok != tc.ok {
				t.Fatalf("review authenticated %v, want %v", ok, tc.ok)
			}
			if reads != 2*tc.wantReads {
				t.Fatalf("%d store reads, want %d", reads, 2*tc.wantReads)
			}
		})
	}
}
