package apiserver_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/apiserver"
	"github.com/podflow/podflow/services/pipeline"
)

// backends are the test's stand-ins for pods: an HTTP server on
// loopback per pod address, reached through Config.ProxyDialContext
// (which records what was dialled) once the server has accepted the
// address as a pod's.
type backends struct {
	mu     sync.Mutex
	byAddr map[string]string // "10.244.7.10:8080" -> loopback address
	dialed []string
}

func (b *backends) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	b.mu.Lock()
	b.dialed = append(b.dialed, addr)
	to, ok := b.byAddr[addr]
	b.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("dial %s: connection refused", addr)
	}
	var d net.Dialer
	return d.DialContext(ctx, network, to)
}

// serve starts a backend for addr that answers who it is, the method,
// the path and the query; at "/" it answers an HTML link (rewritten by
// the proxy).
func (b *backends) serve(t *testing.T, addr, who string) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/" {
			w.Header().Set("Content-Type", "text/html")
			fmt.Fprint(w, `<a href="/rewriteme">test</a>`)
			return
		}
		fmt.Fprintf(w, "%s %s %s?%s", who, r.Method, r.URL.Path, r.URL.RawQuery)
	})}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	b.mu.Lock()
	b.byAddr[addr] = l.Addr().String()
	b.mu.Unlock()
}

