package bench

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podflow/podflow/ops/client"
	"github.com/podflow/podflow/services/manifest"
	"github.com/podflow/podflow/services/objects"
)

// benchHooks is the pipeline bench's pair of local admission webhooks
// (--webhooks): a mutating one that annotates each pod with a JSONPatch and
// a validating one that allows it, served over HTTPS on loopback.
type benchHooks struct {
	srv   *httptest.Server
	store *objects.Store
	// registered are the configurations written to the store, removed by
	// close: on a configured system a webhook left behind with
	// failurePolicy Fail and no server would refuse every pod.
	registered []objects.Object
	// calls and conns count the webhooks' requests and the connections
	// they came over (each a TLS handshake).
	calls, conns atomic.Int64
}

// startBenchHooks starts the webhooks and registers them (every pod
// CREATE) in the system's store.
func startBenchHooks(ctx context.Context, sess *client.Session) (*benchHooks, error) {
	mux := http.NewServeMux()
	answer := func(patch string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			var review struct {
				APIVersion string               `json:"apiVersion"`
				Kind       string               `json:"kind"`
				Request    struct{ UID string } `json:"request"`
				Response   map[string]any       `json:"response"`
			}
			if err := json.NewDecoder(r.Body).Decode(&review); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			review.Response = map[string]any{"uid": review.Request.UID, "allowed": true}
			if patch != "" {
				review.Response["patchType"], review.Response["patch"] = "JSONPatch", []byte(patch)
			}
			_ = json.NewEncoder(w).Encode(review)
		}
	}
	mux.Handle("/mutate", answer(`[{"op":"add","path":"/metadata/annotations","value":{"bench.podflow.io/admitted":"true"}}]`))
	mux.Handle("/validate", answer(""))
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	h := &benchHooks{store: sess.Store}
	counted := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.calls.Add(1)
		mux.ServeHTTP(w, r)
	})
	srv := &httptest.Server{Listener: l, Config: &http.Server{Handler: counted, ReadHeaderTimeout: 10 * time.Second,
		ConnState: func(_ net.Conn, s http.ConnState) {
			if s == http.StateNew {
				h.conns.Add(1)
			}
		}}}
	srv.StartTLS()
	h.srv = srv
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	cc := func(path string) admissionregistrationv1.WebhookClientConfig {
		u := srv.URL + path
		return admissionregistrationv1.WebhookClientConfig{URL: &u, CABundle: ca}
	}
	none, fail, equiv, never := admissionregistrationv1.SideEffectClassNone, admissionregistrationv1.Fail, admissionregistrationv1.Equivalent, admissionregistrationv1.NeverReinvocationPolicy
	timeout, all := int32(10), &metav1.LabelSelector{}
	rules := []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
		Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}}}}
	configs := []any{
		&admissionregistrationv1.MutatingWebhookConfiguration{TypeMeta: metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "MutatingWebhookConfiguration"},
			ObjectMeta: metav1.ObjectMeta{Name: "bench-mutate"},
			Webhooks: []admissionregistrationv1.MutatingWebhook{{Name: "mutate.bench.podflow.io", ClientConfig: cc("/mutate"), Rules: rules,
				SideEffects: &none, FailurePolicy: &fail, MatchPolicy: &equiv, NamespaceSelector: all, ObjectSelector: all, TimeoutSeconds: &timeout,
				AdmissionReviewVersions: []string{"v1"}, ReinvocationPolicy: &never}}},
		&admissionregistrationv1.ValidatingWebhookConfiguration{TypeMeta: metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "ValidatingWebhookConfiguration"},
			ObjectMeta: metav1.ObjectMeta{Name: "bench-validate"},
			Webhooks: []admissionregistrationv1.ValidatingWebhook{{Name: "validate.bench.podflow.io", ClientConfig: cc("/validate"), Rules: rules,
				SideEffects: &none, FailurePolicy: &fail, MatchPolicy: &equiv, NamespaceSelector: all, ObjectSelector: all, TimeoutSeconds: &timeout,
				AdmissionReviewVersions: []string{"v1"}}}},
	}
	for _, c := range configs {
		b, err := json.Marshal(c)
		if err != nil {
			h.close()
			return nil, err
		}
		objs, err := manifest.Decode(b)
		if err != nil {
			h.close()
			return nil, err
		}
		obj := objs[0].Message.(objects.Object)
		if _, err := sess.Store.Apply(ctx, obj); err != nil {
			h.close()
			return nil, fmt.Errorf("register the bench's webhooks: %w", err)
		}
		h.registered = append(h.registered, obj)
	}
	// The stages' informers take them within a moment.
	select {
	case <-time.After(2 * time.Second):
	case <-ctx.Done():
	}
	return h, nil
}

// close removes the configurations, then stops the server.
func (h *benchHooks) close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var errs []error
	for _, obj := range h.registered {
		k, err := objects.KindOf(obj)
		if err == nil {
			_, err = h.store.Delete(ctx, k, "", obj.GetMetadata().GetName(), 0)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("remove the bench's webhook configuration %q: %w", obj.GetMetadata().GetName(), err))
		}
	}
	h.srv.Close()
	return errors.Join(errs...)
}
