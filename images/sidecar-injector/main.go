// Command sidecar-injector is podflow's example mutating admission webhook:
// an HTTPS server that adds a sidecar container to every pod it is asked
// about, by a JSONPatch in its AdmissionReview answer (admission.k8s.io/v1).
// examples/sidecar-injector.yaml runs it as a pod behind a Service and
// registers it with a MutatingWebhookConfiguration; docs/admission.md walks
// through it.
//
// Flags:
//
//	-addr :8443                 where to listen (HTTPS)
//	-tls-cert-file, -tls-key-file  its serving certificate (for the name
//	                            <service>.<namespace>.svc), e.g. a mounted Secret
//	-sidecar-name proxy         the container added
//	-sidecar-image podflow/busybox:1
//	-sidecar-command "sleep 3600"
//
// Endpoints: POST /inject (the webhook), GET /healthz. A pod that already
// has a container of the sidecar's name is left as it is, so the webhook
// may be reinvoked (reinvocationPolicy IfNeeded).
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"strings"
	"time"
)

// review is the part of an admission.k8s.io/v1 AdmissionReview the
// injector reads and writes.
type review struct {
	APIVersion string    `json:"apiVersion"`
	Kind       string    `json:"kind"`
	Request    *request  `json:"request,omitempty"`
	Response   *response `json:"response,omitempty"`
}

type request struct {
	UID    string                `json:"uid"`
	Kind   struct{ Kind string } `json:"kind"`
	Object json.RawMessage       `json:"object"`
}

type response struct {
	UID       string   `json:"uid"`
	Allowed   bool     `json:"allowed"`
	PatchType string   `json:"patchType,omitempty"`
	Patch     []byte   `json:"patch,omitempty"`
	Warnings  []string `json:"warnings,omitempty"`
}

type container struct {
	Name    string   `json:"name"`
	Image   string   `json:"image"`
	Command []string `json:"command,omitempty"`
}

type pod struct {
	Spec struct {
		Containers []struct {
			Name string `json:"name"`
		} `json:"containers"`
	} `json:"spec"`
}

// maxReview bounds a review's body (kube-apiserver sends at most 3 MiB
// objects).
const maxReview = 4 << 20

// injector answers reviews with the patch adding its sidecar.
type injector struct{ sidecar container }

// patch is the JSONPatch adding the sidecar to the pod in raw, or nil when
// the pod has it already.
func (in injector) patch(raw []byte) ([]byte, error) {
	var p pod
	if err := json.Unmarshal(raw, &p); err != nil {
		return nil, fmt.Errorf("decode the pod: %w", err)
	}
	for _, c := range p.Spec.Containers {
		if c.Name == in.sidecar.Name {
			return nil, nil
		}
	}
	return json.Marshal([]map[string]any{{"op": "add", "path": "/spec/containers/-", "value": in.sidecar}})
}

func (in injector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(w, "POST an AdmissionReview", http.StatusMethodNotAllowed)
		return
	}
	var rv review
	if err := json.NewDecoder(io.LimitReader(r.Body, maxReview)).Decode(&rv); err != nil || rv.Request == nil {
		http.Error(w, "not an AdmissionReview", http.StatusBadRequest)
		return
	}
	resp := &response{UID: rv.Request.UID, Allowed: true}
	if rv.Request.Kind.Kind == "Pod" {
		p, err := in.patch(rv.Request.Object)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if p != nil {
			resp.PatchType, resp.Patch = "JSONPatch", p
			resp.Warnings = []string{fmt.Sprintf("sidecar-injector: added container %q", in.sidecar.Name)}
		}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(review{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview", Response: resp})
}

func main() {
	addr := flag.String("addr", ":8443", "listen address")
	cert := flag.String("tls-cert-file", "/etc/webhook/tls.crt", "serving certificate")
	key := flag.String("tls-key-file", "/etc/webhook/tls.key", "serving key")
	name := flag.String("sidecar-name", "proxy", "the sidecar container's name")
	image := flag.String("sidecar-image", "podflow/busybox:1", "the sidecar's image")
	command := flag.String("sidecar-command", "sleep 3600", "the sidecar's command (space separated)")
	flag.Parse()
	mux := http.NewServeMux()
	mux.Handle("/inject", injector{container{Name: *name, Image: *image, Command: strings.Fields(*command)}})
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	srv := &http.Server{Addr: *addr, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	log.Printf("sidecar-injector: serving on %s", *addr)
	log.Fatal(srv.ListenAndServeTLS(*cert, *key))
}
