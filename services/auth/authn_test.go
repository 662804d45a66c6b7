package auth

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/eventsv1"
)

func TestParseTokenFile(t *testing.T) {
	tests := []struct {
		name    string
		given   string
		want    []StaticToken
		wantErr string // substring of the error, which must wrap ErrInvalidTokenFile
	}{
		{
			name:  "groups quoted",
			given: "t1,alice,u1,\"dev,ops\"\nt2,bob,u2\n",
			want: []StaticToken{
				{Token: "t1", User: &corev1.UserInfo{Username: "alice", Uid: "u1", Groups: []string{"dev", "ops"}}},
				{Token: "t2", User: &corev1.UserInfo{Username: "bob", Uid: "u2"}},
			},
		},
		{name: "blank lines skipped", given: "\nt1,alice,u1,admins\n\n", want: []StaticToken{
			{Token: "t1", User: &corev1.UserInfo{Username: "alice", Uid: "u1", Groups: []string{"admins"}}},
		}},
		{name: "empty file", given: ""},
		{name: "too few columns", given: "t1,alice,u1\nt2,bob\n", wantErr: "line 2: want at least 3 columns"},
		{name: "empty token", given: ",alice,u1\n", wantErr: "line 1: empty token"},
		{name: "empty user", given: "t1,,u1\n", wantErr: "line 1: empty user name"},
		{name: "duplicate token", given: "t1,alice,u1\nt1,bob,u2\n", wantErr: "line 2: token already used on line 1"},
		{name: "bad quoting", given: "t1,alice,u1,\"dev\n", wantErr: "line 1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseTokenFile(strings.NewReader(tc.given))
			if tc.wantErr != "" {
				if !errors.Is(err, ErrInvalidTokenFile) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want ErrInvalidTokenFile containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("got %d tokens, want %d", len(got), len(tc.want))
			}
			for i := range got {
				if got[i].Token != tc.want[i].Token || !sameUser(got[i].User, tc.want[i].User) {
					t.Errorf("token %d = %v %v, want %v %v", i, got[i].Token, got[i].User, tc.want[i].Token, tc.want[i].User)
				}
			}
		})
	}
}

func saSecret(ns, name, sa, typ, token string) *corev1.Secret {
	s := &corev1.Secret{
		Metadata: &corev1.ObjectMeta{Namespace: ns, Name: name,
			Annotations: map[string]string{AnnotationServiceAccountName: sa, AnnotationServiceAccountUID: "sa-uid"}},
		Type: typ,
		Data: map[string][]byte{SecretTokenKey: []byte(token)},
	}
	if sa == "" {
		delete(s.Metadata.Annotations, AnnotationServiceAccountName)
	}
	return s
}

func TestAuthenticateToken(t *testing.T) {
	static, err := ParseTokenFile(strings.NewReader("static-alice,alice,u1,\"dev,system:authenticated\"\nstatic-bob,bob,u2\n"))
	if err != nil {
		t.Fatal(err)
	}
	a, err := NewTokenAuthenticator(DefaultAuthenticatorConfig(), static)
	if err != nil {
		t.Fatal(err)
	}
	for _, sa := range []string{"builder", "deployer", "gone", "x"} {
		a.UpsertServiceAccount(&corev1.ServiceAccount{Metadata: &corev1.ObjectMeta{Namespace: "team", Name: sa, Uid: "sa-uid"}})
	}
	a.UpsertSecret(saSecret("team", "builder-token", "builder", SecretTypeServiceAccountToken, "sa-builder"))
	a.UpsertSecret(saSecret("team", "opaque", "builder", "Opaque", "sa-opaque"))
	a.UpsertSecret(saSecret("team", "no-annotation", "", SecretTypeServiceAccountToken, "sa-noann"))
	a.UpsertSecret(saSecret("team", "rotated", "deployer", SecretTypeServiceAccountToken, "sa-old"))
	a.UpsertSecret(saSecret("team", "rotated", "deployer", SecretTypeServiceAccountToken, "sa-new"))
	a.UpsertSecret(saSecret("team", "deleted", "gone", SecretTypeServiceAccountToken, "sa-deleted"))
	a.DeleteSecret("team", "deleted")
	a.UpsertSecret(saSecret("team", "retyped", "x", SecretTypeServiceAccountToken, "sa-retyped"))
	a.UpsertSecret(saSecret("team", "retyped", "x", "Opaque", "sa-retyped"))

	saGroups := []string{GroupServiceAccounts, "system:serviceaccounts:team", GroupAuthenticated}
	tests := []struct {
		name  string
		given string
		want  *corev1.UserInfo // nil = 401
	}{
		{"static with groups", "static-alice", &corev1.UserInfo{Username: "alice", Uid: "u1", Groups: []string{"dev", GroupAuthenticated}}},
		{"static without groups", "static-bob", &corev1.UserInfo{Username: "bob", Uid: "u2", Groups: []string{GroupAuthenticated}}},
		{"service account", "sa-builder", &corev1.UserInfo{Username: "system:serviceaccount:team:builder", Uid: "sa-uid", Groups: saGroups}},
		{"rotated token", "sa-new", &corev1.UserInfo{Username: "system:serviceaccount:team:deployer", Uid: "sa-uid", Groups: saGroups}},
		{"replaced token", "sa-old", nil},
		{"deleted secret", "sa-deleted", nil},
		{"secret no longer a token", "sa-retyped", nil},
		{"opaque secret", "sa-opaque", nil},
		{"missing annotation", "sa-noann", nil},
		{"unknown", "nope", nil},
		{"empty", "", nil},
		{"whitespace", "static alice", nil},
		{"control char", "static-alice\n", nil},
		{"too long", strings.Repeat("x", 4097), nil},
		{"prefix of a token", "static-ali", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, st := a.AuthenticateToken(tc.given)
			if tc.want == nil {
				if got != nil || st == nil {
					t.Fatalf("got user %v status %v, want 401", got, st)
				}
				if st.Code != 401 || st.Reason != eventsv1.ReasonUnauthorized || st.Message != "Unauthorized" {
					t.Fatalf("status = %v, want 401 Unauthorized with a message that leaks nothing", st)
				}
				return
			}
			if st != nil {
				t.Fatalf("status = %v, want user", st)
			}
			if !sameUser(got, tc.want) {
				t.Fatalf("user = %v, want %v", got, tc.want)
			}
		})
	}

	t.Run("service accounts disabled", func(t *testing.T) {
		cfg := DefaultAuthenticatorConfig()
		cfg.ServiceAccountTokens = false
		b, err := NewTokenAuthenticator(cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		b.UpsertSecret(saSecret("team", "builder-token", "builder", SecretTypeServiceAccountToken, "sa-builder"))
		if _, st := b.AuthenticateToken("sa-builder"); st == nil {
			t.Fatal("service account token authenticated although disabled")
		}
	})
	t.Run("returned user is a copy", func(t *testing.T) {
		u, _ := a.AuthenticateToken("static-alice")
		u.Groups[0] = "system:masters"
		u2, _ := a.AuthenticateToken("static-alice")
		if slices.Contains(u2.Groups, "system:masters") {
			t.Fatal("caller's change leaked into the authenticator")
		}
	})
}

