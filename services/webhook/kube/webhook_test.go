package kube_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	k8scorev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/auth"
	"github.com/podflow/podflow/services/manifest"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/webhook"
)

type authAttrs = auth.Attributes

func authorizer(f func(authAttrs) bool) func(auth.Attributes) auth.Decision {
	return func(a auth.Attributes) auth.Decision { return auth.Decision{Allowed: f(a)} }
}

// injector adds a sidecar container with a JSONPatch.
func injector(req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	patch := `[{"op":"add","path":"/spec/containers/-","value":{"name":"sidecar","image":"proxy:1"}}]`
	pt := admissionv1.PatchTypeJSONPatch
	return &admissionv1.AdmissionResponse{Allowed: true, Patch: []byte(patch), PatchType: &pt, Warnings: []string{"sidecar injected"},
		AuditAnnotations: map[string]string{"injected": "sidecar"}}
}

func TestMutatingWebhookInjectsSidecar(t *testing.T) {
	e := newEnv(t, nil)
	hs := newHookServer(t)
	hs.handle("/inject", injector)
	e.put(&admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "injector"},
		Webhooks: []admissionregistrationv1.MutatingWebhook{mutatingHook("inject.example.com", hs.config("/inject"))}})

	var res webhook.Result
	eventually(t, "the injection", func() bool {
		res = e.adm.Mutate(context.Background(), createPod(pod("p", nil)))
		return len(res.Object.(*corev1.Pod).GetSpec().GetContainers()) == 2
	})
	if !res.Allowed() {
		t.Fatalf("refused: %v", res.Status)
	}
	c := res.Object.(*corev1.Pod).GetSpec().GetContainers()[1]
	if c.GetName() != "sidecar" || c.GetImage() != "proxy:1" {
		t.Fatalf("injected container: %v", c)
	}
	if len(res.Warnings) != 1 || res.Warnings[0] != "sidecar injected" {
		t.Fatalf("warnings: %v", res.Warnings)
	}
	if res.AuditAnnotations["inject.example.com/injected"] != "sidecar" {
		t.Fatalf("audit annotations: %v", res.AuditAnnotations)
	}
	if len(res.Calls) != 1 || res.Calls[0].Verdict != webhook.Patched || res.Calls[0].Name != "inject.example.com" ||
		res.Calls[0].Configuration != "injector" || res.Calls[0].Plugin != webhook.PluginMutatingWebhook || res.Calls[0].Latency <= 0 {
		t.Fatalf("calls: %+v", res.Calls)
	}
	// The webhook saw the pod as kube-apiserver sends it: v1, defaulted.
	reqs := hs.requests("/inject")
	last := reqs[len(reqs)-1]
	if last.Kind.Kind != "Pod" || last.Operation != admissionv1.Create || last.UserInfo.Username != "alice" || last.Namespace != "default" {
		t.Fatalf("the review: %+v", last)
	}
	var seen k8scorev1.Pod
	if err := json.Unmarshal(last.Object.Raw, &seen); err != nil || seen.Spec.Containers[0].Image != "busybox" {
		t.Fatalf("the review's object: %v %s", err, last.Object.Raw)
	}
}

func TestValidatingWebhookDeniesByLabel(t *testing.T) {
	e := newEnv(t, nil)
	hs := newHookServer(t)
	hs.handle("/deny", func(req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
		var p k8scorev1.Pod
		_ = json.Unmarshal(req.Object.Raw, &p)
		if p.Labels["forbidden"] == "yes" {
			return &admissionv1.AdmissionResponse{Allowed: false, Result: &metav1.Status{Message: "the pod has label forbidden=yes"}}
		}
		return &admissionv1.AdmissionResponse{Allowed: true}
	})
	e.put(&admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "labels"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{validatingHook("deny.example.com", hs.config("/deny"))}})

	var res webhook.Result
	eventually(t, "the denial", func() bool {
		res = e.adm.Validate(context.Background(), createPod(pod("bad", map[string]string{"forbidden": "yes"})))
		return !res.Allowed()
	})
	want := `admission webhook "deny.example.com" denied the request: the pod has label forbidden=yes`
	if res.Status.GetMessage() != want || res.Status.GetCode() != 400 {
		t.Fatalf("status: %v\nwant %q", res.Status, want)
	}
	if len(res.Calls) != 1 || res.Calls[0].Verdict != webhook.Denied || res.Calls[0].Message != "the pod has label forbidden=yes" {
		t.Fatalf("calls: %+v", res.Calls)
	}
	if res := e.adm.Validate(context.Background(), createPod(pod("good", nil))); !res.Allowed() || len(res.Calls) != 1 || res.Calls[0].Verdict != webhook.Allowed {
		t.Fatalf("a pod without the label: %v %+v", res.Status, res.Calls)
	}
}

