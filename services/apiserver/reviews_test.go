package apiserver_test

import (
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/podflow/podflow/bus/bustest"
)

// TestTokenReview: a TokenReview says who a token is, as kube-apiserver's:
// a static token's user and groups, a bound ServiceAccount token's user,
// uid, audiences and (bound to a pod) the pod's name and uid as extra; a
// token for other audiences is not authenticated and says why; an unknown
// token is not authenticated. Creating one needs create on tokenreviews.
func TestTokenReview(t *testing.T) {
	t.Parallel()
	s := startSystem(t, options{})
	admin, alice := s.client(t, adminToken), s.client(t, aliceToken)
	reviews := s.url + "/apis/authentication.k8s.io/v1/tokenreviews"
	review := func(c *http.Client, token string, audiences ...string) (int, map[string]any) {
		t.Helper()
		auds := ""
		if len(audiences) > 0 {
			auds = fmt.Sprintf(`,"audiences":["%s"]`, strings.Join(audiences, `","`))
		}
		code, body, _ := do(t, c, "POST", reviews, "application/json",
			fmt.Sprintf(`{"apiVersion":"authentication.k8s.io/v1","kind":"TokenReview","spec":{"token":%q%s}}`, token, auds))
		return code, body
	}

	code, body := review(admin, aliceToken)
	if code != 201 || path(body, "status.authenticated") != true || path(body, "status.user.username") != "alice" ||
		fmt.Sprint(path(body, "status.user.groups")) != "[devs system:authenticated]" {
		t.Fatalf("review of alice's token: %d %v", code, body)
	}
	if code, body := review(admin, "not-a-token-0123456789"); code != 201 || path(body, "status.authenticated") == true || path(body, "status.user.username") != nil {
		t.Errorf("review of an unknown token: %d %v", code, body)
	}
	if code, body := review(admin, aliceToken, "vault"); code != 201 || path(body, "status.authenticated") == true {
		t.Errorf("a static token for an audience that is not the server's: %d %v", code, body)
	}
	if code, body := review(admin, ""); code != 400 || body["message"] != "token is required for TokenReview in authentication" {
		t.Errorf("an empty token: %d %v", code, body)
	}
	if code, body := review(alice, aliceToken); code != 403 {
		t.Errorf("alice without create on tokenreviews: %d %v", code, body)
	}

	// Bound ServiceAccount tokens, one bound to a pod running as the account.
	sas := s.url + "/api/v1/namespaces/default/serviceaccounts"
	if code, body, _ := do(t, admin, "POST", sas, "application/json", `{"metadata":{"name":"robot"}}`); code != 201 {
		t.Fatalf("create ServiceAccount: %d %v", code, body)
	}
	code, body, _ = do(t, admin, "POST", s.url+"/api/v1/namespaces/default/pods", "application/json",
		`{"metadata":{"name":"p"},"spec":{"serviceAccountName":"robot","containers":[{"name":"c","image":"nginx"}]}}`)
	if code != 201 {
		t.Fatalf("create pod: %d %v", code, body)
	}
	podUID := path(body, "metadata.uid").(string)
	issue := func(spec string) string {
		t.Helper()
		code, body, _ := do(t, admin, "POST", sas+"/robot/token", "application/json", `{"spec":{`+spec+`}}`)
		if code != 201 {
			t.Fatalf("TokenRequest %s: %d %v", spec, code, body)
		}
		return path(body, "status.token").(string)
	}
	plain := issue(`"expirationSeconds":3600`)
	vault := issue(`"audiences":["vault"]`)
	bound := issue(`"boundObjectRef":{"kind":"Pod","apiVersion":"v1","name":"p","uid":"` + podUID + `"}`)

	bustest.Eventually(t, "the bound token authenticates", func() bool {
		code, body := review(admin, plain)
		return code == 201 && path(body, "status.authenticated") == true
	})
	// (authenticated false is left out of the JSON, as kube-apiserver's
	// omitempty field.)
	code, body = review(admin, plain)
	if path(body, "status.user.username") != "system:serviceaccount:default:robot" || path(body, "status.user.uid") == nil ||
		!strings.Contains(fmt.Sprint(path(body, "status.user.groups")), "system:serviceaccounts:default") ||
		fmt.Sprint(path(body, "status.audiences")) != "[https://kubernetes.default.svc.cluster.local]" {
		t.Errorf("review of a bound token: %d %v", code, body)
	}
	code, body = review(admin, plain, "vault")
	if path(body, "status.authenticated") == true ||
		path(body, "status.error") != `token audiences ["https://kubernetes.default.svc.cluster.local"] is invalid for the target audiences ["vault"]` {
		t.Errorf("review of a bound token for another audience: %d %v", code, body)
	}
	code, body = review(admin, vault, "vault")
	if path(body, "status.authenticated") != true || fmt.Sprint(path(body, "status.audiences")) != "[vault]" {
		t.Errorf("review of a token for vault, asked for vault: %d %v", code, body)
	}
	if code, body := review(admin, vault); path(body, "status.authenticated") == true {
		t.Errorf("review of a token for vault, for the server's audiences: %d %v", code, body)
	}
	bustest.Eventually(t, "the pod-bound token authenticates", func() bool {
		_, body := review(admin, bound)
		return path(body, "status.authenticated") == true
	})
	_, body = review(admin, bound)
	// The pod is not bound to a node: no node-name; the token's jti is its
	// credential id.
	if !regexp.MustCompile(`^map\[authentication\.kubernetes\.io/credential-id:\[JTI=[0-9a-f-]{36}\] authentication\.kubernetes\.io/pod-name:\[p\] authentication\.kubernetes\.io/pod-uid:\[` +
		regexp.QuoteMeta(podUID) + `\]\]$`).MatchString(fmt.Sprint(path(body, "status.user.extra"))) {
		t.Errorf("a pod-bound token's extra: %v", body)
	}
}

