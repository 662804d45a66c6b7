package apiserver_test

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	k8scorev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// admissionHooks is a real HTTPS admission webhook server for the
// pipeline's tests: each path answers with its handler.
type admissionHooks struct {
	srv *httptest.Server
	mu  sync.Mutex
	h   map[string]func(*admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse
}

func newAdmissionHooks(t *testing.T) *admissionHooks {
	a := &admissionHooks{h: map[string]func(*admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse{}}
	a.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var review admissionv1.AdmissionReview
		if err := json.NewDecoder(r.Body).Decode(&review); err != nil || review.Request == nil {
			http.Error(w, "bad review", http.StatusBadRequest)
			return
		}
		a.mu.Lock()
		h := a.h[r.URL.Path]
		a.mu.Unlock()
		resp := h(review.Request)
		resp.UID = review.Request.UID
		review.Response, review.Request = resp, nil
		_ = json.NewEncoder(w).Encode(&review)
	}))
	t.Cleanup(a.srv.Close)
	return a
}

func (a *admissionHooks) handle(path string, h func(*admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse) {
	a.mu.Lock()
	a.h[path] = h
	a.mu.Unlock()
}

func (a *admissionHooks) config(path string) admissionregistrationv1.WebhookClientConfig {
	u := a.srv.URL + path
	return admissionregistrationv1.WebhookClientConfig{URL: &u, CABundle: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: a.srv.Certificate().Raw})}
}

// warningsSeen collects the Warning headers client-go receives.
type warningsSeen struct {
	mu   sync.Mutex
	list []string
}

func (w *warningsSeen) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	w.list = append(w.list, text)
	w.mu.Unlock()
}

// reset forgets the warnings seen so far.
func (w *warningsSeen) reset() {
	w.mu.Lock()
	w.list = nil
	w.mu.Unlock()
}

func (w *warningsSeen) has(text string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, s := range w.list {
		if s == text {
			return true
		}
	}
	return false
}

func hookPtr[T any](v T) *T { return &v }

var hookNone = admissionregistrationv1.SideEffectClassNone

func hookRules(resource string, ops ...admissionregistrationv1.OperationType) []admissionregistrationv1.RuleWithOperations {
	return []admissionregistrationv1.RuleWithOperations{{Operations: ops,
		Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{resource}}}}
}

