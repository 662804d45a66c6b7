package apiserver_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/podflow/podflow/proto/apiv1"
	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/apiserver"
	"github.com/podflow/podflow/services/pipeline"
)

// The tests below send hostile requests to the real HTTPS server (the api
// stage over a raft store and JetStream) and check a fast, clear refusal,
// that the server answers the next request, and that what was stored
// before is intact.

// configMap creates a ConfigMap "cm" with data k=v and returns its URL.
func configMap(t *testing.T, s *system, c *http.Client) string {
	t.Helper()
	cms := s.url + "/api/v1/namespaces/default/configmaps"
	code, body, _ := do(t, c, "POST", cms, "application/json", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"cm"},"data":{"k":"v"}}`)
	if code != 201 {
		t.Fatalf("create configmap: %d %v", code, body)
	}
	return cms + "/cm"
}

// intact checks that the ConfigMap still holds k=v and the server answers.
func intact(t *testing.T, c *http.Client, url string) {
	t.Helper()
	code, body, _ := do(t, c, "GET", url, "", "")
	if code != 200 || path(body, "data.k") != "v" {
		t.Fatalf("after the attack: %d %v", code, body)
	}
}

func patchBomb(n int) string {
	ops := []string{fmt.Sprintf(`{"op":"add","path":"/metadata/annotations","value":{"a":%q}}`, strings.Repeat("x", 1024))}
	for i := range n {
		ops = append(ops, fmt.Sprintf(`{"op":"copy","from":"/metadata/annotations","path":"/metadata/annotations/c%d"}`, i))
	}
	return "[" + strings.Join(ops, ",") + "]"
}

func TestAttackPatch(t *testing.T) {
	t.Parallel()
	s := startSystem(t, options{})
	admin := s.client(t, adminToken)
	cm := configMap(t, s, admin)
	for _, c := range []struct {
		name     string
		patch    string
		wantCode int
		wantMsg  string
	}{
		{"copy bomb", patchBomb(40), 422, "exceeding the limit 3145728"},
		{"too many operations", "[" + strings.TrimSuffix(strings.Repeat(`{"op":"test","path":"/data/k","value":"v"},`, apiserver.MaxJSONPatchOperations+1), ",") + "]",
			413, "The allowed maximum operations in a JSON patch is 10000, got 10001"},
		{"patched object too large", `[{"op":"add","path":"/data/big","value":"` + strings.Repeat("y", 2<<20) + `"},{"op":"copy","from":"/data/big","path":"/data/big2"}]`,
			413, "the patched object is too large"},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, body, _ := do(t, admin, "PATCH", cm, "application/json-patch+json", c.patch)
			if code != c.wantCode || !strings.Contains(fmt.Sprint(path(body, "message")), c.wantMsg) {
				t.Fatalf("got %d %v, want %d %q", code, body, c.wantCode, c.wantMsg)
			}
			intact(t, admin, cm)
		})
	}
}

// TestAttackSlowBody: a client that sends its headers and then dribbles
// its body gets 408 after BodyReadTimeout, not a held in-flight slot.
func TestAttackSlowBody(t *testing.T) {
	t.Parallel()
	s := startSystem(t, options{https: func(c *apiserver.Config) { c.BodyReadTimeout = time.Second }})
	admin := s.client(t, adminToken)
	cm := configMap(t, s, admin)

	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(s.ca.CertPEM)
	conn, err := tls.Dial("tcp", strings.TrimPrefix(s.url, "https://"), &tls.Config{RootCAs: pool, NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "PATCH /api/v1/namespaces/default/configmaps/cm HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"+
		"Content-Type: application/merge-patch+json\r\nContent-Length: 1000\r\n\r\n{\"data\":", adminToken)
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer to a slow body: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 408 || !strings.Contains(string(b), "BodyReadTimeout") {
		t.Fatalf("slow body: %d %s", resp.StatusCode, b)
	}
	intact(t, admin, cm)
}

// TestAttackFutureResourceVersion: a watch from a revision the store has
// not reached is answered 504 "Too large resource version" (as
// kube-apiserver words it) after TooLargeResourceVersionWait.
func TestAttackFutureResourceVersion(t *testing.T) {
	t.Parallel()
	s := startSystem(t, options{https: func(c *apiserver.Config) { c.TooLargeResourceVersionWait = 500 * time.Millisecond }})
	admin := s.client(t, adminToken)
	cm := configMap(t, s, admin)
	code, body, _ := do(t, admin, "GET", s.url+"/api/v1/namespaces/default/configmaps?watch=1&resourceVersion=9000000000000000000", "", "")
	msg := fmt.Sprint(path(body, "message"))
	if code != 504 || path(body, "reason") != "Timeout" || path(body, "details.retryAfterSeconds") != float64(1) ||
		!strings.HasPrefix(msg, "Too large resource version: 9000000000000000000, current: ") {
		t.Fatalf("future watch: %d %v", code, body)
	}
	intact(t, admin, cm)
	// A watch from the current revision is served.
	code, body, _ = do(t, admin, "GET", cm, "", "")
	rv := path(body, "metadata.resourceVersion").(string)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", s.url+"/api/v1/namespaces/default/configmaps?watch=1&resourceVersion="+rv, nil)
	resp, err := admin.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("current watch: %v %v", err, resp)
	}
	resp.Body.Close()
}

// TestAttackWatches: watches have their own limit (429 past MaxWatches),
// which a slot freed by a closed watch gives back; reads are not held up.
func TestAttackWatches(t *testing.T) {
	t.Parallel()
	s := startSystem(t, options{https: func(c *apiserver.Config) { c.MaxWatches = 2 }})
	admin := s.client(t, adminToken)
	cm := configMap(t, s, admin)
	watchURL := s.url + "/api/v1/namespaces/default/configmaps?watch=1"
	var open []*http.Response
	defer func() {
		for _, r := range open {
			r.Body.Close()
		}
	}()
	watch := func() *http.Response {
		resp, err := admin.Get(watchURL)
		if err != nil {
			t.Fatal(err)
		}
		open = append(open, resp)
		return resp
	}
	for range 2 {
		if resp := watch(); resp.StatusCode != 200 {
			t.Fatalf("watch within the limit: %d", resp.StatusCode)
		}
	}
	resp := watch()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("watch past the limit: %d %s", resp.StatusCode, b)
	}
	intact(t, admin, cm)
	open[0].Body.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		resp := watch()
		if resp.StatusCode == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a closed watch's slot was not given back: %d", resp.StatusCode)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestAttackObjects: names that Kubernetes refuses ("/" in a name) and
// ConfigMaps or Secrets past 1 MiB of data get 422 naming the rule, over
// REST and over the bus's object path; nothing is stored.
func TestAttackObjects(t *testing.T) {
	t.Parallel()
	s := startSystem(t, options{})
	admin := s.client(t, adminToken)
	cm := configMap(t, s, admin)
	cms := s.url + "/api/v1/namespaces/default/configmaps"
	big := strings.Repeat("x", 1<<20)
	for _, c := range []struct {
		name, url, body, want string
	}{
		{"slash in a configmap name", cms, `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a/b"}}`, "RFC 1123 subdomain"},
		{"slash in a role name", s.url + "/apis/rbac.authorization.k8s.io/v1/namespaces/default/roles",
			`{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"Role","metadata":{"name":"a/b"}}`, "may not contain '/'"},
		{"configmap past 1 MiB", cms, `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"big"},"data":{"a":"` + big + `","b":"y"}}`,
			"may not be more than 1048576 bytes"},
		{"secret past 1 MiB", s.url + "/api/v1/namespaces/default/secrets",
			`{"apiVersion":"v1","kind":"Secret","metadata":{"name":"big"},"stringData":{"a":"` + big + `"},"data":{"b":"eXk="}}`,
			"may not be more than 1048576 bytes"},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, body, _ := do(t, admin, "POST", c.url, "application/json", c.body)
			if code != 422 || path(body, "reason") != "Invalid" || !strings.Contains(fmt.Sprint(path(body, "message")), c.want) {
				t.Fatalf("got %d %v, want 422 %q", code, body, c.want)
			}
			intact(t, admin, cm)
		})
	}
	if code, _, _ := do(t, admin, "GET", cms+"/big", "", ""); code != 404 {
		t.Fatalf("a refused configmap was stored: %d", code)
	}

	t.Run("bus object path", func(t *testing.T) {
		obj, _ := proto.Marshal(&corev1.ConfigMap{Metadata: &corev1.ObjectMeta{Name: "x/y"}})
		req, _ := proto.Marshal(&apiv1.ObjectRequest{Token: adminToken, Verb: "create", Kind: "configmaps", Namespace: "default", Object: obj})
		m, err := s.conn.NATS().Request(pipeline.ObjectSubject, req, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var resp apiv1.Response
		if err := proto.Unmarshal(m.Data, &resp); err != nil {
			t.Fatal(err)
		}
		if st := resp.GetStatus(); st.GetCode() != 422 || !strings.Contains(st.GetMessage(), "RFC 1123 subdomain") {
			t.Fatalf("bus create of %q: %v", "x/y", st)
		}
		intact(t, admin, cm)
	})
}