func TestAuthenticatorConfigValidate(t *testing.T) {
	if err := DefaultAuthenticatorConfig().Validate(); err != nil {
		t.Fatal(err)
	}
	if _, err := NewTokenAuthenticator(AuthenticatorConfig{MaxTokenBytes: 1}, nil); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("err = %v, want ErrInvalidConfig", err)
	}
}

func TestParseBearer(t *testing.T) {
	tests := []struct {
		given, want string
		ok          bool
	}{
		{"Bearer abc", "abc", true},
		{"bearer  abc ", "abc", true},
		{"Basic abc", "", false},
		{"Bearer", "", false},
		{"Bearer ", "", false},
		{"", "", false},
	}
	for _, tc := range tests {
		got, ok := ParseBearer(tc.given)
		if got != tc.want || ok != tc.ok {
			t.Errorf("ParseBearer(%q) = %q, %v; want %q, %v", tc.given, got, ok, tc.want, tc.ok)
		}
	}
}

func sameUser(a, b *corev1.UserInfo) bool {
	return a.GetUsername() == b.GetUsername() && a.GetUid() == b.GetUid() && slices.Equal(a.GetGroups(), b.GetGroups())
}

func BenchmarkAuthenticateToken(b *testing.B) {
	var static []StaticToken
	for i := 0; i < 1000; i++ {
		static = append(static, StaticToken{Token: fmt.Sprintf("token-%04d-0123456789abcdef", i),
			User: &corev1.UserInfo{Username: fmt.Sprintf("user-%d", i), Groups: []string{"dev"}}})
	}
	a, err := NewTokenAuthenticator(DefaultAuthenticatorConfig(), static)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, st := a.AuthenticateToken("token-0500-0123456789abcdef"); st != nil {
			b.Fatal(st)
		}
	}
}

// TestServiceAccountTokenBinding: a ServiceAccount token authenticates
// only while its account exists with the uid the Secret is bound to: not
// before the account exists, not after it is deleted, not once it is
// recreated (another uid), and never without a bound uid.
func TestServiceAccountTokenBinding(t *testing.T) {
	a, err := NewTokenAuthenticator(DefaultAuthenticatorConfig(), nil)
	if err != nil {
		t.Fatal(err)
	}
	sa := func(uid string) *corev1.ServiceAccount {
		return &corev1.ServiceAccount{Metadata: &corev1.ObjectMeta{Namespace: "team", Name: "robot", Uid: uid}}
	}
	a.UpsertSecret(saSecret("team", "robot-token", "robot", SecretTypeServiceAccountToken, "robot-token-0123456789"))
	unbound := saSecret("team", "unbound", "robot", SecretTypeServiceAccountToken, "unbound-token-0123456789")
	delete(unbound.Metadata.Annotations, AnnotationServiceAccountUID)
	a.UpsertSecret(unbound)
	steps := []struct {
		name  string
		do    func()
		token string
		ok    bool
	}{
		{"no such account", func() {}, "robot-token-0123456789", false},
		{"account with the bound uid", func() { a.UpsertServiceAccount(sa("sa-uid")) }, "robot-token-0123456789", true},
		{"a token bound to no uid", func() {}, "unbound-token-0123456789", false},
		{"account deleted", func() { a.DeleteServiceAccount("team", "robot") }, "robot-token-0123456789", false},
		{"account recreated with another uid", func() { a.UpsertServiceAccount(sa("sa-uid-2")) }, "robot-token-0123456789", false},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			st.do()
			u, status := a.AuthenticateToken(st.token)
			if (status == nil) != st.ok {
				t.Fatalf("AuthenticateToken = %v, %v; want ok %v", u, status, st.ok)
			}
			if !st.ok && status.GetCode() != 401 {
				t.Errorf("status %v, want 401", status)
			}
		})
	}
}
