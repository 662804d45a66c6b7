package apiserver_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	k8scorev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/apiserver"
	"github.com/podflow/podflow/services/apiserver/pki"
	"github.com/podflow/podflow/services/auth"
	"github.com/podflow/podflow/services/objects"
)

// TestFairnessPerUser attacks the long-running pool (issue 38, item 6):
// alice, a user of one namespace, opens 2,100 watches of its pods, more
// than the whole pool (MaxWatches, 2,000). She gets her seats (a quarter
// of the pool) and 429 with Retry-After past them; meanwhile bob, another
// namespaced user, still watches, execs into a pod and creates an object,
// and the admin (system:masters, exempt) still watches.
func TestFairnessPerUser(t *testing.T) {
	t.Parallel()
	s, cfg, _ := startExecSystem(t)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	aliceMay(t, ctx, s, cfg, "watcher", "get", "list", "watch")
	for _, o := range []objects.Object{
		&corev1.Role{Metadata: &corev1.ObjectMeta{Name: "bob", Namespace: "default"}, Rules: []*corev1.PolicyRule{
			{ApiGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch"}},
			{ApiGroups: []string{""}, Resources: []string{"pods/exec"}, Verbs: []string{"create", "get"}},
			{ApiGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"create"}}}},
		&corev1.RoleBinding{Metadata: &corev1.ObjectMeta{Name: "bob", Namespace: "default"},
			RoleRef:  &corev1.RoleRef{Kind: auth.KindRole, Name: "bob", ApiGroup: auth.RBACGroup},
			Subjects: []*corev1.Subject{{Kind: auth.SubjectUser, Name: "bob"}}},
	} {
		if _, err := s.store.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}

	// Alice's 2,100 watches, 100 at a time; the granted ones stay open.
	alice := s.client(t, aliceToken)
	alice.Timeout = 0 // watches last
	watchURL := s.url + "/api/v1/namespaces/default/pods?watch=1"
	var (
		mu              sync.Mutex
		open            []*http.Response
		granted, denied int
		other           []int
	)
	defer func() {
		for _, r := range open {
			r.Body.Close()
		}
	}()
	for batch := 0; batch < 21; batch++ {
		var wg sync.WaitGroup
		for range 100 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, watchURL, nil)
				resp, err := alice.Do(req)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err != nil:
					other = append(other, -1)
				case resp.StatusCode == http.StatusOK:
					granted++
					open = append(open, resp)
				case resp.StatusCode == http.StatusTooManyRequests && resp.Header.Get("Retry-After") != "":
					denied++
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				default:
					other = append(other, resp.StatusCode)
					resp.Body.Close()
				}
			}()
		}
		wg.Wait()
	}
	if granted != 500 || denied != 1600 || len(other) != 0 {
		t.Fatalf("alice's 2,100 watches: %d granted, %d refused with 429, others %v; want her 500 seats and 1,600 refusals", granted, denied, other)
	}

	// Bob, by client certificate, still watches, execs and creates.
	bobCert, bobKey, err := s.ca.Issue(pki.Request{CommonName: "bob"})
	if err != nil {
		t.Fatal(err)
	}
	bcfg := &rest.Config{Host: s.url, TLSClientConfig: rest.TLSClientConfig{CAData: s.ca.CertPEM, CertData: bobCert, KeyData: bobKey}}
	bob, err := kubernetes.NewForConfig(bcfg)
	if err != nil {
		t.Fatal(err)
	}
	w, err := bob.CoreV1().Pods("default").Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("bob's watch: %v", err)
	}
	defer w.Stop()
	u := bob.CoreV1().RESTClient().Post().Resource("pods").Namespace("default").Name("web").SubResource("exec").
		VersionedParams(&k8scorev1.PodExecOptions{Container: "c", Command: []string{"echo", "hi"}, Stdout: true, Stderr: true}, scheme.ParameterCodec).URL()
	ex, err := remotecommand.NewSPDYExecutor(bcfg, "POST", u)
	if err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	if err := ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &out, Stderr: &errOut}); err != nil || out.String() != "hi\n" {
		t.Fatalf("bob's exec: %v, stdout %q", err, out.String())
	}
	if _, err := bob.CoreV1().ConfigMaps("default").Create(ctx, &k8scorev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "bobs"}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("bob's create: %v", err)
	}
	// The admin is exempt from the per-user seats.
	resp, err := s.client(t, adminToken).Get(watchURL + "&timeoutSeconds=1")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("the admin's watch: %v %v", err, resp)
	}
	resp.Body.Close()
}