// TestPodAndServiceProxy: pods/proxy and services/proxy reach the pod's
// address — the port asked for, or the pod's first container port — with
// the method, path and query, the pod's HTML links rewritten under the
// proxy path and a redirect from .../proxy to .../proxy/, as
// kube-apiserver's; a Service's proxy reaches a Ready endpoint on the
// endpoint port of the service port asked for (by name or number). RBAC
// decides per HTTP verb on the subresource. No address that is not in the
// pod CIDR allocated to the pod's node is ever dialled ("address not
// allowed"), nor a Service endpoint that is not that pod's address.
func TestPodAndServiceProxy(t *testing.T) {
	t.Parallel()
	b := &backends{byAddr: map[string]string{}}
	s := startSystem(t, options{https: func(c *apiserver.Config) { c.ProxyDialContext = b.dial }})
	ctx := context.Background()
	b.serve(t, "10.244.7.10:8080", "web")
	b.serve(t, "10.244.7.10:9090", "web-metrics")
	b.serve(t, "10.244.7.11:8080", "other")

	if _, err := s.store.KV().Create(ctx, pipeline.PodCIDRPrefix+"10.244.7.0-24", []byte("n1")); err != nil {
		t.Fatal(err)
	}
	pod := func(name, ip, node string) *corev1.Pod {
		return &corev1.Pod{Metadata: &corev1.ObjectMeta{Namespace: "default", Name: name, Uid: "u-" + name, Labels: map[string]string{"app": "web"}},
			Spec: &corev1.PodSpec{NodeName: node, Containers: []*corev1.Container{{Name: "c", Image: "i",
				Ports: []*corev1.ContainerPort{{Name: "http", ContainerPort: 8080}, {Name: "metrics", ContainerPort: 9090}}}}},
			Status: &corev1.PodStatus{Phase: "Running", PodIp: ip}}
	}
	for _, p := range []*corev1.Pod{
		pod("web", "10.244.7.10", "n1"),
		pod("elsewhere", "10.244.7.11", "n2"), // an address of n1's CIDR, reported for a pod of n2
		pod("loopback", "127.0.0.1", "n1"),    // not global unicast
		pod("outside", "192.168.1.5", "n1"),   // outside every pod CIDR
		pod("pending", "", ""),                // no address yet
	} {
		if _, err := s.store.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.store.Create(ctx, &corev1.Service{Metadata: &corev1.ObjectMeta{Namespace: "default", Name: "web"},
		Spec: &corev1.ServiceSpec{ClusterIp: "10.96.0.10", Ports: []*corev1.ServicePort{
			{Name: "http", Port: 80}, {Name: "metrics", Port: 9100}}}}); err != nil {
		t.Fatal(err)
	}
	ready := &corev1.EndpointConditions{Ready: proto.Bool(true)}
	if _, err := s.store.Create(ctx, &corev1.EndpointSlice{Metadata: &corev1.ObjectMeta{Namespace: "default", Name: "web",
		Labels: map[string]string{"kubernetes.io/service-name": "web"}}, AddressType: "IPv4",
		Ports: []*corev1.EndpointPort{{Name: proto.String("http"), Port: proto.Int32(8080)}, {Name: proto.String("metrics"), Port: proto.Int32(9090)}},
		Endpoints: []*corev1.Endpoint{
			{Addresses: []string{"10.244.7.10"}, Conditions: ready, TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: "default", Name: "web"}},
			// A slice naming an address that is not its pod's: never dialled.
			{Addresses: []string{"10.244.7.99"}, Conditions: ready, TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: "default", Name: "web"}},
		}}); err != nil {
		t.Fatal(err)
	}

	admin := s.client(t, adminToken)
	admin.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	get := func(c *http.Client, method, p string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, s.url+p, strings.NewReader("body"))
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode == http.StatusMovedPermanently {
			return resp.StatusCode, resp.Header.Get("Location")
		}
		return resp.StatusCode, string(body)
	}
	const pods, svcs = "/api/v1/namespaces/default/pods/", "/api/v1/namespaces/default/services/"
	for _, tc := range []struct {
		method, path string
		code         int
		want         string // the body (or Location of a redirect) contains it
	}{
		{"GET", pods + "web/proxy/some/path?x=1", 200, "web GET /some/path?x=1"},
		{"POST", pods + "web:9090/proxy/p", 200, "web-metrics POST /p?"},
		{"DELETE", pods + "http:web:8080/proxy/d", 200, "web DELETE /d?"},
		{"OPTIONS", pods + "web/proxy/o", 200, "web OPTIONS /o?"},
		{"PUT", pods + "web/proxy/?method=PUT", 200, `<a href="/api/v1/namespaces/default/pods/web/proxy/rewriteme">test</a>`},
		{"GET", pods + "web/proxy", 301, "/api/v1/namespaces/default/pods/web/proxy/"},
		{"GET", svcs + "web/proxy/s", 200, ""}, // no unnamed port: see below
		{"GET", svcs + "web:http/proxy/s", 200, "web GET /s?"},
		{"PATCH", svcs + "web:9100/proxy/m", 200, "web-metrics PATCH /m?"},
		{"GET", svcs + "web:81/proxy/", 503, `no service port 81 found for service \"web\"`},
		{"GET", pods + "nope/proxy/", 404, `pods \"nope\" not found`},
		{"GET", pods + "elsewhere/proxy/", 400, "address not allowed"},
		{"GET", pods + "loopback/proxy/", 400, "address not allowed"},
		{"GET", pods + "outside/proxy/", 400, "address not allowed"},
		{"GET", pods + "pending/proxy/", 400, "address not allowed"},
		{"GET", pods + "ftp:web:21/proxy/", 400, `invalid pod request \"ftp:web:21\"`},
	} {
		code, body := get(admin, tc.method, tc.path)
		if tc.path == svcs+"web/proxy/s" { // kube: the unnamed port, which web has not
			if code != 503 || !strings.Contains(body, `no endpoints available for service \"web\"`) {
				t.Errorf("%s %s: %d %s, want 503 no endpoints", tc.method, tc.path, code, body)
			}
			continue
		}
		if code != tc.code || !strings.Contains(body, tc.want) {
			t.Errorf("%s %s: %d %s\nwant %d containing %s", tc.method, tc.path, code, body, tc.code, tc.want)
		}
	}
	b.mu.Lock()
	for _, a := range b.dialed {
		if !strings.HasPrefix(a, "10.244.7.10:") {
			t.Errorf("dialled %s: only the pod web's address may be", a)
		}
	}
	b.mu.Unlock()

	// RBAC, per HTTP verb on the subresource: alice may only get the
	// pods/proxy of web.
	if code, _ := get(s.client(t, aliceToken), "GET", pods+"web/proxy/x"); code != 403 {
		t.Fatalf("alice without a role: %d, want 403", code)
	}
	role := `{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"Role","metadata":{"name":"proxy"},"rules":[{"apiGroups":[""],"resources":["pods/proxy"],"verbs":["get"]}]}`
	binding := `{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"RoleBinding","metadata":{"name":"proxy"},"subjects":[{"kind":"User","name":"alice"}],"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"Role","name":"proxy"}}`
	for p, body := range map[string]string{"/apis/rbac.authorization.k8s.io/v1/namespaces/default/roles": role,
		"/apis/rbac.authorization.k8s.io/v1/namespaces/default/rolebindings": binding} {
		if code, _, _ := do(t, s.client(t, adminToken), "POST", s.url+p, "application/json", body); code != 201 {
			t.Fatalf("POST %s: %d", p, code)
		}
	}
	alice := s.client(t, aliceToken)
	eventuallyCode := func(method, p string, want int) {
		t.Helper()
		var code int
		var body string
		for range 100 {
			if code, body = get(alice, method, p); code == want {
				return
			}
		}
		t.Fatalf("alice %s %s: %d %s, want %d", method, p, code, body, want)
	}
	eventuallyCode("GET", pods+"web/proxy/x", 200)
	for _, tc := range []struct{ method, path string }{{"POST", pods + "web/proxy/x"}, {"GET", svcs + "web:http/proxy/x"}} {
		if code, _ := get(alice, tc.method, tc.path); code != 403 {
			t.Errorf("alice %s %s: %d, want 403", tc.method, tc.path, code)
		}
	}
}
