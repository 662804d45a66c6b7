package apiserver_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/apiserver/pki"
	"github.com/podflow/podflow/services/objects"
)

// conversionWebhook is a ConversionReview server over TLS, as the e2e
// suite's crd-conversion-webhook: v1's spec.hostPort "host:port" is v2's
// spec.host and spec.port. It counts the objects it converted.
type conversionWebhook struct {
	addr      string
	converted atomic.Int64
}

func startConversionWebhook(t *testing.T, ca *pki.CA, hosts ...string) *conversionWebhook {
	t.Helper()
	c, k, err := ca.Issue(pki.Request{CommonName: "webhook", Hosts: hosts, Server: true})
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(c, k)
	if err != nil {
		t.Fatal(err)
	}
	l, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{pair}})
	if err != nil {
		t.Fatal(err)
	}
	wh := &conversionWebhook{addr: l.Addr().String()}
	srv := &http.Server{Handler: http.HandlerFunc(wh.serve), ReadHeaderTimeout: 5 * time.Second}
	// Each review on a new connection: the webhook client resolves the
	// Service when it dials (as kube-apiserver's does), so a kept-alive
	// connection would outlive the Service's deletion.
	srv.SetKeepAlivesEnabled(false)
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return wh
}

func (wh *conversionWebhook) serve(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	var review apiextensionsv1.ConversionReview
	if err := json.Unmarshal(b, &review); err != nil || review.Request == nil {
		http.Error(w, "not a ConversionReview", http.StatusBadRequest)
		return
	}
	resp := &apiextensionsv1.ConversionResponse{UID: review.Request.UID, Result: metav1.Status{Status: metav1.StatusSuccess}}
	for _, raw := range review.Request.Objects {
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(raw.Raw); err != nil {
			resp.Result = metav1.Status{Status: metav1.StatusFailure, Message: err.Error()}
			break
		}
		spec, _, _ := unstructured.NestedMap(u.Object, "spec")
		if spec == nil {
			spec = map[string]any{}
		}
		switch review.Request.DesiredAPIVersion {
		case "stable.example.com/v2":
			if hp, ok := spec["hostPort"].(string); ok {
				host, port, _ := strings.Cut(hp, ":")
				delete(spec, "hostPort")
				spec["host"], spec["port"] = host, port
			}
		case "stable.example.com/v1":
			if host, ok := spec["host"].(string); ok {
				port, _ := spec["port"].(string)
				delete(spec, "host")
				delete(spec, "port")
				spec["hostPort"] = host + ":" + port
			}
		}
		_ = unstructured.SetNestedMap(u.Object, spec, "spec")
		u.SetAPIVersion(review.Request.DesiredAPIVersion)
		out, _ := u.MarshalJSON()
		resp.ConvertedObjects = append(resp.ConvertedObjects, runtime.RawExtension{Raw: out})
		wh.converted.Add(1)
	}
	review.Response, review.Request = resp, nil
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(&review)
}

// conversionCRD is a definition of stable.example.com whose versions v1
// (hostPort) and v2 (host, port) convert through a webhook.
func conversionCRD(cc apiextensionsv1.WebhookClientConfig) *apiextensionsv1.CustomResourceDefinition {
	props := func(names ...string) map[string]apiextensionsv1.JSONSchemaProps {
		p := map[string]apiextensionsv1.JSONSchemaProps{}
		for _, n := range names {
			p[n] = apiextensionsv1.JSONSchemaProps{Type: "string"}
		}
		return p
	}
	version := func(name string, storage bool, fields ...string) apiextensionsv1.CustomResourceDefinitionVersion {
		return apiextensionsv1.CustomResourceDefinitionVersion{Name: name, Served: true, Storage: storage,
			Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{Type: "object",
				Properties: map[string]apiextensionsv1.JSONSchemaProps{"spec": {Type: "object", Properties: props(fields...)}}}}}
	}
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "endpoints.stable.example.com"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "stable.example.com", Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "endpoints", Singular: "endpoint", Kind: "Endpoint", ListKind: "EndpointList"},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{
				version("v1", true, "hostPort"), version("v2", false, "host", "port"),
			},
			Conversion: &apiextensionsv1.CustomResourceConversion{Strategy: apiextensionsv1.WebhookConverter,
				Webhook: &apiextensionsv1.WebhookConversion{ClientConfig: &cc, ConversionReviewVersions: []string{"v1", "v1beta1"}}},
		},
	}
}