// TestFairnessMutating: a user holding its mutating seats (two POSTs whose
// bodies never finish) gets 429 for a third, while another user and the
// admin still write.
func TestFairnessMutating(t *testing.T) {
	t.Parallel()
	s := startSystem(t, options{https: func(c *apiserver.Config) { c.MaxMutatingInFlight, c.MaxMutatingPerUser = 8, 2 }})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, user := range []string{"alice", "bob"} {
		for _, o := range []objects.Object{
			&corev1.Role{Metadata: &corev1.ObjectMeta{Name: user, Namespace: "default"}, Rules: []*corev1.PolicyRule{
				{ApiGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"create"}}}},
			&corev1.RoleBinding{Metadata: &corev1.ObjectMeta{Name: user, Namespace: "default"},
				RoleRef:  &corev1.RoleRef{Kind: auth.KindRole, Name: user, ApiGroup: auth.RBACGroup},
				Subjects: []*corev1.Subject{{Kind: auth.SubjectUser, Name: user}}},
		} {
			if _, err := s.store.Create(ctx, o); err != nil {
				t.Fatal(err)
			}
		}
	}
	alice := s.client(t, aliceToken)
	alice.Timeout = 0
	cms := s.url + "/api/v1/namespaces/default/configmaps"
	bob := s.certClient(t, s.ca, "bob")
	deadline := time.Now().Add(10 * time.Second) // until the api stage's RBAC cache has the bindings
	for _, c := range []*http.Client{alice, bob} {
		for {
			code, body, _ := do(t, c, "POST", cms+"?dryRun=All", "application/json", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"probe"}}`)
			if code == http.StatusCreated {
				break
			}
			if code != http.StatusForbidden || time.Now().After(deadline) {
				t.Fatalf("a write before the attack: %d %v", code, body)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	var stalled []*io.PipeWriter
	defer func() {
		for _, w := range stalled {
			w.CloseWithError(io.ErrUnexpectedEOF)
		}
	}()
	for range 2 {
		r, w := io.Pipe()
		stalled = append(stalled, w)
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, cms, r)
		req.Header.Set("Content-Type", "application/json")
		go func() {
			if resp, err := alice.Do(req); err == nil {
				resp.Body.Close()
			}
		}()
		if _, err := w.Write([]byte(`{"apiVersion":"v1",`)); err != nil { // the request is in: its headers and a first byte
			t.Fatal(err)
		}
	}
	// Once the server holds both (their bodies are being read), a third
	// write of alice's is refused.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		code, body, hdr := do(t, alice, "POST", cms+"?dryRun=All", "application/json", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"third"}}`)
		if code == http.StatusTooManyRequests && hdr.Get("Retry-After") != "" {
			break
		}
		if code != http.StatusCreated || time.Now().After(deadline) {
			t.Fatalf("alice's third write while two are in flight: %d %v, want 429 with Retry-After", code, body)
		}
	}
	if code, body, _ := do(t, bob, "POST", cms, "application/json", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"bobs"}}`); code != http.StatusCreated {
		t.Fatalf("bob's write while alice holds her seats: %d %v", code, body)
	}
	if code, body, _ := do(t, s.client(t, adminToken), "POST", cms, "application/json", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"admins"}}`); code != http.StatusCreated {
		t.Fatalf("the admin's write: %d %v", code, body)
	}
}
