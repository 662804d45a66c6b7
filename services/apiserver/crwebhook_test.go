package apiserver_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
)

// TestWebhookCustomResourceVersions: mutating webhooks on a custom
// resource whose definition serves v1 (stored) and v2 (conversion None).
// A patch at v2 of an object stored at v1 is admitted at v2 (the stored
// object converted, as the upstream "should mutate custom resource with
// different stored version" does it); a webhook listing only v1 is called
// at v1 (matchPolicy Equivalent, the object converted by the definition)
// and its patch lands in the v2 answer.
func TestWebhookCustomResourceVersions(t *testing.T) {
	s := startSystem(t, options{webhooks: true})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	schemaAny := &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
		Type: "object", XPreserveUnknownFields: hookPtr(true)}}
	establish(t, s, &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "widgets.hooks.example.com"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{Group: "hooks.example.com", Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "widgets", Singular: "widget", Kind: "Widget", ListKind: "WidgetList"},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{
				{Name: "v1", Served: true, Storage: true, Schema: schemaAny},
				{Name: "v2", Served: true, Schema: schemaAny}}},
	})

	hs := newAdmissionHooks(t)
	pt := admissionv1.PatchTypeJSONPatch
	var mu sync.Mutex
	seen := map[string][]string{} // path -> "kind@apiVersion of the object" per call
	mutate := func(path, patch string) {
		hs.handle(path, func(req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
			var u unstructured.Unstructured
			_ = u.UnmarshalJSON(req.Object.Raw)
			mu.Lock()
			seen[path] = append(seen[path], fmt.Sprintf("%s %s %s@%s", req.Operation, req.Kind.Version, req.RequestKind.Version, u.GetAPIVersion()))
			mu.Unlock()
			return &admissionv1.AdmissionResponse{Allowed: true, PatchType: &pt, Patch: []byte(patch)}
		})
	}
	mutate("/all", `[{"op":"add","path":"/data/all","value":"yes"}]`)
	mutate("/v1only", `[{"op":"add","path":"/data/v1only","value":"yes"}]`)
	cs, err := kubernetes.NewForConfig(restConfig(s))
	if err != nil {
		t.Fatal(err)
	}
	rule := func(versions ...string) []admissionregistrationv1.RuleWithOperations {
		return []admissionregistrationv1.RuleWithOperations{{
			Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
			Rule:       admissionregistrationv1.Rule{APIGroups: []string{"hooks.example.com"}, APIVersions: versions, Resources: []string{"widgets"}}}}
	}
	if _, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "widgets"},
		Webhooks: []admissionregistrationv1.MutatingWebhook{
			{Name: "all.example.com", ClientConfig: hs.config("/all"), SideEffects: &hookNone, AdmissionReviewVersions: []string{"v1"}, Rules: rule("v1", "v2")},
			{Name: "v1only.example.com", ClientConfig: hs.config("/v1only"), SideEffects: &hookNone, AdmissionReviewVersions: []string{"v1"}, Rules: rule("v1")},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	dyn, err := dynamic.NewForConfig(restConfig(s))
	if err != nil {
		t.Fatal(err)
	}
	widgets := func(v string) dynamic.ResourceInterface {
		return dyn.Resource(schema.GroupVersionResource{Group: "hooks.example.com", Version: v, Resource: "widgets"}).Namespace("default")
	}
	// The configuration reaches the stage's cache: create (dry run) until
	// the webhooks mutate.
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		got, err := widgets("v1").Create(ctx, unstructuredOf(t, "apiVersion: hooks.example.com/v1\nkind: Widget\nmetadata: {name: probe}\ndata: {start: \"yes\"}\n"),
			metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			t.Fatal(err)
		}
		if v, _, _ := unstructured.NestedString(got.Object, "data", "all"); v == "yes" || time.Now().After(deadline) {
			break
		}
	}
	if _, err := widgets("v1").Create(ctx, unstructuredOf(t, "apiVersion: hooks.example.com/v1\nkind: Widget\nmetadata: {name: w}\ndata: {start: \"yes\"}\n"),
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	clear(seen)
	mu.Unlock()

	got, err := widgets("v2").Patch(ctx, "w", types.JSONPatchType, []byte(`[{"op":"add","path":"/dummy","value":"test"}]`), metav1.PatchOptions{})
	if err != nil {
		t.Fatalf("patch at v2 of a widget stored at v1: %v", err)
	}
	if got.GetAPIVersion() != "hooks.example.com/v2" || got.Object["dummy"] != "test" {
		t.Errorf("patched: %v", got.Object)
	}
	for _, k := range []string{"start", "all", "v1only"} {
		if v, _, _ := unstructured.NestedString(got.Object, "data", k); v != "yes" {
			t.Errorf("patched: data.%s = %q, want yes (%v)", k, v, got.Object["data"])
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(seen["/all"]) != "[UPDATE v2 v2@hooks.example.com/v2]" {
		t.Errorf("the webhook on v1 and v2 saw %v, want the update at v2", seen["/all"])
	}
	if fmt.Sprint(seen["/v1only"]) != "[UPDATE v1 v2@hooks.example.com/v1]" {
		t.Errorf("the webhook on v1 saw %v, want the update at v1, requested at v2", seen["/v1only"])
	}
}