// TestConversionWebhook: a definition converts between its versions
// through its webhook, over HTTPS trusting only its caBundle, the webhook
// found through a Service's endpoints: an object read in the other
// version, written in it, and a list of objects stored in both versions
// (the storage version changed between them) read in one.
func TestConversionWebhook(t *testing.T) {
	s := startSystem(t, options{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	whCA, err := pki.NewCA("webhook-ca")
	if err != nil {
		t.Fatal(err)
	}
	wh := startConversionWebhook(t, whCA, "converter.default.svc")
	_, whPort, _ := net.SplitHostPort(wh.addr)

	// The webhook's Service and its endpoint (the webhook runs here, on
	// loopback, not in a pod).
	cs, err := kubernetes.NewForConfig(restConfig(s))
	if err != nil {
		t.Fatal(err)
	}
	svc := `{"apiVersion":"v1","kind":"Service","metadata":{"name":"converter"},"spec":{"ports":[{"name":"https","port":443,"targetPort":` + whPort + `}]}}`
	if err := cs.CoreV1().RESTClient().Post().AbsPath("/api/v1/namespaces/default/services").Body([]byte(svc)).Do(ctx).Error(); err != nil {
		t.Fatal(err)
	}
	slice := `{"apiVersion":"discovery.k8s.io/v1","kind":"EndpointSlice","metadata":{"name":"converter-x","labels":{"kubernetes.io/service-name":"converter"}},
"addressType":"IPv4","endpoints":[{"addresses":["127.0.0.1"],"conditions":{"ready":true}}],"ports":[{"name":"https","port":` + whPort + `,"protocol":"TCP"}]}`
	if err := cs.CoreV1().RESTClient().Post().AbsPath("/apis/discovery.k8s.io/v1/namespaces/default/endpointslices").Body([]byte(slice)).Do(ctx).Error(); err != nil {
		t.Fatal(err)
	}
	path, svcPort := "/convert", int32(443)
	def := establish(t, s, conversionCRD(apiextensionsv1.WebhookClientConfig{CABundle: whCA.CertPEM,
		Service: &apiextensionsv1.ServiceReference{Namespace: "default", Name: "converter", Path: &path, Port: &svcPort}}))

	dyn, err := dynamic.NewForConfig(restConfig(s))
	if err != nil {
		t.Fatal(err)
	}
	gvr := func(v string) dynamic.ResourceInterface {
		return dyn.Resource(schema.GroupVersionResource{Group: "stable.example.com", Version: v, Resource: "endpoints"}).Namespace("default")
	}
	if _, err := gvr("v1").Create(ctx, unstructuredOf(t, "apiVersion: stable.example.com/v1\nkind: Endpoint\nmetadata: {name: a}\nspec: {hostPort: \"db:5432\"}\n"),
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	got, err := gvr("v2").Get(ctx, "a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if h, _, _ := unstructured.NestedString(got.Object, "spec", "host"); h != "db" || got.GetAPIVersion() != "stable.example.com/v2" {
		t.Fatalf("read as v2: %v", got.Object)
	}
	if wh.converted.Load() == 0 {
		t.Fatal("the webhook converted nothing")
	}

	// A write in v2 is stored in v1 (the storage version) by the webhook.
	if _, err := gvr("v2").Create(ctx, unstructuredOf(t, "apiVersion: stable.example.com/v2\nkind: Endpoint\nmetadata: {name: b}\nspec: {host: web, port: \"80\"}\n"),
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if v := storedValue(ctx, s, "/registry/stable.example.com/endpoints/default/b"); storedAPIVersion(ctx, t, s, "/registry/stable.example.com/endpoints/default/b") != "stable.example.com/v1" || !strings.Contains(v, "web:80") {
		t.Fatalf("stored %q", v)
	}

	// Storage moves to v2: objects stored in both versions list in one.
	ac, err := apiextensionsclient.NewForConfig(restConfig(s))
	if err != nil {
		t.Fatal(err)
	}
	cur, err := ac.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, def.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cur.Spec.Versions[0].Storage, cur.Spec.Versions[1].Storage = false, true
	if _, err := ac.ApiextensionsV1().CustomResourceDefinitions().Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	for { // the catalog follows the new storage version
		if _, err := gvr("v2").Create(ctx, unstructuredOf(t, "apiVersion: stable.example.com/v2\nkind: Endpoint\nmetadata: {name: c}\nspec: {host: cache, port: \"6379\"}\n"),
			metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		// The stored object's own apiVersion: its managedFields name v2
		// whatever version it is stored in.
		v := storedAPIVersion(ctx, t, s, "/registry/stable.example.com/endpoints/default/c")
		if v == "stable.example.com/v2" {
			break
		}
		if err := gvr("v2").Delete(ctx, "c", metav1.DeleteOptions{}); err != nil || ctx.Err() != nil {
			t.Fatalf("c stored as %q (%v)", v, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	l, err := gvr("v1").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var hostPorts []string
	for _, it := range l.Items {
		hp, _, _ := unstructured.NestedString(it.Object, "spec", "hostPort")
		hostPorts = append(hostPorts, it.GetAPIVersion()+" "+hp)
	}
	if strings.Join(hostPorts, ",") != "stable.example.com/v1 db:5432,stable.example.com/v1 web:80,stable.example.com/v1 cache:6379" {
		t.Fatalf("the list in v1: %v", hostPorts)
	}

	// A webhook that cannot be reached fails the read with the error.
	if err := cs.CoreV1().Services("default").Delete(ctx, "converter", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := gvr("v1").Get(ctx, "c", metav1.GetOptions{}); err == nil || !strings.Contains(err.Error(), "conversion webhook") ||
		!strings.Contains(err.Error(), `services "converter"`) {
		t.Fatalf("read with the webhook's Service gone: %v", err)
	}
}

// storedAPIVersion is the apiVersion of the object stored at key.
func storedAPIVersion(ctx context.Context, t *testing.T, s *system, key string) string {
	t.Helper()
	kv, err := s.store.KV().Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	var u corev1.Unstructured
	if err := objects.Decode(kv, &u); err != nil {
		t.Fatal(err)
	}
	return u.GetApiVersion()
}

// storedValue is the stored bytes of key, as text ("" when missing).
func storedValue(ctx context.Context, s *system, key string) string {
	kv, err := s.store.KV().Get(ctx, key)
	if err != nil {
		return ""
	}
	return string(kv.Value)
}