// TestSubjectAccessReview: SubjectAccessReview and LocalSubjectAccessReview
// answer with RBAC's decision and reason for the user and groups asked
// about (a binding to a missing role is named in the reason), the
// evaluationError of a selector that does not parse, kube-apiserver's 422
// for an invalid spec, and need create on their resource.
func TestSubjectAccessReview(t *testing.T) {
	t.Parallel()
	s := startSystem(t, options{})
	admin, alice := s.client(t, adminToken), s.client(t, aliceToken)
	sar := s.url + "/apis/authorization.k8s.io/v1/subjectaccessreviews"
	lsar := s.url + "/apis/authorization.k8s.io/v1/namespaces/default/localsubjectaccessreviews"
	ask := func(c *http.Client, url, kind, spec string) (int, map[string]any) {
		t.Helper()
		code, body, _ := do(t, c, "POST", url, "application/json",
			fmt.Sprintf(`{"apiVersion":"authorization.k8s.io/v1","kind":%q,"spec":%s}`, kind, spec))
		return code, body
	}
	alicePods := `{"user":"alice","groups":["devs"],"resourceAttributes":{"namespace":"default","verb":"list","resource":"pods"}}`

	code, body := ask(admin, sar, "SubjectAccessReview", alicePods)
	if code != 201 || path(body, "status.allowed") != false || path(body, "status.reason") != nil || body["kind"] != "SubjectAccessReview" {
		t.Fatalf("alice, no binding: %d %v", code, body)
	}
	post := func(url, obj string) {
		t.Helper()
		if code, body, _ := do(t, admin, "POST", url, "application/json", obj); code != 201 {
			t.Fatalf("POST %s: %d %v", url, code, body)
		}
	}
	rbac := s.url + "/apis/rbac.authorization.k8s.io/v1/namespaces/default/"
	post(rbac+"rolebindings", `{"metadata":{"name":"dangling"},"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"Role","name":"nope"},
		"subjects":[{"kind":"Group","name":"devs","apiGroup":"rbac.authorization.k8s.io"}]}`)
	bustest.Eventually(t, "the dangling binding is named", func() bool {
		_, body := ask(admin, sar, "SubjectAccessReview", alicePods)
		return path(body, "status.reason") == `RBAC: role.rbac.authorization.k8s.io "nope" not found`
	})
	post(rbac+"roles", `{"metadata":{"name":"pod-reader"},"rules":[{"apiGroups":[""],"resources":["pods"],"verbs":["list"]}]}`)
	post(rbac+"rolebindings", `{"metadata":{"name":"alice-reads"},"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"Role","name":"pod-reader"},
		"subjects":[{"kind":"User","name":"alice","apiGroup":"rbac.authorization.k8s.io"}]}`)
	bustest.Eventually(t, "alice may list pods", func() bool {
		_, body := ask(admin, sar, "SubjectAccessReview", alicePods)
		return path(body, "status.allowed") == true
	})
	_, body = ask(admin, sar, "SubjectAccessReview", alicePods)
	if path(body, "status.reason") != `RBAC: allowed by RoleBinding "default/alice-reads" of Role "pod-reader" to User "alice"` {
		t.Errorf("reason: %v", body)
	}
	code, body = ask(admin, lsar, "LocalSubjectAccessReview", alicePods)
	if code != 201 || path(body, "status.allowed") != true || path(body, "metadata.namespace") != "default" {
		t.Errorf("local review: %d %v", code, body)
	}
	code, body = ask(admin, sar, "SubjectAccessReview",
		`{"user":"alice","resourceAttributes":{"namespace":"default","verb":"list","resource":"pods","fieldSelector":{"rawSelector":"a=b=c"}}}`)
	if code != 201 || path(body, "status.evaluationError") != "spec.resourceAttributes.fieldSelector ignored due to parse error" {
		t.Errorf("a selector that does not parse: %d %v", code, body)
	}
	if code, body = ask(admin, sar, "SubjectAccessReview", `{"user":"bob","nonResourceAttributes":{"path":"/healthz","verb":"get"}}`); path(body, "status.allowed") != false {
		t.Errorf("an unauthenticated user's non-resource GET: %d %v", code, body)
	}
	if code, body = ask(admin, sar, "SubjectAccessReview", `{"user":"bob","groups":["system:authenticated"],"nonResourceAttributes":{"path":"/healthz","verb":"get"}}`); path(body, "status.allowed") != true {
		t.Errorf("an authenticated user's non-resource GET: %d %v", code, body)
	}

	for _, c := range []struct{ url, kind, spec, want string }{
		{sar, "SubjectAccessReview", `{"user":"alice"}`,
			`SubjectAccessReview.authorization.k8s.io "" is invalid: spec: Invalid value: null: exactly one of nonResourceAttributes or resourceAttributes must be specified`},
		{sar, "SubjectAccessReview", `{"resourceAttributes":{"verb":"get","resource":"pods"}}`,
			`SubjectAccessReview.authorization.k8s.io "" is invalid: spec.user: Invalid value: "": at least one of user or group must be specified`},
		{lsar, "LocalSubjectAccessReview", `{"user":"alice","resourceAttributes":{"namespace":"other","verb":"get","resource":"pods"}}`,
			`LocalSubjectAccessReview.authorization.k8s.io "" is invalid: spec.resourceAttributes.namespace: Invalid value: "other": must match metadata.namespace`},
	} {
		code, body := ask(admin, c.url, c.kind, c.spec)
		if code != 422 || body["reason"] != "Invalid" || body["message"] != c.want {
			t.Errorf("%s %s: %d %v, want 422 %q", c.kind, c.spec, code, body, c.want)
		}
	}
	if code, body := ask(alice, sar, "SubjectAccessReview", alicePods); code != 403 {
		t.Errorf("alice without create on subjectaccessreviews: %d %v", code, body)
	}
	if code, body := ask(alice, lsar, "LocalSubjectAccessReview", alicePods); code != 403 {
		t.Errorf("alice without create on localsubjectaccessreviews: %d %v", code, body)
	}
}

