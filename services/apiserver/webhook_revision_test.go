package apiserver_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	k8scorev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/stages/admission"
)

// heldHooks is the admission stage's store with the watches of the
// webhook configurations and policies held: their informers list, then
// see no change until release is closed — an admission stage whose
// informers lag the api process's, deterministically.
type heldHooks struct {
	objects.KV
	release chan struct{}

	mu     sync.Mutex
	listed chan struct{} // closed by the next list of the mutating configurations
}

func newHeldHooks() *heldHooks { return &heldHooks{release: make(chan struct{})} }

func (h *heldHooks) wrap(kv objects.KV) objects.KV { h.KV = kv; return h }

// nextList returns a channel closed when the mutating webhook
// configurations are next listed (the stage reading them fresh: waiting).
func (h *heldHooks) nextList() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.listed = make(chan struct{})
	return h.listed
}

func (h *heldHooks) List(ctx context.Context, prefix string, opts ...raftstore.ReadOption) ([]*raftstore.KV, int64, error) {
	if prefix == objects.MutatingWebhookConfigurations.Prefix("") {
		h.mu.Lock()
		if h.listed != nil {
			close(h.listed)
			h.listed = nil
		}
		h.mu.Unlock()
	}
	return h.KV.List(ctx, prefix, opts...)
}

func (h *heldHooks) Watch(ctx context.Context, prefix string, fromRev int64, opts ...raftstore.WatchOption) (objects.Watch, error) {
	w, err := h.KV.Watch(ctx, prefix, fromRev, opts...)
	if err != nil || !strings.Contains(prefix, "webhookconfigurations/") && !strings.Contains(prefix, "validatingadmissionpolic") {
		return w, err
	}
	hw := &heldWatch{Watch: w, out: make(chan raftstore.WatchEvent), done: make(chan struct{})}
	go hw.run(ctx, h.release)
	return hw, nil
}

// heldWatch passes a watch's events on once release is closed.
type heldWatch struct {
	objects.Watch
	out  chan raftstore.WatchEvent
	done chan struct{}
	once sync.Once
}

func (w *heldWatch) run(ctx context.Context, release <-chan struct{}) {
	defer close(w.out)
	select {
	case <-release:
	case <-w.done:
		return
	case <-ctx.Done(): // the watcher hung up
		return
	}
	for ev := range w.Watch.Events() {
		select {
		case w.out <- ev:
		case <-w.done:
			return
		}
	}
}

func (w *heldWatch) Events() <-chan raftstore.WatchEvent { return w.out }

func (w *heldWatch) Stop() {
	w.once.Do(func() { close(w.done) })
	w.Watch.Stop()
}

// registerMarkerHook registers a mutating webhook for pods and
// ConfigMaps through the api process and waits, as the e2e suite does, until
// it answers for marker ConfigMaps (the api process admits those itself):
// the api process calls it. The webhook labels each pod hooked=yes.
func registerMarkerHook(t *testing.T, ctx context.Context, cs kubernetes.Interface) (podCalls *atomic.Int64) {
	t.Helper()
	hs := newAdmissionHooks(t)
	var markers atomic.Int64
	podCalls = &atomic.Int64{}
	pt := admissionv1.PatchTypeJSONPatch
	hs.handle("/mark", func(r *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
		if r.Resource.Resource == "configmaps" {
			markers.Add(1)
			return &admissionv1.AdmissionResponse{Allowed: true}
		}
		podCalls.Add(1)
		return &admissionv1.AdmissionResponse{Allowed: true, PatchType: &pt,
			Patch: []byte(`[{"op":"add","path":"/metadata/labels/hooked","value":"yes"}]`)}
	})
	rules := append(hookRules("pods", admissionregistrationv1.Create), hookRules("configmaps", admissionregistrationv1.Create)...)
	if _, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "marker"},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{Name: "mark.example.com", ClientConfig: hs.config("/mark"), Rules: rules,
			SideEffects: &hookNone, AdmissionReviewVersions: []string{"v1"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for i := 0; markers.Load() == 0; i++ {
		cm := &k8scorev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("marker-%d", i)}}
		if _, err := cs.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if ctx.Err() != nil {
			t.Fatal("the api process never called the webhook")
		}
		time.Sleep(20 * time.Millisecond)
	}
	return podCalls
}

