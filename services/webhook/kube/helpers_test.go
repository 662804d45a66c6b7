package kube_test

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"
	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	k8scorev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/kubernetes/pkg/api/legacyscheme"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/manifest"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/objects/objectstest"
	"github.com/podflow/podflow/services/webhook"
	"github.com/podflow/podflow/services/webhook/kube"
)

// hookServer is a real HTTPS admission webhook: each path answers with its
// handler's AdmissionResponse (uid filled in).
type hookServer struct {
	t   testing.TB
	srv *httptest.Server
	mu  sync.Mutex
	h   map[string]func(*admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse
	got map[string][]*admissionv1.AdmissionRequest
	// conns counts the connections the webhooks were called over, closed
	// those of them that ended (the client hung up: the server sets no
	// idle timeout).
	conns, closed atomic.Int64
}

func newHookServer(t testing.TB) *hookServer {
	s := &hookServer{t: t, h: map[string]func(*admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse{},
		got: map[string][]*admissionv1.AdmissionRequest{}}
	s.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var review admissionv1.AdmissionReview
		if err := json.NewDecoder(r.Body).Decode(&review); err != nil || review.Request == nil {
			http.Error(w, "bad review", http.StatusBadRequest)
			return
		}
		s.mu.Lock()
		h := s.h[r.URL.Path]
		s.got[r.URL.Path] = append(s.got[r.URL.Path], review.Request)
		s.mu.Unlock()
		if h == nil {
			http.NotFound(w, r)
			return
		}
		resp := h(review.Request)
		if resp == nil {
			return // the handler wrote nothing: garbage
		}
		resp.UID = review.Request.UID
		review.Response, review.Request = resp, nil
		_ = json.NewEncoder(w).Encode(&review)
	}))
	s.srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		switch st {
		case http.StateNew:
			s.conns.Add(1)
		case http.StateClosed:
			s.closed.Add(1)
		}
	}
	s.srv.StartTLS()
	t.Cleanup(s.srv.Close)
	return s
}

func (s *hookServer) handle(path string, h func(*admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse) {
	s.mu.Lock()
	s.h[path] = h
	s.mu.Unlock()
}

func (s *hookServer) requests(path string) []*admissionv1.AdmissionRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*admissionv1.AdmissionRequest(nil), s.got[path]...)
}

// config is a client config calling path on the server, trusting its CA.
func (s *hookServer) config(path string) admissionregistrationv1.WebhookClientConfig {
	u := s.srv.URL + path
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.srv.Certificate().Raw})
	return admissionregistrationv1.WebhookClientConfig{URL: &u, CABundle: ca}
}

// env is a store with an Admission over it.
type env struct {
	t     testing.TB
	store *objects.Store
	adm   *kube.Admission
}

func newEnv(t testing.TB, authorize func(authAttrs) bool) *env {
	t.Helper()
	e := &env{t: t, store: objects.FromKV(objectstest.New())}
	cfg := kube.Config{Store: e.store}
	if authorize != nil {
		cfg.Authorize = authorizer(authorize)
	}
	adm, err := kube.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.adm = adm
	ctx, cancel := context.WithCancel(context.Background())
	g, gctx := errgroup.WithContext(ctx)
	if err := adm.Start(gctx, g); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); _ = g.Wait() })
	e.put(&k8scorev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "default", Labels: map[string]string{"kubernetes.io/metadata.name": "default"}}})
	return e
}

// put stores a Kubernetes object (created or replaced) with its
// version's defaults, as the api stage's registry stores it.
func (e *env) put(k runtime.Object) objects.Object {
	e.t.Helper()
	legacyscheme.Scheme.Default(k)
	m, err := manifest.FromKube(k)
	if err != nil {
		e.t.Fatal(err)
	}
	obj := m.(objects.Object)
	if _, err := e.store.Apply(context.Background(), obj); err != nil {
		e.t.Fatal(err)
	}
	return obj
}

// eventually retries f until it holds: the plugins see a configuration
// once their informers do.
func eventually(t testing.TB, what string, f func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !f() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func pod(name string, labels map[string]string) *corev1.Pod {
	p, err := manifest.FromKube(&k8scorev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: labels},
		Spec: k8scorev1.PodSpec{Containers: []k8scorev1.Container{{Name: "app", Image: "busybox"}}}})
	if err != nil {
		panic(err)
	}
	return p.(*corev1.Pod)
}

func createPod(p *corev1.Pod) *webhook.Request {
	return &webhook.Request{Operation: webhook.Create, Kind: objects.Pods, Namespace: p.GetMetadata().GetNamespace(),
		Name: p.GetMetadata().GetName(), Object: p, User: &corev1.UserInfo{Username: "alice", Groups: []string{"system:authenticated"}}}
}

func allow(*admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	return &admissionv1.AdmissionResponse{Allowed: true}
}

func ptr[T any](v T) *T { return &v }

var (
	sideEffectsNone = admissionregistrationv1.SideEffectClassNone
	podRules        = []admissionregistrationv1.RuleWithOperations{{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
		Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}},
	}}
)

func mutatingHook(name string, cc admissionregistrationv1.WebhookClientConfig) admissionregistrationv1.MutatingWebhook {
	return admissionregistrationv1.MutatingWebhook{Name: name, ClientConfig: cc, Rules: podRules, SideEffects: &sideEffectsNone,
		AdmissionReviewVersions: []string{"v1"}, FailurePolicy: ptr(admissionregistrationv1.Fail), TimeoutSeconds: ptr(int32(5))}
}

func validatingHook(name string, cc admissionregistrationv1.WebhookClientConfig) admissionregistrationv1.ValidatingWebhook {
	return admissionregistrationv1.ValidatingWebhook{Name: name, ClientConfig: cc, Rules: podRules, SideEffects: &sideEffectsNone,
		AdmissionReviewVersions: []string{"v1"}, FailurePolicy: ptr(admissionregistrationv1.Fail), TimeoutSeconds: ptr(int32(5))}
}
