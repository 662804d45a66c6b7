package apiserver_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/podflow/podflow/bus/bustest"
)

// TestTokenRequest: `kubectl create token robot` as the admin returns a
// bound token that authenticates as the ServiceAccount (whoami), with the
// expiry asked for; a user without create on serviceaccounts/token is
// refused; the token stops authenticating once the account is deleted,
// and a recreated account (another uid) does not revive it.
func TestTokenRequest(t *testing.T) {
	s := startSystem(t, options{})
	admin, alice := s.client(t, adminToken), s.client(t, aliceToken)
	sas := s.url + "/api/v1/namespaces/default/serviceaccounts"
	create := func() {
		t.Helper()
		if code, body, _ := do(t, admin, "POST", sas, "application/json", `{"apiVersion":"v1","kind":"ServiceAccount","metadata":{"name":"robot"}}`); code != http.StatusCreated {
			t.Fatalf("create ServiceAccount: %d %v", code, body)
		}
	}
	create()
	tr := `{"apiVersion":"authentication.k8s.io/v1","kind":"TokenRequest","spec":{"expirationSeconds":3600}}`
	code, body, _ := do(t, admin, "POST", sas+"/robot/token", "application/json", tr)
	if code != http.StatusCreated {
		t.Fatalf("TokenRequest: %d %v", code, body)
	}
	token, _ := path(body, "status.token").(string)
	if token == "" || path(body, "kind") != "TokenRequest" || path(body, "status.expirationTimestamp") == nil {
		t.Fatalf("TokenRequest response %v", body)
	}
	whoami := func() (int, any) {
		code, body, _ := do(t, s.client(t, token), "POST", s.url+"/apis/authentication.k8s.io/v1/selfsubjectreviews", "application/json",
			`{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}`)
		return code, path(body, "status.userInfo.username")
	}
	bustest.Eventually(t, "the token authenticates as the ServiceAccount", func() bool {
		code, user := whoami()
		return code == http.StatusCreated && user == "system:serviceaccount:default:robot"
	})

	for _, tc := range []struct {
		name string
		body string
		want int
	}{
		{"alice without create on serviceaccounts/token", tr, http.StatusForbidden},
		{"a ServiceAccount that does not exist", tr, http.StatusNotFound},
		{"an expiry under 10 minutes", `{"apiVersion":"authentication.k8s.io/v1","kind":"TokenRequest","spec":{"expirationSeconds":60}}`, http.StatusUnprocessableEntity},
		{"an expiry over 2^32 seconds", `{"apiVersion":"authentication.k8s.io/v1","kind":"TokenRequest","spec":{"expirationSeconds":4294967297}}`, http.StatusUnprocessableEntity},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, url := admin, sas+"/robot/token"
			switch tc.want {
			case http.StatusForbidden:
				c = alice
			case http.StatusNotFound:
				url = sas + "/nobody/token"
			}
			if code, body, _ := do(t, c, "POST", url, "application/json", tc.body); code != tc.want {
				t.Fatalf("got %d %v, want %d", code, body, tc.want)
			}
		})
	}

	if code, body, _ := do(t, admin, "DELETE", sas+"/robot", "", ""); code != http.StatusOK {
		t.Fatalf("delete ServiceAccount: %d %v", code, body)
	}
	bustest.Eventually(t, "the token refused once its account is deleted", func() bool { code, _ := whoami(); return code == http.StatusUnauthorized })
	create() // the same name, another uid
	time.Sleep(500 * time.Millisecond)
	if code, user := whoami(); code != http.StatusUnauthorized {
		t.Fatalf("the token of a deleted account authenticates again for its successor: %d %v", code, user)
	}
}