// TestWebhooksOnThePipeline: admission webhooks registered through the API
// (kube-apiserver's validation and defaults) act on pods through the
// admission stage and on ConfigMaps through the api stage, over HTTPS
// with client-go: an injector adds a sidecar (defaulted after), a
// validating webhook denies by label, failurePolicy Ignore admits past a
// dead webhook and Fail refuses naming it, a slow webhook is cut at its
// timeout; a timeout of 31 s and side effects are refused at
// registration.
func TestWebhooksOnThePipeline(t *testing.T) {
	s := startSystem(t, options{webhooks: true})
	warn := &warningsSeen{}
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: s.url, BearerToken: adminToken, TLSClientConfig: rest.TLSClientConfig{CAData: s.ca.CertPEM},
		WarningHandler: warn, Timeout: 60 * time.Second, QPS: -1})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	hs := newAdmissionHooks(t)
	pt := admissionv1.PatchTypeJSONPatch
	hs.handle("/inject", func(*admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
		return &admissionv1.AdmissionResponse{Allowed: true, PatchType: &pt, Warnings: []string{"sidecar injected"},
			Patch: []byte(`[{"op":"add","path":"/spec/containers/-","value":{"name":"sidecar","image":"proxy:1"}}]`)}
	})
	hs.handle("/labels", func(req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
		var o metav1.PartialObjectMetadata
		_ = json.Unmarshal(req.Object.Raw, &o)
		if o.Labels["forbidden"] == "yes" {
			return &admissionv1.AdmissionResponse{Result: &metav1.Status{Message: "label forbidden=yes is not allowed"}}
		}
		return &admissionv1.AdmissionResponse{Allowed: true}
	})
	release := make(chan struct{})
	defer close(release)
	hs.handle("/hang", func(*admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
		select {
		case <-release:
		case <-time.After(time.Minute):
		}
		return &admissionv1.AdmissionResponse{Allowed: true}
	})
	dead := "https://127.0.0.1:1/dead"

	// kube-apiserver's validation: at most 30 s.
	tooSlow := admissionregistrationv1.ValidatingWebhook{Name: "slow.example.com", ClientConfig: hs.config("/hang"),
		Rules: hookRules("pods", admissionregistrationv1.Create), SideEffects: &hookNone, AdmissionReviewVersions: []string{"v1"},
		TimeoutSeconds: hookPtr(int32(31))}
	_, err = cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "too-slow"}, Webhooks: []admissionregistrationv1.ValidatingWebhook{tooSlow}}, metav1.CreateOptions{})
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "timeoutSeconds: Invalid value: 31: the timeout value must be between 1 and 30 seconds") {
		t.Fatalf("a timeout of 31s: %v", err)
	}

	if _, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "injector"},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{Name: "inject.example.com", ClientConfig: hs.config("/inject"),
			Rules: hookRules("pods", admissionregistrationv1.Create), SideEffects: &hookNone, AdmissionReviewVersions: []string{"v1"},
			ObjectSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"inject": "yes"}}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ignore := admissionregistrationv1.Ignore
	if _, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "checks"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{
			{Name: "labels.example.com", ClientConfig: hs.config("/labels"), SideEffects: &hookNone, AdmissionReviewVersions: []string{"v1"},
				Rules: append(hookRules("pods", admissionregistrationv1.Create), hookRules("configmaps", admissionregistrationv1.Create, admissionregistrationv1.Update)...)},
			{Name: "dead-open.example.com", ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: &dead}, FailurePolicy: &ignore,
				SideEffects: &hookNone, AdmissionReviewVersions: []string{"v1"}, Rules: hookRules("pods", admissionregistrationv1.Create)},
			{Name: "dead-closed.example.com", ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: &dead}, SideEffects: &hookNone,
				AdmissionReviewVersions: []string{"v1"}, Rules: hookRules("pods", admissionregistrationv1.Create),
				ObjectSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"closed": "yes"}}},
			{Name: "hang.example.com", ClientConfig: hs.config("/hang"), SideEffects: &hookNone, AdmissionReviewVersions: []string{"v1"},
				Rules: hookRules("pods", admissionregistrationv1.Create), TimeoutSeconds: hookPtr(int32(1)),
				ObjectSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"hang": "yes"}}},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	newPod := func(name string, labels map[string]string) *k8scorev1.Pod {
		return &k8scorev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
			Spec: k8scorev1.PodSpec{Containers: []k8scorev1.Container{{Name: "app", Image: "busybox"}}}}
	}
	pods := cs.CoreV1().Pods("default")

	// The webhooks see the configurations once their caches do: wait for
	// the label webhook's denial, as the conformance tests wait for theirs.
	deadline := time.Now().Add(20 * time.Second)
	for i := 0; ; i++ {
		_, err = pods.Create(ctx, newPod("marker-"+string(rune('a'+i%26))+strings.Repeat("x", i/26), map[string]string{"forbidden": "yes"}), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	want := `admission webhook "labels.example.com" denied the request: label forbidden=yes is not allowed`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("a pod labelled forbidden=yes: %v\nwant %q", err, want)
	}

	// The injector adds its sidecar; podflow's defaults apply to it; the
	// dead webhook under Ignore admits.
	created, err := pods.Create(ctx, newPod("injected", map[string]string{"inject": "yes"}), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(created.Spec.Containers); n != 2 || created.Spec.Containers[1].Name != "sidecar" ||
		created.Spec.Containers[1].TerminationMessagePolicy != k8scorev1.TerminationMessageReadFile || created.Spec.Containers[1].ImagePullPolicy == "" {
		t.Fatalf("the injected pod: %+v", created.Spec.Containers)
	}
	if !warn.has("sidecar injected") {
		t.Fatalf("the webhook's warning did not reach the client: %v", warn.list)
	}

	// failurePolicy Fail names the webhook.
	_, err = pods.Create(ctx, newPod("closed", map[string]string{"closed": "yes"}), metav1.CreateOptions{})
	if !apierrors.IsInternalError(err) || !strings.Contains(err.Error(), `failed calling webhook "dead-closed.example.com"`) {
		t.Fatalf("a dead webhook under Fail: %v", err)
	}

	// A webhook slower than its timeout (1 s) is cut there.
	start := time.Now()
	_, err = pods.Create(ctx, newPod("hanging", map[string]string{"hang": "yes"}), metav1.CreateOptions{})
	if err == nil || !strings.Contains(err.Error(), `failed calling webhook "hang.example.com"`) || !strings.Contains(err.Error(), "deadline") {
		t.Fatalf("a hanging webhook: %v", err)
	}
	if took := time.Since(start); took > 15*time.Second {
		t.Fatalf("the hanging webhook held the request %s (timeoutSeconds 1)", took)
	}
	if _, err := pods.Get(ctx, "hanging", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the refused pod was stored: %v", err)
	}

	// admissionregistration/v1 takes no webhook with side effects (Some,
	// Unknown): a dry run could not skip it. (The dispatcher's refusal of
	// a dry run through one stored earlier: webhook/kube
	// TestDryRunWithSideEffects.)
	_, err = cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "effects"}, Webhooks: []admissionregistrationv1.ValidatingWebhook{{Name: "effects.example.com",
			ClientConfig: hs.config("/labels"), SideEffects: hookPtr(admissionregistrationv1.SideEffectClassSome),
			AdmissionReviewVersions: []string{"v1"}, Rules: hookRules("pods", admissionregistrationv1.Create)}}}, metav1.CreateOptions{})
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), `webhooks[0].sideEffects: Unsupported value: "Some"`) {
		t.Fatalf("a webhook with side effects: %v", err)
	}

	// ConfigMaps, through the api stage: create and update.
	cms := cs.CoreV1().ConfigMaps("default")
	_, err = cms.Create(ctx, &k8scorev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "bad", Labels: map[string]string{"forbidden": "yes"}}}, metav1.CreateOptions{})
	if err == nil || !strings.Contains(err.Error(), `admission webhook "labels.example.com" denied the request`) {
		t.Fatalf("a configmap labelled forbidden=yes: %v", err)
	}
	cm, err := cms.Create(ctx, &k8scorev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "good"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm.Labels = map[string]string{"forbidden": "yes"}
	if _, err := cms.Update(ctx, cm, metav1.UpdateOptions{}); err == nil || !strings.Contains(err.Error(), "labels.example.com") {
		t.Fatalf("an update to a forbidden label: %v", err)
	}
}