// TestFailurePolicy: a webhook nobody answers admits under Ignore and
// refuses under Fail, naming the webhook.
func TestFailurePolicy(t *testing.T) {
	e := newEnv(t, nil)
	dead := "https://127.0.0.1:1/dead"
	open := validatingHook("open.example.com", admissionregistrationv1.WebhookClientConfig{URL: &dead})
	open.FailurePolicy = ptr(admissionregistrationv1.Ignore)
	e.put(&admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "dead"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{open}})
	var res webhook.Result
	eventually(t, "the call", func() bool {
		res = e.adm.Validate(context.Background(), createPod(pod("p", nil)))
		return len(res.Calls) == 1
	})
	if !res.Allowed() || res.Calls[0].Verdict != webhook.FailedOpen {
		t.Fatalf("failurePolicy Ignore: %v %+v", res.Status, res.Calls)
	}

	closed := validatingHook("closed.example.com", admissionregistrationv1.WebhookClientConfig{URL: &dead})
	e.put(&admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "dead"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{closed}})
	eventually(t, "the refusal", func() bool {
		res = e.adm.Validate(context.Background(), createPod(pod("p", nil)))
		return !res.Allowed()
	})
	if res.Status.GetCode() != 500 || !strings.HasPrefix(res.Status.GetMessage(), `Internal error occurred: failed calling webhook "closed.example.com": failed to call webhook: Post "https://127.0.0.1:1/dead?timeout=5s"`) {
		t.Fatalf("failurePolicy Fail: %v", res.Status)
	}
	if len(res.Calls) != 1 || res.Calls[0].Verdict != webhook.Error {
		t.Fatalf("calls: %+v", res.Calls)
	}
}

// TestTimeoutCutsTheCall: a webhook slower than its timeoutSeconds costs
// the request that long and an error naming it; garbage answers are
// errors too.
func TestTimeoutCutsTheCall(t *testing.T) {
	e := newEnv(t, nil)
	hs := newHookServer(t)
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	hs.handle("/hang", func(*admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
		select {
		case <-release:
		case <-time.After(time.Minute):
		}
		return &admissionv1.AdmissionResponse{Allowed: true}
	})
	hang := validatingHook("hang.example.com", hs.config("/hang"))
	hang.TimeoutSeconds = ptr(int32(1))
	e.put(&admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "hang"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{hang}})
	var res webhook.Result
	var took time.Duration
	eventually(t, "the timeout", func() bool {
		start := time.Now()
		res = e.adm.Validate(context.Background(), createPod(pod("p", nil)))
		took = time.Since(start)
		return !res.Allowed()
	})
	if !strings.Contains(res.Status.GetMessage(), `failed calling webhook "hang.example.com"`) || !strings.Contains(res.Status.GetMessage(), "deadline") {
		t.Fatalf("status: %v", res.Status)
	}
	if took > 5*time.Second {
		t.Fatalf("the call took %s with a timeout of 1s", took)
	}

	hs.handle("/garbage", func(*admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse { return nil })
	e.put(&admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "hang"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{validatingHook("garbage.example.com", hs.config("/garbage"))}})
	eventually(t, "the garbage answer", func() bool {
		res = e.adm.Validate(context.Background(), createPod(pod("p", nil)))
		return strings.Contains(res.Status.GetMessage(), "garbage.example.com")
	})
	if res.Status.GetCode() != 500 || !strings.Contains(res.Status.GetMessage(), `failed calling webhook "garbage.example.com"`) {
		t.Fatalf("garbage: %v", res.Status)
	}
}

