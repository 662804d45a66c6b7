package apiserver_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/podflow/podflow/bus/bustest"
	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/objects"
)

// whoami is the username token authenticates as (a SelfSubjectReview)
// and the response's code.
func (s *system) whoami(t *testing.T, token string) (int, any) {
	t.Helper()
	code, body, _ := do(t, s.client(t, token), "POST", s.url+"/apis/authentication.k8s.io/v1/selfsubjectreviews", "application/json",
		`{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}`)
	return code, path(body, "status.userInfo.username")
}

// TestTokenRequest: `kubectl create token robot` as the admin returns a
// bound token that authenticates as the ServiceAccount (whoami), with the
// expiry asked for; a user without create on serviceaccounts/token is
// refused; the token stops authenticating once the account is deleted,
// and a recreated account (another uid) does not revive it.
func TestTokenRequest(t *testing.T) {
	t.Parallel()
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
	whoami := func() (int, any) { return s.whoami(t, token) }
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

// TestTokenRequestBoundObject: a token bound to a Pod (or a Secret)
// carries kubernetes.io.pod (secret) name and uid, authenticates while
// that object exists, and gets 401 once it is deleted — its ServiceAccount
// still there. Refused at issue time, with kube-apiserver's codes: a uid
// that is not the object's (409 Conflict), a missing object (404), a pod
// running as another ServiceAccount (400) and a kind that cannot be bound
// (400).
func TestTokenRequestBoundObject(t *testing.T) {
	t.Parallel()
	s := startSystem(t, options{})
	admin := s.client(t, adminToken)
	ctx, cancel := context.WithTimeout(context.Background(), bustest.Timeout)
	defer cancel()
	sas := s.url + "/api/v1/namespaces/default/serviceaccounts"
	if code, body, _ := do(t, admin, "POST", sas, "application/json", `{"apiVersion":"v1","kind":"ServiceAccount","metadata":{"name":"robot"}}`); code != http.StatusCreated {
		t.Fatalf("create ServiceAccount: %d %v", code, body)
	}
	for _, o := range []objects.Object{
		&corev1.Pod{Metadata: &corev1.ObjectMeta{Namespace: "default", Name: "web", Uid: "pod-uid-1"}, Spec: &corev1.PodSpec{ServiceAccountName: "robot", NodeName: "node-a"}},
		&corev1.Node{Metadata: &corev1.ObjectMeta{Name: "node-a", Uid: "node-uid-a"}},
		&corev1.Pod{Metadata: &corev1.ObjectMeta{Namespace: "default", Name: "other", Uid: "pod-uid-2"}, Spec: &corev1.PodSpec{ServiceAccountName: "default"}},
		&corev1.Secret{Metadata: &corev1.ObjectMeta{Namespace: "default", Name: "creds", Uid: "secret-uid-1"}},
	} {
		if _, err := s.store.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	request := func(kind, name, uid string) (int, map[string]any) {
		t.Helper()
		tr := fmt.Sprintf(`{"apiVersion":"authentication.k8s.io/v1","kind":"TokenRequest","spec":{"boundObjectRef":{"apiVersion":"v1","kind":%q,"name":%q,"uid":%q}}}`, kind, name, uid)
		code, body, _ := do(t, admin, "POST", sas+"/robot/token", "application/json", tr)
		return code, body
	}

	for _, tc := range []struct {
		name             string
		kind, obj, uid   string
		want             int
		reason, contains string
	}{
		{"a uid that is not the pod's", "Pod", "web", "pod-uid-old", http.StatusConflict, "Conflict", "does not match the UID in record (pod-uid-1)"},
		{"a uid that is not the secret's", "Secret", "creds", "secret-uid-old", http.StatusConflict, "Conflict", "does not match the UID in record (secret-uid-1)"},
		{"a pod that does not exist", "Pod", "nobody", "", http.StatusNotFound, "NotFound", `"nobody" not found`},
		{"a pod of another ServiceAccount", "Pod", "other", "pod-uid-2", http.StatusBadRequest, "BadRequest", `to pod running with serviceaccount "default"`},
		{"a kind that cannot be bound", "ConfigMap", "web", "", http.StatusBadRequest, "BadRequest", "cannot bind token to object of type /v1, Kind=ConfigMap"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := request(tc.kind, tc.obj, tc.uid)
			msg, _ := path(body, "message").(string)
			if code != tc.want || path(body, "reason") != tc.reason || !strings.Contains(msg, tc.contains) || path(body, "status.token") != nil {
				t.Fatalf("got %d %v, want %d %s containing %q", code, body, tc.want, tc.reason, tc.contains)
			}
		})
	}

	for _, tc := range []struct {
		kind, name, uid, claim string
		remove                 func() error
	}{
		{"Pod", "web", "pod-uid-1", "pod", func() error { _, err := s.store.Delete(ctx, objects.Pods, "default", "web", 0); return err }},
		{"Secret", "creds", "", "secret", func() error { _, err := s.store.Delete(ctx, objects.Secrets, "default", "creds", 0); return err }},
	} {
		t.Run("bound to a "+tc.kind, func(t *testing.T) {
			code, body := request(tc.kind, tc.name, tc.uid)
			token, _ := path(body, "status.token").(string)
			if code != http.StatusCreated || token == "" {
				t.Fatalf("TokenRequest bound to %s %s: %d %v", tc.kind, tc.name, code, body)
			}
			claims := jwtClaims(t, token)
			k8s, _ := claims["kubernetes.io"].(map[string]any)
			wantUID := map[string]string{"web": "pod-uid-1", "creds": "secret-uid-1"}[tc.name]
			if path(k8s, tc.claim+".name") != tc.name || path(k8s, tc.claim+".uid") != wantUID {
				t.Errorf("claims %v, want kubernetes.io.%s {%s, %s}", claims, tc.claim, tc.name, wantUID)
			}
			// A pod's token names the pod's node (ServiceAccountTokenPodNodeInfo).
			if wantNode := map[string]any{"Pod": "node-a"}[tc.kind]; path(k8s, "node.name") != wantNode ||
				(wantNode != nil && path(k8s, "node.uid") != "node-uid-a") {
				t.Errorf("claims %v, want kubernetes.io.node %v", claims, wantNode)
			}
			bustest.Eventually(t, "the bound token authenticates", func() bool {
				code, user := s.whoami(t, token)
				return code == http.StatusCreated && user == "system:serviceaccount:default:robot"
			})
			if err := tc.remove(); err != nil {
				t.Fatal(err)
			}
			bustest.Eventually(t, "the token refused once its "+tc.kind+" is deleted", func() bool {
				code, _ := s.whoami(t, token)
				return code == http.StatusUnauthorized
			})
		})
	}
	// The account itself still authenticates: it was the objects' deletion.
	code, body, _ := do(t, admin, "POST", sas+"/robot/token", "application/json", `{"apiVersion":"authentication.k8s.io/v1","kind":"TokenRequest","spec":{}}`)
	token, _ := path(body, "status.token").(string)
	if code != http.StatusCreated {
		t.Fatalf("unbound TokenRequest: %d %v", code, body)
	}
	if code, user := s.whoami(t, token); code != http.StatusCreated || user != "system:serviceaccount:default:robot" {
		t.Errorf("an unbound token of the account: %d %v, want it to authenticate", code, user)
	}
}

// jwtClaims decodes a JWT's payload (no verification: what it claims).
func jwtClaims(t *testing.T, token string) map[string]any {
	t.Helper()
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		t.Fatalf("token %q is not a JWT", token)
	}
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	var c map[string]any
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	return c
}
