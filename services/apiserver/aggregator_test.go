package apiserver_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	k8scorev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	aggregatorclient "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"

	"github.com/podflow/podflow/services/apiserver"
	"github.com/podflow/podflow/services/apiserver/pki"
)

// extensionServer is a small extension API server: TLS with a serving
// certificate for wardle.default.svc, client certificates required and
// verified against the front-proxy CA (as a real one's requestheader
// client CA), the group version wardle.example.com/v1alpha1 in discovery,
// and every other request echoed back with the headers it came with. seen
// counts the requests for flunders, not the aggregator's discovery checks,
// which come every APIServiceCheckPeriod.
func extensionServer(t *testing.T, serverCA, frontProxyCA *pki.CA, seen *atomic.Int64) *httptest.Server {
	t.Helper()
	crt, key, err := serverCA.Issue(pki.Request{CommonName: "wardle", Hosts: []string{"wardle.default.svc"}, Server: true})
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(crt, key)
	if err != nil {
		t.Fatal(err)
	}
	clients := x509.NewCertPool()
	clients.AddCert(frontProxyCA.Cert)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.URL.Path, "/flunders") {
			seen.Add(1)
		}
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path == "/apis/wardle.example.com/v1alpha1" {
			_ = json.NewEncoder(w).Encode(&metav1.APIResourceList{TypeMeta: metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"},
				GroupVersion: "wardle.example.com/v1alpha1", APIResources: []metav1.APIResource{{Name: "flunders", SingularName: "flunder",
					Namespaced: true, Kind: "Flunder", Verbs: []string{"create", "get", "list"}}}})
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"path": r.URL.Path, "query": r.URL.RawQuery, "user": r.Header.Get("X-Remote-User"),
			"groups": r.Header.Values("X-Remote-Group"), "authorization": r.Header.Get("Authorization"),
			"impersonate": r.Header.Get("Impersonate-User"), "client": r.TLS.PeerCertificates[0].Subject.CommonName})
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{pair}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: clients}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}

