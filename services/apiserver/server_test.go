package apiserver_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"go.uber.org/goleak"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/apiserver"
	"github.com/podflow/podflow/services/apiserver/pki"
	"github.com/podflow/podflow/services/objects"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// TestPods drives the pod lifecycle over HTTPS against the real api,
// admission and persistence stages.
func TestPods(t *testing.T) {
	t.Parallel()
	s := startSystem(t, options{})
	admin := s.client(t, adminToken)
	pods := s.url + "/api/v1/namespaces/default/pods"

	code, body, _ := do(t, admin, "POST", pods, "application/json", podJSON("web", ""))
	if code != 201 || path(body, "kind") != "Pod" || path(body, "metadata.name") != "web" || path(body, "metadata.uid") == nil {
		t.Fatalf("create: %d %v", code, body)
	}
	rv := path(body, "metadata.resourceVersion").(string)

	code, body, _ = do(t, admin, "POST", pods, "application/json", podJSON("web", ""))
	if code != 409 || path(body, "reason") != "AlreadyExists" || path(body, "kind") != "Status" {
		t.Fatalf("duplicate create: %d %v", code, body)
	}

	code, body, _ = do(t, admin, "GET", pods+"/web", "", "")
	if code != 200 || path(body, "metadata.resourceVersion") != rv || path(body, "spec.containers") == nil {
		t.Fatalf("get: %d %v", code, body)
	}
	// The defaults admission stored are shown, as kube-apiserver shows them.
	c0 := path(body, "spec.containers").([]any)[0].(map[string]any)
	if c0["terminationMessagePath"] != "/dev/termination-log" || c0["terminationMessagePolicy"] != "File" || c0["imagePullPolicy"] != "Always" {
		t.Errorf("container defaults %v, want terminationMessagePath /dev/termination-log, terminationMessagePolicy File, imagePullPolicy Always", c0)
	}
	code, body, _ = do(t, admin, "GET", pods+"/nope", "", "")
	if code != 404 || path(body, "reason") != "NotFound" || path(body, "details.name") != "nope" {
		t.Fatalf("get missing: %d %v", code, body)
	}

	t.Run("discovery", func(t *testing.T) {
		code, body, hdr := do(t, admin, "GET", s.url+"/api", "", "", "Accept",
			"application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json")
		if code != 200 || !strings.Contains(hdr.Get("Content-Type"), "as=APIGroupDiscoveryList") || body["kind"] != "APIGroupDiscoveryList" {
			t.Fatalf("aggregated /api: %d %v %v", code, hdr, body)
		}
		found := false
		for _, r := range path(body["items"].([]any)[0].(map[string]any), "versions").([]any)[0].(map[string]any)["resources"].([]any) {
			rm := r.(map[string]any)
			found = found || (rm["resource"] == "pods" && rm["scope"] == "Namespaced" && path(rm, "responseKind.kind") == "Pod")
		}
		if !found {
			t.Errorf("aggregated /api lacks pods: %v", body)
		}
		code, body, _ = do(t, admin, "GET", s.url+"/apis", "", "", "Accept", "application/json")
		if code != 200 || body["kind"] != "APIGroupList" {
			t.Fatalf("legacy /apis: %d %v", code, body)
		}
		code, body, _ = do(t, admin, "GET", s.url+"/apis/rbac.authorization.k8s.io/v1", "", "")
		if code != 200 || body["kind"] != "APIResourceList" || !strings.Contains(fmt.Sprint(body["resources"]), "clusterroles") {
			t.Fatalf("legacy group version: %d %v", code, body)
		}
		code, body, _ = do(t, admin, "GET", s.url+"/openapi/v3/api/v1", "", "")
		if code != 200 || !strings.Contains(fmt.Sprint(body["paths"]), "fieldValidation") {
			t.Fatalf("openapi: %d %v", code, body)
		}
	})

	t.Run("list with selectors", func(t *testing.T) {
		code, body, _ := do(t, admin, "POST", pods, "application/json",
			`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"db","labels":{"app":"db"}},"spec":{"containers":[{"name":"c","image":"postgres"}]}}`)
		if code != 201 {
			t.Fatalf("create db: %d %v", code, body)
		}
		for _, c := range []struct {
			query string
			want  []string
		}{
			{"", []string{"db", "web"}},
			{"?labelSelector=app%3Dweb", []string{"web"}},
			{"?labelSelector=app+in+(db,x)", []string{"db"}},
			{"?fieldSelector=metadata.name%3Ddb", []string{"db"}},
			{"?fieldSelector=spec.nodeName%3D", []string{"db", "web"}},
			{"?labelSelector=app%3Dnone", nil},
		} {
			code, body, _ := do(t, admin, "GET", pods+c.query, "", "")
			if code != 200 || path(body, "kind") != "PodList" || path(body, "metadata.resourceVersion") == "" {
				t.Fatalf("list %q: %d %v", c.query, code, body)
			}
			var got []string
			for _, it := range body["items"].([]any) {
				got = append(got, path(it.(map[string]any), "metadata.name").(string))
			}
			if fmt.Sprint(got) != fmt.Sprint(c.want) {
				t.Errorf("list %q = %v, want %v", c.query, got, c.want)
			}
		}
		code, body, _ = do(t, admin, "GET", pods+"?labelSelector=%3D%3D%3D", "", "")
		if code != 400 {
			t.Errorf("bad selector: %d %v", code, body)
		}
	})

	t.Run("table", func(t *testing.T) {
		code, body, _ := do(t, admin, "GET", pods, "", "", "Accept", "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json")
		if code != 200 || body["kind"] != "Table" {
			t.Fatalf("table: %d %v", code, body)
		}
		var cols []string
		for _, c := range body["columnDefinitions"].([]any) {
			cols = append(cols, c.(map[string]any)["name"].(string))
		}
		if strings.Join(cols[:5], ",") != "Name,Ready,Status,Restarts,Age" {
			t.Errorf("columns %v", cols)
		}
		rows := body["rows"].([]any)
		if len(rows) != 2 {
			t.Fatalf("rows %v", rows)
		}
		cells := rows[1].(map[string]any)["cells"].([]any)
		if cells[0] != "web" || cells[1] != "0/1" || cells[2] != "Pending" {
			t.Errorf("web row %v", cells)
		}
		if path(rows[1].(map[string]any), "object.kind") != "PartialObjectMetadata" {
			t.Errorf("row object %v", rows[1])
		}
	})

	t.Run("update and patch", func(t *testing.T) {
		code, body, _ := do(t, admin, "PATCH", pods+"/web", "application/strategic-merge-patch+json", `{"metadata":{"labels":{"tier":"front"}}}`)
		if code != 200 || path(body, "metadata.labels.tier") != "front" || path(body, "metadata.labels.app") != "web" {
			t.Fatalf("strategic patch: %d %v", code, body)
		}
		code, body, _ = do(t, admin, "PATCH", pods+"/web", "application/strategic-merge-patch+json", `{"spec":{"containers":[{"name":"c","image":"nginx:2"}]}}`)
		if code != 200 || path(body, "spec.containers").([]any)[0].(map[string]any)["image"] != "nginx:2" {
			t.Fatalf("image patch: %d %v", code, body)
		}
		// A JSON merge patch replaces the whole list, dropping the
		// defaulted fields: a spec change Kubernetes refuses too.
		code, body, _ = do(t, admin, "PATCH", pods+"/web", "application/merge-patch+json", `{"spec":{"containers":[{"name":"c","image":"nginx:3"}]}}`)
		if code != 422 || path(body, "reason") != "Invalid" {
			t.Fatalf("merge patch of containers: %d %v", code, body)
		}
		code, body, _ = do(t, admin, "PATCH", pods+"/web", "application/json-patch+json", `[{"op":"replace","path":"/spec/restartPolicy","value":"Never"}]`)
		if code != 422 || path(body, "reason") != "Invalid" {
			t.Fatalf("forbidden spec change: %d %v", code, body)
		}
		code, body, _ = do(t, admin, "PATCH", pods+"/web", "application/xml", `<x/>`)
		if code != 415 {
			t.Fatalf("unknown patch type: %d %v", code, body)
		}
		_, cur, _ := do(t, admin, "GET", pods+"/web", "", "")
		cur["metadata"].(map[string]any)["resourceVersion"] = "1"
		b, _ := json.Marshal(cur)
		code, body, _ = do(t, admin, "PUT", pods+"/web", "application/json", string(b))
		if code != 409 || path(body, "reason") != "Conflict" {
			t.Fatalf("stale update: %d %v", code, body)
		}
	})

	t.Run("invalid pods", func(t *testing.T) {
		code, body, _ := do(t, admin, "POST", pods+"?fieldValidation=Strict", "application/json", podJSON("typo", `,"imagePullPolcy":"Always"`))
		if code != 400 || !strings.Contains(fmt.Sprint(body["message"]), `unknown field "spec.containers[0].imagePullPolcy"`) {
			t.Fatalf("strict: %d %v", code, body)
		}
		code, body, hdr := do(t, admin, "POST", pods+"?fieldValidation=Warn&dryRun=All", "application/json", podJSON("typo", `,"imagePullPolcy":"Always"`))
		if code != 201 || !strings.Contains(hdr.Get("Warning"), "imagePullPolcy") {
			t.Fatalf("warn: %d %v %v", code, body, hdr)
		}
		code, body, _ = do(t, admin, "GET", pods+"/typo", "", "")
		if code != 404 {
			t.Fatalf("dry run stored the pod: %d %v", code, body)
		}
		// Admission refuses a container without an image: 422 with causes.
		code, body, _ = do(t, admin, "POST", pods, "application/json",
			`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"noimage"},"spec":{"containers":[{"name":"c"}]}}`)
		if code != 422 || path(body, "reason") != "Invalid" || path(body, "details.causes") == nil {
			t.Fatalf("admission: %d %v", code, body)
		}
		code, body, _ = do(t, admin, "POST", s.url+"/api/v1/namespaces/other/pods", "application/json",
			`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"x","namespace":"default"},"spec":{"containers":[{"name":"c","image":"i"}]}}`)
		if code != 400 {
			t.Fatalf("namespace mismatch: %d %v", code, body)
		}
		code, body, _ = do(t, admin, "POST", pods, "application/json", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x"}}`)
		if code != 400 {
			t.Fatalf("wrong kind: %d %v", code, body)
		}
		big := podJSON("big", `,"args":["`+strings.Repeat("x", 4<<20)+`"]`)
		code, body, _ = do(t, admin, "POST", pods, "application/json", big)
		if code != 413 {
			t.Fatalf("too large: %d %v", code, body)
		}
		bomb := "apiVersion: v1\nkind: Pod\nmetadata: {name: bomb}\nspec:\n  containers: [{name: c, image: i}]\nx0: &a [\"x\",\"x\",\"x\",\"x\",\"x\",\"x\",\"x\",\"x\",\"x\"]\n"
		for i := 1; i < 9; i++ {
			bomb += fmt.Sprintf("x%d: &%c [*%c,*%c,*%c,*%c,*%c,*%c,*%c,*%c,*%c]\n", i, 'a'+i, 'a'+i-1, 'a'+i-1, 'a'+i-1, 'a'+i-1, 'a'+i-1, 'a'+i-1, 'a'+i-1, 'a'+i-1, 'a'+i-1)
		}
		start := time.Now()
		code, body, _ = do(t, admin, "POST", pods, "application/yaml", bomb)
		if code != 413 && code != 400 {
			t.Fatalf("yaml bomb: %d %v", code, body)
		}
		t.Logf("yaml bomb refused with %d in %s", code, time.Since(start))
	})

	t.Run("delete", func(t *testing.T) {
		code, body, _ := do(t, admin, "DELETE", pods+"/db", "application/json", `{"gracePeriodSeconds":0}`)
		if code != 200 {
			t.Fatalf("delete: %d %v", code, body)
		}
		// An unbound pod is removed at once.
		code, body, _ = do(t, admin, "GET", pods+"/db", "", "")
		if code != 404 {
			t.Fatalf("after delete: %d %v", code, body)
		}
		code, body, _ = do(t, admin, "DELETE", pods+"/db", "", "")
		if code != 404 {
			t.Fatalf("delete missing: %d %v", code, body)
		}
	})

	t.Run("delete options", func(t *testing.T) {
		cms := strings.TrimSuffix(pods, "/pods") + "/configmaps"
		if code, body, _ := do(t, admin, "POST", cms, "application/json", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"owner"}}`); code != 201 {
			t.Fatalf("create: %d %v", code, body)
		}
		// Bad options: kube-apiserver's ValidateDeleteOptions, 422.
		for _, bad := range []struct{ body, query, msg string }{
			{body: `{"propagationPolicy":"Sideways"}`, msg: `propagationPolicy: Unsupported value: "Sideways"`},
			{body: `{"propagationPolicy":"Orphan","orphanDependents":true}`, msg: "orphanDependents and deletionPropagation cannot be both set"},
			{query: "?propagationPolicy=Sideways", msg: `propagationPolicy: Unsupported value: "Sideways"`},
		} {
			code, body, _ := do(t, admin, "DELETE", cms+"/owner"+bad.query, "application/json", bad.body)
			if code != 422 || !strings.Contains(fmt.Sprint(body["message"]), bad.msg) || !strings.HasPrefix(fmt.Sprint(body["message"]), `DeleteOptions.meta.k8s.io "" is invalid`) {
				t.Fatalf("delete with %s%s: %d %v", bad.body, bad.query, code, body)
			}
		}
		// Orphan, as a query parameter: the object is only marked, with
		// the orphan finalizer, until the garbage collector is done.
		code, body, _ := do(t, admin, "DELETE", cms+"/owner?propagationPolicy=Orphan", "", "")
		if code != 200 {
			t.Fatalf("delete orphan: %d %v", code, body)
		}
		code, body, _ = do(t, admin, "GET", cms+"/owner", "", "")
		md, _ := body["metadata"].(map[string]any)
		if code != 200 || md["deletionTimestamp"] == nil || fmt.Sprint(md["finalizers"]) != "[orphan]" {
			t.Fatalf("after an orphaning delete: %d %v", code, body)
		}
		// Background turns it into a deletion.
		if code, body, _ := do(t, admin, "DELETE", cms+"/owner", "application/json", `{"propagationPolicy":"Background"}`); code != 200 {
			t.Fatalf("delete background: %d %v", code, body)
		}
		if code, body, _ := do(t, admin, "GET", cms+"/owner", "", ""); code != 404 {
			t.Fatalf("after a background delete: %d %v", code, body)
		}
	})

	t.Run("log", func(t *testing.T) {
		// No scheduler runs here, so the pod has no node: like Kubernetes,
		// 400 (the Linux e2e test reads real logs with kubectl).
		code, body, _ := do(t, admin, "GET", pods+"/web/log", "", "")
		if code != 400 || !strings.Contains(fmt.Sprint(body["message"]), `pod "web" has no node yet`) {
			t.Fatalf("log: %d %v", code, body)
		}
	})
}

// TestWatch checks the watch protocol: initial ADDED events, changes from
// a resourceVersion, selector semantics, bookmarks and 410 Gone.
func TestWatch(t *testing.T) {
	t.Parallel()
	s := startSystem(t, options{history: 20, https: func(c *apiserver.Config) { c.BookmarkInterval = 200 * time.Millisecond }})
	admin := s.client(t, adminToken)
	pods := s.url + "/api/v1/namespaces/default/pods"
	code, body, _ := do(t, admin, "POST", pods, "application/json", podJSON("a", ""))
	if code != 201 {
		t.Fatalf("create: %d %v", code, body)
	}
	rv := path(body, "metadata.resourceVersion").(string)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	open := func(query string) (*bufio.Scanner, func()) {
		req, _ := http.NewRequestWithContext(ctx, "GET", pods+"?watch=true&"+query, nil)
		resp, err := admin.Do(req)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("watch %q: %v %v", query, err, resp)
		}
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 1<<20)
		return sc, func() { resp.Body.Close() }
	}
	next := func(sc *bufio.Scanner) (string, map[string]any) {
		t.Helper()
		if !sc.Scan() {
			t.Fatalf("watch ended: %v", sc.Err())
		}
		var ev struct {
			Type   string         `json:"type"`
			Object map[string]any `json:"object"`
		}
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("event %q: %v", sc.Bytes(), err)
		}
		return ev.Type, ev.Object
	}

	all, closeAll := open("")
	defer closeAll()
	if typ, obj := next(all); typ != "ADDED" || path(obj, "metadata.name") != "a" {
		t.Fatalf("initial event %s %v", typ, obj)
	}
	fromRV, closeFrom := open("resourceVersion=" + rv + "&allowWatchBookmarks=true")
	defer closeFrom()
	sel, closeSel := open("resourceVersion=" + rv + "&labelSelector=tier%3Dfront")
	defer closeSel()
	listedSel, closeListedSel := open("labelSelector=tier%3Dfront")
	defer closeListedSel()

	if code, body, _ := do(t, admin, "POST", pods, "application/json", podJSON("b", "")); code != 201 {
		t.Fatalf("create b: %d %v", code, body)
	}
	if typ, obj := next(all); typ != "ADDED" || path(obj, "metadata.name") != "b" {
		t.Fatalf("all: %s %v", typ, obj)
	}
	// A bookmark may come first (every 200 ms, allowWatchBookmarks):
	// the first event that is not one is b's.
	typ, obj := next(fromRV)
	for typ == "BOOKMARK" {
		typ, obj = next(fromRV)
	}
	if typ != "ADDED" || path(obj, "metadata.name") != "b" {
		t.Fatalf("from rv: %s %v", typ, obj)
	}
	// b enters the selector's view, then leaves it: ADDED... then DELETED.
	do(t, admin, "PATCH", pods+"/b", "application/merge-patch+json", `{"metadata":{"labels":{"tier":"front"}}}`)
	do(t, admin, "PATCH", pods+"/b", "application/merge-patch+json", `{"metadata":{"labels":{"tier":null}}}`)
	if typ, obj := next(sel); typ != "MODIFIED" || path(obj, "metadata.labels.tier") != "front" {
		t.Fatalf("selector enter: %s %v", typ, obj)
	}
	if typ, obj := next(sel); typ != "DELETED" || path(obj, "metadata.name") != "b" {
		t.Fatalf("selector leave: %s %v", typ, obj)
	}
	// A watch that listed first knows b entered its view: ADDED.
	if typ, obj := next(listedSel); typ != "ADDED" || path(obj, "metadata.labels.tier") != "front" {
		t.Fatalf("listed selector enter: %s %v", typ, obj)
	}
	if typ, obj := next(listedSel); typ != "DELETED" || path(obj, "metadata.name") != "b" {
		t.Fatalf("listed selector leave: %s %v", typ, obj)
	}
	do(t, admin, "DELETE", pods+"/b", "", "")
	var sawBookmark, sawDelete bool
	for !(sawBookmark && sawDelete) {
		typ, obj := next(fromRV)
		switch typ {
		case "BOOKMARK":
			sawBookmark = path(obj, "metadata.resourceVersion") != ""
		case "DELETED":
			sawDelete = path(obj, "metadata.name") == "b"
		}
	}

	// The store keeps 20 revisions of history: a watch from the first
	// pod's revision after 30 more writes is Gone.
	for i := range 30 {
		do(t, admin, "PATCH", pods+"/a", "application/merge-patch+json", fmt.Sprintf(`{"metadata":{"labels":{"n":"%d"}}}`, i))
	}
	gone, closeGone := open("resourceVersion=" + rv)
	defer closeGone()
	typ, obj = next(gone)
	if typ != "ERROR" || path(obj, "code") != float64(410) || path(obj, "reason") != "Expired" {
		t.Fatalf("compacted watch: %s %v", typ, obj)
	}
}

// TestAuthentication covers the chain: client certificates, static
// tokens, OIDC ID tokens, anonymous; and RBAC on top.
func TestAuthentication(t *testing.T) {
	t.Parallel()
	issuer := "https://issuer.example"
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	jwks := jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: key.Public(), KeyID: "k1", Algorithm: "RS256", Use: "sig"}}}
	jb, _ := json.Marshal(jwks)
	keysFile := filepath.Join(t.TempDir(), "jwks.json")
	if err := os.WriteFile(keysFile, jb, 0o600); err != nil {
		t.Fatal(err)
	}
	s := startSystem(t, options{https: func(c *apiserver.Config) {
		c.OIDC = apiserver.OIDCConfig{IssuerURL: issuer, ClientID: "kubernetes", KeysFile: keysFile, UsernameClaim: "email", GroupsClaim: "groups", GroupsPrefix: "oidc:"}
	}})
	pods := s.url + "/api/v1/namespaces/default/pods"
	sign := func(k *rsa.PrivateKey, kid string, claims map[string]any) string {
		sig, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: k}, (&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", kid))
		if err != nil {
			t.Fatal(err)
		}
		tok, err := jwt.Signed(sig).Claims(claims).Serialize()
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	now := time.Now()
	claims := func(mod func(map[string]any)) map[string]any {
		c := map[string]any{"iss": issuer, "aud": "kubernetes", "sub": "u1", "email": "carol@example.com", "email_verified": true,
			"groups": []string{"admins"}, "exp": now.Add(time.Hour).Unix(), "iat": now.Unix()}
		if mod != nil {
			mod(c)
		}
		return c
	}
	other, _ := rsa.GenerateKey(rand.Reader, 2048)
	foreignCA, _ := pki.NewCA("foreign")

	// RBAC: carol's OIDC group may list pods; alice (token) may get pods.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, o := range []objects.Object{
		&corev1.Role{Metadata: &corev1.ObjectMeta{Name: "reader", Namespace: "default"}, Rules: []*corev1.PolicyRule{{Verbs: []string{"get", "list"}, ApiGroups: []string{""}, Resources: []string{"pods"}}}},
		&corev1.RoleBinding{Metadata: &corev1.ObjectMeta{Name: "readers", Namespace: "default"}, RoleRef: &corev1.RoleRef{Kind: "Role", Name: "reader", ApiGroup: "rbac.authorization.k8s.io"},
			Subjects: []*corev1.Subject{{Kind: "Group", Name: "oidc:admins"}, {Kind: "User", Name: "alice"}}},
	} {
		if _, err := s.store.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	tok := func(token string) *http.Client { return s.client(t, token) }
	for _, c := range []struct {
		name   string
		client *http.Client
		method string
		want   int
	}{
		{"no credentials", tok(""), "GET", 401},
		{"unknown token", tok("not-a-known-token-xyz"), "GET", 401},
		{"malformed token", tok("has space"), "GET", 401},
		{"admin token", tok(adminToken), "GET", 200},
		{"alice token may list", tok(aliceToken), "GET", 200},
		{"alice token may not create", tok(aliceToken), "POST", 403},
		{"admin cert (system:masters)", s.certClient(t, s.ca, "root", "system:masters"), "POST", 201},
		{"bob cert without bindings", s.certClient(t, s.ca, "bob"), "GET", 403},
		{"oidc", tok(sign(key, "k1", claims(nil))), "GET", 200},
		{"oidc may not create", tok(sign(key, "k1", claims(nil))), "POST", 403},
		{"oidc expired", tok(sign(key, "k1", claims(func(c map[string]any) { c["exp"] = now.Add(-time.Hour).Unix() }))), "GET", 401},
		{"oidc wrong issuer", tok(sign(key, "k1", claims(func(c map[string]any) { c["iss"] = "https://evil" }))), "GET", 401},
		{"oidc wrong audience", tok(sign(key, "k1", claims(func(c map[string]any) { c["aud"] = "other" }))), "GET", 401},
		{"oidc unverified email", tok(sign(key, "k1", claims(func(c map[string]any) { c["email_verified"] = false }))), "GET", 401},
		{"oidc foreign key", tok(sign(other, "k1", claims(nil))), "GET", 401},
		{"oidc unknown kid", tok(sign(key, "k2", claims(nil))), "GET", 401},
		{"oidc garbage", tok("a.b.c"), "GET", 401},
	} {
		t.Run(c.name, func(t *testing.T) {
			body := ""
			if c.method == "POST" {
				body = podJSON("p-"+strings.ReplaceAll(strings.ToLower(c.name), " ", "-")[:10], "")
			}
			code, out, _ := do(t, c.client, c.method, pods, "application/json", body)
			if code != c.want {
				t.Fatalf("%s %s: %d, want %d: %v", c.method, pods, code, c.want, out)
			}
			if code == 401 && (path(out, "message") != "Unauthorized" || path(out, "reason") != "Unauthorized") {
				t.Errorf("401 says more than Unauthorized: %v", out)
			}
			if code == 403 && !strings.Contains(fmt.Sprint(out["message"]), "cannot") {
				t.Errorf("403 message: %v", out)
			}
		})
	}

	t.Run("bad client certificates", func(t *testing.T) {
		expired := func() *http.Client {
			c, k, err := s.ca.Issue(pki.Request{CommonName: "root", Groups: []string{"system:masters"},
				NotBefore: time.Now().Add(-48 * time.Hour), Validity: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			return s.pairClient(t, c, k)
		}()
		for name, c := range map[string]*http.Client{
			"foreign CA": s.certClient(t, foreignCA, "root", "system:masters"),
			"expired":    expired,
		} {
			code, out, _ := do(t, c, "GET", pods, "", "")
			if code != 401 || path(out, "message") != "Unauthorized" {
				t.Errorf("%s: %d %v", name, code, out)
			}
		}
	})

	t.Run("service account token", func(t *testing.T) {
		// A token bound to its ServiceAccount's uid (the api stage binds
		// the Secrets it writes; this one goes to the store directly).
		robot := &corev1.ServiceAccount{Metadata: &corev1.ObjectMeta{Name: "robot", Namespace: "default", Uid: "robot-uid"}}
		sec := &corev1.Secret{Metadata: &corev1.ObjectMeta{Name: "robot-token", Namespace: "default",
			Annotations: map[string]string{"kubernetes.io/service-account.name": "robot", "kubernetes.io/service-account.uid": "robot-uid"}},
			Type: "kubernetes.io/service-account-token", Data: map[string][]byte{"token": []byte("robot-secret-token-0123456789")}}
		for _, o := range []objects.Object{robot, sec} {
			if _, err := s.store.Create(ctx, o); err != nil {
				t.Fatal(err)
			}
		}
		c := tok("robot-secret-token-0123456789")
		deadline := time.Now().Add(20 * time.Second)
		for {
			// The api stage learns the token from its Secret informer.
			code, out, _ := do(t, c, "GET", pods, "", "")
			if code == 403 && strings.Contains(fmt.Sprint(out["message"]), `User "system:serviceaccount:default:robot"`) {
				break
			}
			if code != 401 || time.Now().After(deadline) {
				t.Fatalf("service account token: %d %v", code, out)
			}
			time.Sleep(20 * time.Millisecond)
		}
	})

	t.Run("self subject access review", func(t *testing.T) {
		review := func(c *http.Client, verb string) any {
			code, out, _ := do(t, c, "POST", s.url+"/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", "application/json",
				fmt.Sprintf(`{"apiVersion":"authorization.k8s.io/v1","kind":"SelfSubjectAccessReview","spec":{"resourceAttributes":{"namespace":"default","verb":%q,"resource":"pods"}}}`, verb))
			if code != 201 {
				t.Fatalf("review: %d %v", code, out)
			}
			return path(out, "status.allowed")
		}
		if review(tok(aliceToken), "list") != true || review(tok(aliceToken), "create") != false || review(s.certClient(t, s.ca, "bob"), "get") != false {
			t.Error("wrong review outcomes")
		}
	})

	t.Run("impersonation", func(t *testing.T) {
		code, out, _ := do(t, tok(adminToken), "POST", pods, "application/json", podJSON("imp", ""), "Impersonate-User", "alice")
		if code != 403 || !strings.Contains(fmt.Sprint(out["message"]), `User "alice"`) {
			t.Fatalf("admin as alice: %d %v", code, out)
		}
		code, out, _ = do(t, tok(aliceToken), "GET", pods, "", "", "Impersonate-User", "admin")
		if code != 403 {
			t.Fatalf("alice as admin: %d %v", code, out)
		}
	})
}

// TestAnonymous: requests without credentials are system:anonymous when
// enabled, and RBAC still decides.
func TestAnonymous(t *testing.T) {
	t.Parallel()
	s := startSystem(t, options{https: func(c *apiserver.Config) { c.Anonymous = true }})
	anon := s.client(t, "")
	code, out, _ := do(t, anon, "GET", s.url+"/api/v1/namespaces/default/pods", "", "")
	if code != 403 || !strings.Contains(fmt.Sprint(out["message"]), `"system:anonymous"`) {
		t.Fatalf("anonymous list: %d %v", code, out)
	}
	if code, out, _ := do(t, anon, "GET", s.url+"/version", "", ""); code != 200 || out["major"] != "1" {
		t.Fatalf("version: %d %v", code, out)
	}
	if code, _, _ := do(t, s.client(t, "bad-token-but-present"), "GET", s.url+"/version", "", ""); code != 401 {
		t.Fatalf("a bad token must not fall back to anonymous: %d", code)
	}
}