// TestReviewsRefuseTable: the reviews are created, never stored, and have
// no table convertor, so a create that accepts only a Table is refused
// with kube-apiserver's 406 (the conformance test "should return a 406
// for a backend which does not implement metadata"); an Accept header
// that falls back to JSON gets the review.
func TestReviewsRefuseTable(t *testing.T) {
	t.Parallel()
	s := startSystem(t, options{})
	admin := s.client(t, adminToken)
	const table = "application/json;as=Table;v=v1;g=meta.k8s.io"
	for _, c := range []struct{ name, url, body string }{
		{"SelfSubjectAccessReview", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
			`{"apiVersion":"authorization.k8s.io/v1","kind":"SelfSubjectAccessReview","spec":{"nonResourceAttributes":{"path":"/","verb":"get"}}}`},
		{"SubjectAccessReview", "/apis/authorization.k8s.io/v1/subjectaccessreviews",
			`{"apiVersion":"authorization.k8s.io/v1","kind":"SubjectAccessReview","spec":{"user":"alice","nonResourceAttributes":{"path":"/","verb":"get"}}}`},
		{"TokenReview", "/apis/authentication.k8s.io/v1/tokenreviews",
			`{"apiVersion":"authentication.k8s.io/v1","kind":"TokenReview","spec":{"token":"` + aliceToken + `"}}`},
		{"SelfSubjectReview", "/apis/authentication.k8s.io/v1/selfsubjectreviews",
			`{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, body, _ := do(t, admin, "POST", s.url+c.url, "application/json", c.body, "Accept", table)
			if code != 406 || body["reason"] != "NotAcceptable" ||
				body["message"] != "only the following media types are accepted: application/json, application/yaml, application/vnd.kubernetes.protobuf" {
				t.Errorf("Accept: Table only: %d %v", code, body)
			}
			if code, body, _ := do(t, admin, "POST", s.url+c.url, "application/json", c.body, "Accept", table+", application/json"); code != 201 || body["kind"] != c.name {
				t.Errorf("Accept: Table, then JSON: %d %v", code, body)
			}
		})
	}
}