func hookClient(t *testing.T, s *system) kubernetes.Interface {
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: s.url, BearerToken: adminToken, TLSClientConfig: rest.TLSClientConfig{CAData: s.ca.CertPEM},
		Timeout: 60 * time.Second, QPS: -1})
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

func labelledPod(name string) *k8scorev1.Pod {
	return &k8scorev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": "x"}},
		Spec: k8scorev1.PodSpec{Containers: []k8scorev1.Container{{Name: "app", Image: "busybox"}}}}
}

// A webhook the api process already calls (marker ConfigMaps go through
// it) is called for a pod created next, although the admission stage's
// informers have not seen its configuration: the stage waits for them
// (the conformance test "should mutate pod and apply defaults after
// mutation" created its pod 34 ms after the configuration).
func TestWebhookRegisteredBeforeThePodIsCalled(t *testing.T) {
	held := newHeldHooks()
	s := startSystem(t, options{webhooks: true, admissionKV: held.wrap})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cs := hookClient(t, s)
	podCalls := registerMarkerHook(t, ctx, cs)

	listed := held.nextList()
	type created struct {
		pod *k8scorev1.Pod
		err error
	}
	done := make(chan created, 1)
	go func() {
		p, err := cs.CoreV1().Pods("default").Create(ctx, labelledPod("hooked"), metav1.CreateOptions{})
		done <- created{p, err}
	}()
	select {
	case <-listed:
		// The admission stage reads the configurations fresh and waits for
		// its informers: let them see the change.
		close(held.release)
	case c := <-done:
		close(held.release)
		t.Fatalf("the pod was admitted while the admission stage's informers had not seen the webhook: labels %v, err %v, webhook called %d times",
			c.pod.GetLabels(), c.err, podCalls.Load())
	}
	c := <-done
	if c.err != nil {
		t.Fatal(c.err)
	}
	if c.pod.Labels["hooked"] != "yes" || podCalls.Load() != 1 {
		t.Fatalf("pod labels %v, webhook called %d times for pods: want hooked=yes, once", c.pod.Labels, podCalls.Load())
	}

	// Caught up: the next pod does not read the configurations again.
	listed = held.nextList()
	p, err := cs.CoreV1().Pods("default").Create(ctx, labelledPod("hooked-2"), metav1.CreateOptions{})
	if err != nil || p.Labels["hooked"] != "yes" {
		t.Fatalf("second pod: labels %v, err %v", p.GetLabels(), err)
	}
	select {
	case <-listed:
		t.Fatal("the configurations were read again for a revision already confirmed")
	default:
	}
}

// An admission stage whose informers stay behind refuses the pod with 503
// ServiceUnavailable once Config.WebhookConfigWait has passed, rather than
// admitting it without the webhook.
func TestWebhookConfigurationsBehindRefuse(t *testing.T) {
	held := newHeldHooks()
	t.Cleanup(func() { close(held.release) })
	s := startSystem(t, options{webhooks: true, admissionKV: held.wrap,
		admission: func(c *admission.Config) { c.WebhookConfigWait = time.Second }})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cs := hookClient(t, s)
	podCalls := registerMarkerHook(t, ctx, cs)

	_, err := cs.CoreV1().Pods("default").Create(ctx, labelledPod("behind"), metav1.CreateOptions{})
	if !apierrors.IsServiceUnavailable(err) || !strings.Contains(err.Error(), "admission webhook configurations have not reached revision") {
		t.Fatalf("create with the admission stage's configurations held: %v (webhook called %d times), want 503 ServiceUnavailable", err, podCalls.Load())
	}
	if _, err := cs.CoreV1().Pods("default").Get(ctx, "behind", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the refused pod: %v, want not found", err)
	}
}