// TestSelectorsAndConditionsSkip: an objectSelector, a namespaceSelector
// and matchConditions that do not match skip the webhook.
func TestSelectorsAndConditionsSkip(t *testing.T) {
	e := newEnv(t, nil)
	hs := newHookServer(t)
	hs.handle("/deny", func(*admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
		return &admissionv1.AdmissionResponse{Allowed: false, Result: &metav1.Status{Message: "no"}}
	})
	byObject := validatingHook("object.example.com", hs.config("/deny"))
	byObject.ObjectSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"checked": "yes"}}
	byNamespace := validatingHook("namespace.example.com", hs.config("/deny"))
	byNamespace.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"strict": "yes"}}
	byCondition := validatingHook("condition.example.com", hs.config("/deny"))
	byCondition.MatchConditions = []admissionregistrationv1.MatchCondition{{Name: "only-privileged-users",
		Expression: `request.userInfo.username == "mallory"`}}
	e.put(&admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "skips"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{byObject, byNamespace, byCondition}})
	e.put(&k8scorev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "strict", Labels: map[string]string{"strict": "yes"}}})

	// Each webhook, once matched, denies: wait until the configuration is
	// seen, through the object selector.
	eventually(t, "the configuration", func() bool {
		return !e.adm.Validate(context.Background(), createPod(pod("p", map[string]string{"checked": "yes"}))).Allowed()
	})
	if res := e.adm.Validate(context.Background(), createPod(pod("p", nil))); !res.Allowed() || len(res.Calls) != 0 {
		t.Fatalf("every webhook should skip: %v %+v", res.Status, res.Calls)
	}
	p := pod("p", nil)
	p.Metadata.Namespace = "strict"
	res := e.adm.Validate(context.Background(), createPod(p))
	if res.Allowed() || !strings.Contains(res.Status.GetMessage(), "namespace.example.com") {
		t.Fatalf("the namespace selector matched: %v", res.Status)
	}
	r := createPod(pod("p", nil))
	r.User = &corev1.UserInfo{Username: "mallory"}
	res = e.adm.Validate(context.Background(), r)
	if res.Allowed() || !strings.Contains(res.Status.GetMessage(), "condition.example.com") {
		t.Fatalf("the match condition matched: %v", res.Status)
	}
}

// TestReinvocation: a webhook with reinvocationPolicy IfNeeded is called
// again after a later webhook changed the object, and after the writer's
// own mutations changed it on reinvocation.
func TestReinvocation(t *testing.T) {
	e := newEnv(t, nil)
	hs := newHookServer(t)
	pt := admissionv1.PatchTypeJSONPatch
	// counter labels the pod with the number of containers it saw.
	hs.handle("/count", func(req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
		var p k8scorev1.Pod
		_ = json.Unmarshal(req.Object.Raw, &p)
		patch := fmt.Sprintf(`[{"op":"add","path":"/metadata/labels","value":{"containers":"%d"}}]`, len(p.Spec.Containers))
		return &admissionv1.AdmissionResponse{Allowed: true, Patch: []byte(patch), PatchType: &pt}
	})
	hs.handle("/inject", injector)
	count := mutatingHook("count.example.com", hs.config("/count"))
	count.ReinvocationPolicy = ptr(admissionregistrationv1.IfNeededReinvocationPolicy)
	e.put(&admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "a-count"},
		Webhooks: []admissionregistrationv1.MutatingWebhook{count}})
	e.put(&admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "b-inject"},
		Webhooks: []admissionregistrationv1.MutatingWebhook{mutatingHook("inject.example.com", hs.config("/inject"))}})

	var res webhook.Result
	reinvoked := 0
	eventually(t, "both webhooks", func() bool {
		r := createPod(pod("p", nil))
		reinvoked = 0
		r.Reinvoke = func(o objects.Object) (objects.Object, *corev1.Status) { reinvoked++; return o, nil }
		res = e.adm.Mutate(context.Background(), r)
		return len(res.Calls) >= 2
	})
	p := res.Object.(*corev1.Pod)
	if got := p.GetMetadata().GetLabels()["containers"]; got != "2" {
		t.Fatalf("the counter saw %s containers: it was not reinvoked after the injection (calls %+v)", got, res.Calls)
	}
	if len(res.Calls) != 3 || res.Calls[2].Name != "count.example.com" || reinvoked != 1 {
		t.Fatalf("calls %+v, in-tree reinvocations %d", res.Calls, reinvoked)
	}
}