// TestAggregatorProxy: an APIService naming a Service is kube-aggregator's
// proxy — a request under its group version is authorized by RBAC first
// (a user without access is refused before anything is proxied), then
// proxied over TLS verified with the caBundle, with the front-proxy client
// certificate, the user in X-Remote-User/X-Remote-Group (a client's own
// such headers replaced) and without the user's credentials; the group is
// in legacy and aggregated discovery (its resources read from the
// extension server).
func TestAggregatorProxy(t *testing.T) {
	frontProxyCA, err := pki.NewCA("front-proxy-ca")
	if err != nil {
		t.Fatal(err)
	}
	pc, pk, err := frontProxyCA.Issue(pki.Request{CommonName: "front-proxy-client"})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "proxy.crt"), pc)
	writeFile(t, filepath.Join(dir, "proxy.key"), pk)
	s := startSystem(t, options{https: func(c *apiserver.Config) {
		c.ProxyClientCertFile, c.ProxyClientKeyFile = filepath.Join(dir, "proxy.crt"), filepath.Join(dir, "proxy.key")
		c.APIServiceCheckPeriod = 100 * time.Millisecond
	}})
	serverCA, err := pki.NewCA("wardle-ca")
	if err != nil {
		t.Fatal(err)
	}
	var seen atomic.Int64
	ext := extensionServer(t, serverCA, frontProxyCA, &seen)
	_, portStr, _ := net.SplitHostPort(strings.TrimPrefix(ext.URL, "https://"))
	port, _ := strconv.Atoi(portStr)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cs := s.adminClientset(t)
	if _, err := cs.CoreV1().Services("default").Create(ctx, &k8scorev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "wardle"},
		Spec: k8scorev1.ServiceSpec{Type: k8scorev1.ServiceTypeExternalName, ExternalName: "localhost"}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("service: %v", err)
	}
	agg, err := aggregatorclient.NewForConfig(restConfig(s))
	if err != nil {
		t.Fatal(err)
	}
	p := int32(port)
	as := &apiregistrationv1.APIService{ObjectMeta: metav1.ObjectMeta{Name: "v1alpha1.wardle.example.com"},
		Spec: apiregistrationv1.APIServiceSpec{Group: "wardle.example.com", Version: "v1alpha1", CABundle: serverCA.CertPEM,
			Service:              &apiregistrationv1.ServiceReference{Namespace: "default", Name: "wardle", Port: &p},
			GroupPriorityMinimum: 2000, VersionPriority: 200}}
	if as, err = agg.ApiregistrationV1().APIServices().Create(ctx, as, metav1.CreateOptions{}); err != nil {
		t.Fatalf("apiservice: %v", err)
	}

	admin, alice := s.client(t, adminToken), s.client(t, aliceToken)
	flunders := s.url + "/apis/wardle.example.com/v1alpha1/namespaces/default/flunders?limit=5"
	// Proxied once the availability check passed (503 before).
	waitAvailable(ctx, t, agg, as.Name, apiregistrationv1.ConditionTrue, "Passed")
	var body map[string]any
	for {
		// A replica may read the APIService from a store replica that
		// has not seen the condition yet: its plain-text 503 then.
		req, _ := http.NewRequestWithContext(ctx, "GET", flunders, nil)
		req.Header.Set("X-Remote-User", "mallory")
		req.Header.Set("X-Remote-Group", "system:masters")
		resp, err := admin.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			if err := json.Unmarshal(b, &body); err != nil {
				t.Fatalf("admin's list: %q: %v", b, err)
			}
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("admin's list: %d %q", resp.StatusCode, b)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if body["user"] != "admin" || strings.Join(anyStrings(body["groups"]), ",") != "system:masters,system:authenticated" ||
		body["authorization"] != "" || body["client"] != "front-proxy-client" ||
		body["path"] != "/apis/wardle.example.com/v1alpha1/namespaces/default/flunders" || body["query"] != "limit=5" {
		t.Fatalf("the extension server saw %v", body)
	}

	// alice has no RBAC on the group: refused before the proxy.
	before := seen.Load()
	code, st, _ := do(t, alice, "GET", flunders, "", "")
	if code != http.StatusForbidden || !strings.Contains(st["message"].(string), `cannot list resource "flunders" in API group "wardle.example.com"`) {
		t.Fatalf("alice's list: %d %v", code, st)
	}
	if n := seen.Load(); n != before {
		t.Fatalf("alice's refused request reached the extension server (%d requests, %d before)", n, before)
	}

	// Legacy discovery: the group, its version.
	code, body, _ = do(t, admin, "GET", s.url+"/apis/wardle.example.com", "", "")
	if code != 200 || path(body, "preferredVersion.groupVersion") != "wardle.example.com/v1alpha1" {
		t.Fatalf("/apis/wardle.example.com: %d %v", code, body)
	}
	groups, err := cs.Discovery().ServerGroups()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, g := range groups.Groups {
		found = found || (g.Name == "wardle.example.com" && g.PreferredVersion.Version == "v1alpha1")
	}
	if !found {
		t.Fatalf("/apis lacks wardle.example.com: %+v", groups.Groups)
	}
	l, err := cs.Discovery().ServerResourcesForGroupVersion("wardle.example.com/v1alpha1")
	if err != nil || len(l.APIResources) != 1 || l.APIResources[0].Name != "flunders" {
		t.Fatalf("/apis/wardle.example.com/v1alpha1: %v %v", l, err)
	}
	// Aggregated discovery: the resources, read from the extension server.
	code, body, _ = do(t, admin, "GET", s.url+"/apis", "", "", "Accept", "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList")
	var res []string
	for _, g := range body["items"].([]any) {
		gm := g.(map[string]any)
		if path(gm, "metadata.name") != "wardle.example.com" {
			continue
		}
		for _, v := range gm["versions"].([]any) {
			vm := v.(map[string]any)
			for _, r := range vm["resources"].([]any) {
				res = append(res, vm["version"].(string)+":"+r.(map[string]any)["resource"].(string))
			}
		}
	}
	if code != 200 || strings.Join(res, ",") != "v1alpha1:flunders" {
		t.Fatalf("aggregated discovery of wardle.example.com: %d %v", code, res)
	}

	// A caBundle that did not sign the server's certificate: no proxying.
	otherCA, err := pki.NewCA("other-ca")
	if err != nil {
		t.Fatal(err)
	}
	as, err = agg.ApiregistrationV1().APIServices().Get(ctx, as.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	as.Spec.CABundle = otherCA.CertPEM
	if _, err := agg.ApiregistrationV1().APIServices().Update(ctx, as, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitAvailable(ctx, t, agg, as.Name, apiregistrationv1.ConditionFalse, "FailedDiscoveryCheck")
	resp, err := admin.Get(flunders)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("with a wrong caBundle: %d, want 503", resp.StatusCode)
	}
}

// waitAvailable waits for the APIService name's Available condition to
// have status and reason.
func waitAvailable(ctx context.Context, t *testing.T, agg *aggregatorclient.Clientset, name string, status apiregistrationv1.ConditionStatus, reason string) {
	t.Helper()
	for {
		as, err := agg.ApiregistrationV1().APIServices().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range as.Status.Conditions {
			if c.Type == apiregistrationv1.Available && c.Status == status && c.Reason == reason {
				return
			}
		}
		if ctx.Err() != nil {
			t.Fatalf("APIService %s: conditions %+v, want Available=%s (%s)", name, as.Status.Conditions, status, reason)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func anyStrings(v any) []string {
	var out []string
	l, _ := v.([]any)
	for _, x := range l {
		s, _ := x.(string)
		out = append(out, s)
	}
	return out
}

// wardleServer starts a system checking APIServices every 100ms and an
// extension server answering with h, behind the ExternalName Service
// default/wardle and the APIService v1alpha1.wardle.example.com. ctx ends
// with the test, after a minute at most.
func wardleServer(t *testing.T, h http.HandlerFunc) (*system, *aggregatorclient.Clientset, *apiregistrationv1.APIService, context.Context) {
	t.Helper()
	frontProxyCA, err := pki.NewCA("front-proxy-ca")
	if err != nil {
		t.Fatal(err)
	}
	pc, pk, err := frontProxyCA.Issue(pki.Request{CommonName: "front-proxy-client"})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "proxy.crt"), pc)
	writeFile(t, filepath.Join(dir, "proxy.key"), pk)
	s := startSystem(t, options{https: func(c *apiserver.Config) {
		c.ProxyClientCertFile, c.ProxyClientKeyFile = filepath.Join(dir, "proxy.crt"), filepath.Join(dir, "proxy.key")
		c.APIServiceCheckPeriod = 100 * time.Millisecond
	}})
	serverCA, err := pki.NewCA("wardle-ca")
	if err != nil {
		t.Fatal(err)
	}
	crt, key, err := serverCA.Issue(pki.Request{CommonName: "wardle", Hosts: []string{"wardle.default.svc"}, Server: true})
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(crt, key)
	if err != nil {
		t.Fatal(err)
	}
	ext := httptest.NewUnstartedServer(h)
	ext.TLS = &tls.Config{Certificates: []tls.Certificate{pair}}
	ext.StartTLS()
	t.Cleanup(ext.Close)
	_, portStr, _ := net.SplitHostPort(strings.TrimPrefix(ext.URL, "https://"))
	port, _ := strconv.Atoi(portStr)

	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	t.Cleanup(cancel)
	cs := s.adminClientset(t)
	if _, err := cs.CoreV1().Services("default").Create(ctx, &k8scorev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "wardle"},
		Spec: k8scorev1.ServiceSpec{Type: k8scorev1.ServiceTypeExternalName, ExternalName: "localhost"}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("service: %v", err)
	}
	agg, err := aggregatorclient.NewForConfig(restConfig(s))
	if err != nil {
		t.Fatal(err)
	}
	p := int32(port)
	as := &apiregistrationv1.APIService{ObjectMeta: metav1.ObjectMeta{Name: "v1alpha1.wardle.example.com"},
		Spec: apiregistrationv1.APIServiceSpec{Group: "wardle.example.com", Version: "v1alpha1", CABundle: serverCA.CertPEM,
			Service:              &apiregistrationv1.ServiceReference{Namespace: "default", Name: "wardle", Port: &p},
			GroupPriorityMinimum: 2000, VersionPriority: 200}}
	if _, err := agg.ApiregistrationV1().APIServices().Create(ctx, as, metav1.CreateOptions{}); err != nil {
		t.Fatalf("apiservice: %v", err)
	}
	return s, agg, as, ctx
}

// TestAggregatorUnavailable: a request to an APIService whose Available
// condition is False gets kube-aggregator's plain-text 503 "service
// unavailable" and never reaches the server, even one that would answer
// it (here one whose discovery fails, so its check does not pass); a user
// without RBAC on the group gets 403 first.
func TestAggregatorUnavailable(t *testing.T) {
	var seen atomic.Int64
	s, agg, as, ctx := wardleServer(t, func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.URL.Path, "/flunders") {
			seen.Add(1)
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"kind":"FlunderList","apiVersion":"wardle.example.com/v1alpha1","items":[]}`))
			return
		}
		http.Error(w, "discovery is broken", http.StatusInternalServerError)
	})
	waitAvailable(ctx, t, agg, as.Name, apiregistrationv1.ConditionFalse, "FailedDiscoveryCheck")

	flunders := s.url + "/apis/wardle.example.com/v1alpha1/namespaces/default/flunders"
	get := func(c *http.Client) (int, string, http.Header) {
		resp, err := c.Get(flunders)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), resp.Header
	}
	code, body, hdr := get(s.client(t, adminToken))
	if code != http.StatusServiceUnavailable || body != "service unavailable\n" || !strings.HasPrefix(hdr.Get("Content-Type"), "text/plain") {
		t.Fatalf("admin's list of an unavailable APIService: %d %q %v", code, body, hdr)
	}
	if code, body, _ = get(s.client(t, aliceToken)); code != http.StatusForbidden {
		t.Fatalf("alice's list of an unavailable APIService: %d %q, want 403", code, body)
	}
	if n := seen.Load(); n != 0 {
		t.Fatalf("%d requests reached the unavailable extension server", n)
	}
}

// TestAggregatorCheckPassesOnOneAnswer: an extension server that fails
// four discovery requests of every five stays Available, as under kube's
// available controller (five attempts per check, one answer passes):
// a busy server losing a request does not turn its clients' requests
// into 503s. With one attempt per check, four checks of five fail.
func TestAggregatorCheckPassesOnOneAnswer(t *testing.T) {
	const attempts = 5 // kube's, per check
	var discovery atomic.Int64
	_, agg, as, ctx := wardleServer(t, func(w http.ResponseWriter, r *http.Request) {
		if discovery.Add(1)%attempts != 0 {
			http.Error(w, "busy", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"kind":"APIResourceList","apiVersion":"v1","groupVersion":"wardle.example.com/v1alpha1",` +
			`"resources":[{"name":"flunders","namespaced":true,"kind":"Flunder","verbs":["get","list"]}]}`))
	})
	waitAvailable(ctx, t, agg, as.Name, apiregistrationv1.ConditionTrue, "Passed")
	// 20 more checks (every 100ms): none may fail.
	for start := discovery.Load(); discovery.Load() < start+20*attempts; time.Sleep(50 * time.Millisecond) {
		got, err := agg.ApiregistrationV1().APIServices().Get(ctx, as.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range got.Status.Conditions {
			if c.Type == apiregistrationv1.Available && c.Status != apiregistrationv1.ConditionTrue {
				t.Fatalf("after %d discovery requests: Available=%s (%s: %s)", discovery.Load(), c.Status, c.Reason, c.Message)
			}
		}
	}
}
