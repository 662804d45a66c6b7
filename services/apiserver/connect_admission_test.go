package apiserver_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	k8scorev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestConnectAdmission: a validating webhook on CONNECT pods/attach and
// pods/exec sees kube-apiserver's request — operation CONNECT, resource
// pods, the subresource, the PodAttachOptions or PodExecOptions object
// — and its refusal reaches the stock kubectl attach and exec with the
// webhook's message, as the upstream "should be able to deny attaching
// pod" asserts. A container the webhook lets through still attaches.
func TestConnectAdmission(t *testing.T) {
	s, _, cs := startExecSystemWith(t, options{webhooks: true})
	k := newStockKubectl(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	hs := newAdmissionHooks(t)
	var mu sync.Mutex
	var seen []*admissionv1.AdmissionRequest
	hs.handle("/connect", func(req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
		mu.Lock()
		seen = append(seen, req)
		mu.Unlock()
		var tm metav1.TypeMeta
		_ = json.Unmarshal(req.Object.Raw, &tm)
		switch tm.Kind {
		case "PodAttachOptions":
			var o k8scorev1.PodAttachOptions
			_ = json.Unmarshal(req.Object.Raw, &o)
			if o.Stdin && o.Container == "c" {
				return &admissionv1.AdmissionResponse{Result: &metav1.Status{Message: "attaching to pod '" + req.Name + "' is not allowed"}}
			}
		case "PodExecOptions":
			var o k8scorev1.PodExecOptions
			_ = json.Unmarshal(req.Object.Raw, &o)
			if len(o.Command) > 0 && o.Command[0] == "forbidden" {
				return &admissionv1.AdmissionResponse{Result: &metav1.Status{Message: "exec of forbidden is not allowed"}}
			}
		}
		return &admissionv1.AdmissionResponse{Allowed: true}
	})
	if _, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "connect"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{Name: "deny-connect.example.com", ClientConfig: hs.config("/connect"),
			SideEffects: &hookNone, AdmissionReviewVersions: []string{"v1", "v1beta1"},
			Rules: []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Connect},
				Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods/attach", "pods/exec"}}}}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// The configuration reaches the stage's cache: wait for the denial.
	want := `admission webhook "deny-connect.example.com" denied the request: exec of forbidden is not allowed`
	var stderr string
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		var code int
		_, stderr, code = k.run("", "exec", "web", "-c", "c", "--", "forbidden")
		if (code != 0 && strings.Contains(stderr, want)) || time.Now().After(deadline) {
			break
		}
	}
	if !strings.Contains(stderr, want) {
		t.Fatalf("kubectl exec of a refused command: %q, want %q", stderr, want)
	}
	if out := k.must("", "exec", "web", "-c", "c", "--", "echo", "allowed"); out != "allowed\n" {
		t.Errorf("kubectl exec of an allowed command: %q", out)
	}
	_, stderr, code := k.run("x\n", "attach", "web", "-i", "-c", "c")
	if want := `admission webhook "deny-connect.example.com" denied the request: attaching to pod 'web' is not allowed`; code == 0 || !strings.Contains(stderr, want) {
		t.Fatalf("kubectl attach -i: exit %d, %q, want %q", code, stderr, want)
	}

	mu.Lock()
	defer mu.Unlock()
	var attach *admissionv1.AdmissionRequest
	for _, r := range seen {
		if r.SubResource == "attach" {
			attach = r
		}
	}
	if attach == nil {
		t.Fatal("the webhook saw no attach")
	}
	if attach.Operation != admissionv1.Connect || attach.Resource != (metav1.GroupVersionResource{Version: "v1", Resource: "pods"}) ||
		attach.Kind != (metav1.GroupVersionKind{Version: "v1", Kind: "PodAttachOptions"}) || attach.Name != "web" || attach.Namespace != "default" ||
		attach.Options.Raw != nil || attach.OldObject.Raw != nil {
		t.Errorf("the attach request: %+v", attach)
	}
}
