package api

import (
	"context"
	"testing"
	"time"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/auth"
	"github.com/podflow/podflow/services/objects"
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
