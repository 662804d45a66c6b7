package api

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"strings"
	"testing"
	"time"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/auth"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/stage/stagetest"
)

// TestServiceAccountTokens: only the server issues ServiceAccount tokens.
// mallory, who may write Secrets in team, writes a token Secret with a
// token of her choosing: the stored token is another, issued by the
// server and bound to the account's uid, and hers does not authenticate;
// an update keeps the issued token; a token Secret for a missing account
// is refused; once the account is deleted its token gets 401.
func TestServiceAccountTokens(t *testing.T) {
	f := newFixture(t,
		&corev1.ServiceAccount{Metadata: &corev1.ObjectMeta{Namespace: "team", Name: "robot", Uid: "robot-uid"}},
		&corev1.Role{Metadata: &corev1.ObjectMeta{Namespace: "team", Name: "secret-writer"}, Rules: []*corev1.PolicyRule{
			{Verbs: []string{"create", "update", "get"}, ApiGroups: []string{""}, Resources: []string{"secrets"}}}},
		&corev1.RoleBinding{Metadata: &corev1.ObjectMeta{Namespace: "team", Name: "mallory-secrets"},
			Subjects: []*corev1.Subject{{Kind: auth.SubjectUser, Name: "mallory"}},
			RoleRef:  &corev1.RoleRef{ApiGroup: auth.RBACGroup, Kind: auth.KindRole, Name: "secret-writer"}},
	)
	ctx := context.Background()
	const forged = "forged-token-0123456789"
	secret := func(sa, token string) *corev1.Secret {
		return &corev1.Secret{Metadata: &corev1.ObjectMeta{Name: "robot-token", Annotations: map[string]string{
			auth.AnnotationServiceAccountName: sa, auth.AnnotationServiceAccountUID: "victim-uid"}},
			Type: auth.SecretTypeServiceAccountToken, Data: map[string][]byte{auth.SecretTokenKey: []byte(token)}}
	}
	authenticates := func(token string, want bool) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			_, st := f.s.authn.AuthenticateToken(token)
			if (st == nil) == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("token %q authenticates: %v, want %v", token, st == nil, want)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}

	if st, _ := f.s.object(ctx, objectReq(malloryToken, "create", "secrets", "team", secret("nobody", forged))); st.GetCode() != 422 {
		t.Fatalf("token Secret for a missing account: %v, want 422", st)
	}
	if st, _ := f.s.object(ctx, objectReq(malloryToken, "create", "secrets", "team", secret("robot", forged))); st.GetCode() != 201 {
		t.Fatalf("create: %v", st)
	}
	stored, err := objects.Get[*corev1.Secret](ctx, f.env.Store, "team", "robot-token")
	if err != nil {
		t.Fatal(err)
	}
	issued := string(stored.GetData()[auth.SecretTokenKey])
	if issued == forged || len(issued) < 32 || stored.GetMetadata().GetAnnotations()[auth.AnnotationServiceAccountUID] != "robot-uid" {
		t.Fatalf("stored token %q bound to %q; want one the server issued, bound to robot-uid", issued,
			stored.GetMetadata().GetAnnotations()[auth.AnnotationServiceAccountUID])
	}
	authenticates(issued, true)
	authenticates(forged, false)

	if st, _ := f.s.object(ctx, objectReq(malloryToken, "apply", "secrets", "team", secret("robot", "another-forged-0123456789"))); st.GetCode() != 200 {
		t.Fatalf("update: %v", st)
	}
	again, _ := objects.Get[*corev1.Secret](ctx, f.env.Store, "team", "robot-token")
	if got := string(again.GetData()[auth.SecretTokenKey]); got != issued {
		t.Errorf("token after an update %q, want the issued one kept", got)
	}

	if _, err := f.env.Store.Delete(ctx, objects.ServiceAccounts, "team", "robot", 0); err != nil {
		t.Fatal(err)
	}
	authenticates(issued, false)
}

// TestBoundTokenOfNewServiceAccount: a token issued for a ServiceAccount
// the stage's cache has not seen yet (created a moment ago; here the
// caches never start) authenticates and passes a TokenReview, read from
// the store, with its credential id; once the account is deleted from the
// store it does not. (The sig-auth conformance test "should create a
// serviceAccountToken and ensure a successful TokenReview" creates the
// account, a token and the review within milliseconds.)
func TestBoundTokenOfNewServiceAccount(t *testing.T) {
	env, _, _ := stagetest.NewEnv("api")
	ctx := context.Background()
	sa := &corev1.ServiceAccount{Metadata: &corev1.ObjectMeta{Namespace: "team", Name: "fresh", Uid: "fresh-uid"}}
	if _, err := env.Store.Create(ctx, sa); err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	bound, err := auth.NewBoundTokens(key, auth.ServiceAccountIssuer, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.Authn.BoundTokens = bound
	s, err := New(env, cfg)
	if err != nil {
		t.Fatal(err)
	}
	tok, _, err := bound.Issue("team", "fresh", "fresh-uid", auth.BoundObject{}, nil, 0, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	r, ok, err := s.ReviewToken(tok, nil)
	if !ok || err != nil || r.User.GetUsername() != "system:serviceaccount:team:fresh" {
		t.Fatalf("review of a new account's token: %v %v %+v", ok, err, r.User)
	}
	if id := r.Extra[auth.ExtraCredentialID]; len(id) != 1 || !strings.HasPrefix(id[0], "JTI=") {
		t.Fatalf("credential-id %q, want one JTI=…", id)
	}
	if _, err := env.Store.Delete(ctx, objects.ServiceAccounts, "team", "fresh", 0); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := s.ReviewToken(tok, nil); ok {
		t.Fatal("a deleted account's token passes a TokenReview")
	}
	if _, st := s.authn.AuthenticateToken(tok); st == nil {
		t.Fatal("a deleted account's token authenticates")
	}
}
