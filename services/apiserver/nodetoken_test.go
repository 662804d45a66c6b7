package apiserver_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/podflow/podflow/bus/bustest"
	"github.com/podflow/podflow/proto/apiv1"
	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/pipeline"
)

// TestNodeServiceAccountToken: a node agent asks the api stage on the bus
// (pipeline.RequestNodeToken, as node n1's NATS user) for a projected
// serviceAccountToken. The api stage refuses, by code, a pod bound to
// another node (403), a ServiceAccount that is not the pod's (403), a pod
// that does not exist (404) or was recreated (409), and an expiration
// under 10 minutes (422). For its own pod it gets a token bound to the
// pod that authenticates over HTTPS as the pod's ServiceAccount — until
// the pod is deleted.
func TestNodeServiceAccountToken(t *testing.T) {
	t.Parallel()
	s := startSystem(t, options{nodes: []string{"n1", "n2"}})
	admin := s.client(t, adminToken)
	ctx, cancel := context.WithTimeout(context.Background(), bustest.Timeout)
	defer cancel()
	sas := s.url + "/api/v1/namespaces/default/serviceaccounts"
	for _, sa := range []string{"robot", "default"} {
		if code, body, _ := do(t, admin, "POST", sas, "application/json", `{"apiVersion":"v1","kind":"ServiceAccount","metadata":{"name":"`+sa+`"}}`); code != http.StatusCreated {
			t.Fatalf("create ServiceAccount %s: %d %v", sa, code, body)
		}
	}
	pod := func(name, uid, node, sa string) *corev1.Pod {
		return &corev1.Pod{Metadata: &corev1.ObjectMeta{Namespace: "default", Name: name, Uid: uid},
			Spec: &corev1.PodSpec{NodeName: node, ServiceAccountName: sa}}
	}
	for _, p := range []*corev1.Pod{pod("web", "uid-web", "n1", "robot"), pod("elsewhere", "uid-elsewhere", "n2", "robot"), pod("plain", "uid-plain", "n1", "default"),
		pod("ghostly", "uid-ghostly", "n1", "ghost")} { // ghost: no such ServiceAccount
		if _, err := s.store.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	n1 := bustest.ConnectAs(t, s.srv, pipeline.NodeRole("n1"), "n1")
	askFor := func(name, uid, sa string, exp int64, aud string) (string, error) {
		tok, _, err := pipeline.RequestNodeToken(ctx, n1.NATS(), "n1", &apiv1.NodeTokenRequest{
			Namespace: "default", PodName: name, PodUid: uid, ServiceAccount: sa, ExpirationSeconds: exp, Audience: aud})
		return tok, err
	}
	ask := func(name, uid, sa string, exp int64) (string, error) { return askFor(name, uid, sa, exp, "") }

	for _, tc := range []struct {
		name          string
		pod, uid, sa  string
		exp           int64
		aud           string
		code          int32
		reason, words string
	}{
		{"another node's pod", "elsewhere", "uid-elsewhere", "robot", 0, "", 403, "Forbidden", "bound to a pod scheduled on a different node"},
		{"a ServiceAccount that is not the pod's", "plain", "uid-plain", "robot", 0, "", 403, "Forbidden", "runs as serviceaccount default"},
		{"a pod that does not exist", "nobody", "uid-nobody", "robot", 0, "", 404, "NotFound", `pods "nobody" not found`},
		{"a ServiceAccount that does not exist", "ghostly", "uid-ghostly", "ghost", 0, "", 404, "NotFound", `serviceaccounts "ghost" not found`},
		{"a recreated pod", "web", "uid-old", "robot", 0, "", 409, "Conflict", "does not match the UID in record (uid-web)"},
		{"an expiration under 10 minutes", "web", "uid-web", "robot", 599, "", 422, "Invalid", "spec.expirationSeconds: Invalid value: may not specify a duration less than 10 minutes"},
		{"an expiration over 2^32 seconds", "web", "uid-web", "robot", 1<<32 + 1, "", 422, "Invalid", "may not specify a duration larger than 2^32 seconds"},
		{"an audience over 1024 bytes", "web", "uid-web", "robot", 0, strings.Repeat("a", 1025), 422, "Invalid", "an audience may not be longer than 1024 bytes"},
		{"no pod uid", "web", "", "robot", 0, "", 422, "Invalid", "spec.boundObjectRef"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tok, err := askFor(tc.pod, tc.uid, tc.sa, tc.exp, tc.aud)
			var refused *pipeline.TokenRefusedError
			if !errors.As(err, &refused) || refused.Code() != tc.code || refused.Status.GetReason() != tc.reason || !strings.Contains(err.Error(), tc.words) || tok != "" {
				t.Fatalf("got %q, %v; want a %d %s refusal containing %q", tok, err, tc.code, tc.reason, tc.words)
			}
		})
	}

	// Node n2 is stored, n1 is not: a pod's token names its node, with the
	// Node's uid when there is one (kube-apiserver's
	// ServiceAccountTokenPodNodeInfo).
	if _, err := s.store.Create(ctx, &corev1.Node{Metadata: &corev1.ObjectMeta{Name: "n2", Uid: "uid-n2"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.store.Create(ctx, pod("web2", "uid-web2", "n2", "robot")); err != nil {
		t.Fatal(err)
	}
	n2 := bustest.ConnectAs(t, s.srv, pipeline.NodeRole("n2"), "n2")
	tok2, _, err := pipeline.RequestNodeToken(ctx, n2.NATS(), "n2", &apiv1.NodeTokenRequest{
		Namespace: "default", PodName: "web2", PodUid: "uid-web2", ServiceAccount: "robot"})
	if err != nil {
		t.Fatal(err)
	}
	k2, _ := jwtClaims(t, tok2)["kubernetes.io"].(map[string]any)
	if path(k2, "node.name") != "n2" || path(k2, "node.uid") != "uid-n2" {
		t.Errorf("claims %v: want node n2 (uid-n2)", k2)
	}
	reviews := s.url + "/apis/authentication.k8s.io/v1/tokenreviews"
	bustest.Eventually(t, "a TokenReview of n2's pod token gives the pod, its node and the credential id", func() bool {
		code, body, _ := do(t, admin, "POST", reviews, "application/json",
			fmt.Sprintf(`{"apiVersion":"authentication.k8s.io/v1","kind":"TokenReview","spec":{"token":%q}}`, tok2))
		extra := fmt.Sprint(path(body, "status.user.extra"))
		return code == http.StatusCreated && strings.Contains(extra, "authentication.kubernetes.io/node-name:[n2]") &&
			strings.Contains(extra, "authentication.kubernetes.io/node-uid:[uid-n2]") &&
			strings.Contains(extra, "authentication.kubernetes.io/pod-name:[web2]") &&
			strings.Contains(extra, "authentication.kubernetes.io/credential-id:[JTI=")
	})

	tok, err := ask("web", "uid-web", "robot", 3600)
	if err != nil || tok == "" {
		t.Fatalf("n1's token for its pod web: %q, %v", tok, err)
	}
	claims := jwtClaims(t, tok)
	k8s, _ := claims["kubernetes.io"].(map[string]any)
	if path(k8s, "pod.name") != "web" || path(k8s, "pod.uid") != "uid-web" || path(k8s, "serviceaccount.name") != "robot" ||
		path(k8s, "node.name") != "n1" || path(k8s, "node.uid") != nil {
		t.Errorf("claims %v: want bound to pod web (uid-web) of serviceaccount robot", claims)
	}
	if exp, iat := path(claims, "exp"), path(claims, "iat"); exp == nil || iat == nil || exp.(float64)-iat.(float64) != 3600 {
		t.Errorf("exp %v iat %v: want an hour apart", exp, iat)
	}
	bustest.Eventually(t, "the pod's token authenticates over HTTPS as its ServiceAccount", func() bool {
		code, user := s.whoami(t, tok)
		return code == http.StatusCreated && user == "system:serviceaccount:default:robot"
	})
	if _, err := s.store.Delete(ctx, objects.Pods, "default", "web", 0); err != nil {
		t.Fatal(err)
	}
	bustest.Eventually(t, "the token refused once its pod is deleted", func() bool {
		code, _ := s.whoami(t, tok)
		return code == http.StatusUnauthorized
	})
	if _, err := ask("web", "uid-web", "robot", 0); err == nil {
		t.Errorf("a token for a deleted pod was issued")
	}
}