// TestDryRunWithSideEffects: a dry run is refused by a webhook that has
// side effects, and reaches one that has none.
func TestDryRunWithSideEffects(t *testing.T) {
	e := newEnv(t, nil)
	hs := newHookServer(t)
	hs.handle("/allow", allow)
	some := admissionregistrationv1.SideEffectClassSome
	h := validatingHook("effects.example.com", hs.config("/allow"))
	h.SideEffects = &some
	e.put(&admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "effects"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{h}})
	r := createPod(pod("p", nil))
	r.DryRun = true
	var res webhook.Result
	eventually(t, "the refusal", func() bool { res = e.adm.Validate(context.Background(), r); return !res.Allowed() })
	if res.Status.GetCode() != 400 || !strings.Contains(res.Status.GetMessage(), `admission webhook "effects.example.com" does not support dry run`) {
		t.Fatalf("status: %v", res.Status)
	}
	if res := e.adm.Validate(context.Background(), createPod(pod("p", nil))); !res.Allowed() {
		t.Fatalf("without dry run: %v", res.Status)
	}
}

// TestConfigMapWebhook: webhooks are called for other kinds than pods.
func TestConfigMapWebhook(t *testing.T) {
	e := newEnv(t, nil)
	hs := newHookServer(t)
	hs.handle("/cm", func(req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
		var cm k8scorev1.ConfigMap
		_ = json.Unmarshal(req.Object.Raw, &cm)
		if cm.Data["webhook-e2e-test"] == "webhook-disallow" {
			return &admissionv1.AdmissionResponse{Allowed: false, Result: &metav1.Status{Message: "the configmap contains unwanted key and value"}}
		}
		return &admissionv1.AdmissionResponse{Allowed: true}
	})
	h := validatingHook("cm.example.com", hs.config("/cm"))
	h.Rules = []admissionregistrationv1.RuleWithOperations{{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
		Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
	}}
	e.put(&admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "cm"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{h}})
	m, _ := manifest.FromKube(&k8scorev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "default"},
		Data: map[string]string{"webhook-e2e-test": "webhook-disallow"}})
	cm := m.(*corev1.ConfigMap)
	r := &webhook.Request{Operation: webhook.Create, Kind: objects.ConfigMaps, Namespace: "default", Name: "c", Object: cm}
	var res webhook.Result
	eventually(t, "the denial", func() bool { res = e.adm.Validate(context.Background(), r); return !res.Allowed() })
	if !strings.Contains(res.Status.GetMessage(), "the configmap contains unwanted key and value") {
		t.Fatalf("status: %v", res.Status)
	}
	if res := e.adm.Validate(context.Background(), createPod(pod("p", nil))); !res.Allowed() || len(res.Calls) != 0 {
		t.Fatalf("a pod reached the configmaps' webhook: %+v", res.Calls)
	}
}

// TestWebhookConnectionsAreReused: a stage calls a webhook from many
// deliveries at once; once those calls are done their connections serve
// the next ones, rather than a TLS handshake a call. The client keeps every
// connection it opened: none is closed for want of room in its idle pool
// (with client-go's default of 25 a host, 35 of 59 were closed; the calls get
// the longest timeout, so a loaded machine's slow handshakes do not end a
// connection either). How many it opens is not exact: a finished call's
// connection returns to the pool on the transport's read loop, after the
// caller has its answer, so the next round's call may dial beside a
// connection about to come back.
func TestWebhookConnectionsAreReused(t *testing.T) {
	e := newEnv(t, nil)
	hs := newHookServer(t)
	hs.handle("/allow", allow)
	h := validatingHook("check.example.com", hs.config("/allow"))
	h.TimeoutSeconds = ptr(int32(30))
	e.put(&admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "check"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{h}})
	ctx := context.Background()
	eventually(t, "the webhook is called", func() bool { return len(e.adm.Validate(ctx, createPod(pod("p", nil))).Calls) == 1 })
	const parallel, rounds = 32, 10
	before, closedBefore := hs.conns.Load(), hs.closed.Load()
	for range rounds {
		var wg sync.WaitGroup
		for range parallel {
			wg.Go(func() {
				if res := e.adm.Validate(ctx, createPod(pod("p", nil))); !res.Allowed() || len(res.Calls) != 1 {
					t.Errorf("%v %+v", res.Status, res.Calls)
				}
			})
		}
		wg.Wait()
	}
	n, closed := hs.conns.Load()-before, hs.closed.Load()-closedBefore
	if closed != 0 {
		t.Fatalf("%d calls, %d at once: the client closed %d of the %d connections it opened; want none closed", parallel*rounds, parallel, closed, n)
	}
	if n > parallel*rounds/4 {
		t.Fatalf("%d calls, %d at once, took %d new connections: they were not reused", parallel*rounds, parallel, n)
	}
}