// TestPolicyOnThePipeline: a ValidatingAdmissionPolicy with a param,
// registered through the API, denies a Deployment written through the api
// stage, and one bound with Warn only warns.
func TestPolicyOnThePipeline(t *testing.T) {
	s := startSystem(t, options{webhooks: true})
	warn := &warningsSeen{}
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: s.url, BearerToken: adminToken, TLSClientConfig: rest.TLSClientConfig{CAData: s.ca.CertPEM},
		WarningHandler: warn, QPS: -1})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := cs.CoreV1().ConfigMaps("default").Create(ctx, &k8scorev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "limits"},
		Data: map[string]string{"maxReplicas": "2"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rules := &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
		RuleWithOperations: admissionregistrationv1.RuleWithOperations{
			Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
			Rule:       admissionregistrationv1.Rule{APIGroups: []string{"apps"}, APIVersions: []string{"v1"}, Resources: []string{"deployments"}},
		}}}}
	ar := cs.AdmissionregistrationV1()
	if _, err := ar.ValidatingAdmissionPolicies().Create(ctx, &admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "replicas"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{ParamKind: &admissionregistrationv1.ParamKind{APIVersion: "v1", Kind: "ConfigMap"},
			MatchConstraints: rules,
			Validations: []admissionregistrationv1.Validation{{Expression: "object.spec.replicas <= int(params.data.maxReplicas)",
				MessageExpression: "'replicas ' + string(object.spec.replicas) + ' above ' + params.data.maxReplicas"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := ar.ValidatingAdmissionPolicyBindings().Create(ctx, &admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: "replicas"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: "replicas",
			ParamRef:          &admissionregistrationv1.ParamRef{Name: "limits", Namespace: "default", ParameterNotFoundAction: hookPtr(admissionregistrationv1.DenyAction)},
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := ar.ValidatingAdmissionPolicies().Create(ctx, &admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "team"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{MatchConstraints: rules,
			Validations: []admissionregistrationv1.Validation{{Expression: "has(object.metadata.labels) && 'team' in object.metadata.labels",
				Message: "every deployment names its team"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := ar.ValidatingAdmissionPolicyBindings().Create(ctx, &admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: "team"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: "team",
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Warn}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	deploy := func(name string, replicas int32, labels map[string]string) *appsv1.Deployment {
		return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
			Spec: appsv1.DeploymentSpec{Replicas: &replicas, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
				Template: k8scorev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name}},
					Spec: k8scorev1.PodSpec{Containers: []k8scorev1.Container{{Name: "app", Image: "busybox"}}}}}}
	}
	d := cs.AppsV1().Deployments("default")
	warned := "Validation failed for ValidatingAdmissionPolicy 'team' with binding 'team': every deployment names its team"
	// Both policies are in force once each has acted on a dry run: the
	// second one's binding may be compiled after the first one's.
	deadline := time.Now().Add(20 * time.Second)
	for !warn.has(warned) && time.Now().Before(deadline) {
		_, _ = d.Create(ctx, deploy("probe", 1, nil), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		time.Sleep(100 * time.Millisecond)
	}
	warn.reset()
	for {
		_, err = d.Create(ctx, deploy("big", 3, map[string]string{"team": "a"}), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	want := "ValidatingAdmissionPolicy 'replicas' with binding 'replicas' denied request: replicas 3 above 2"
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), want) {
		t.Fatalf("3 replicas: %v\nwant %q", err, want)
	}
	if _, err := d.Create(ctx, deploy("small", 1, nil), metav1.CreateOptions{}); err != nil {
		t.Fatalf("a Warn binding denied: %v", err)
	}
	if !warn.has(warned) {
		t.Fatalf("warnings: %v", warn.list)
	}
}
