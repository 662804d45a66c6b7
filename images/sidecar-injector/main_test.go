package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func post(t *testing.T, h http.Handler, body string) (int, review) {
	t.Helper()
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/inject", strings.NewReader(body)))
	var rv review
	if w.Code == http.StatusOK {
		if err := json.Unmarshal(w.Body.Bytes(), &rv); err != nil {
			t.Fatal(err)
		}
	}
	return w.Code, rv
}

func TestInjects(t *testing.T) {
	in := injector{container{Name: "proxy", Image: "podflow/busybox:1", Command: []string{"sleep", "3600"}}}
	code, rv := post(t, in, `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u1","kind":{"kind":"Pod"},
		"object":{"spec":{"containers":[{"name":"app"}]}}}}`)
	if code != 200 || rv.Response == nil || !rv.Response.Allowed || rv.Response.UID != "u1" || rv.Response.PatchType != "JSONPatch" {
		t.Fatalf("%d %+v", code, rv.Response)
	}
	want := `[{"op":"add","path":"/spec/containers/-","value":{"name":"proxy","image":"podflow/busybox:1","command":["sleep","3600"]}}]`
	if !bytes.Equal(rv.Response.Patch, []byte(want)) {
		t.Fatalf("patch %s", rv.Response.Patch)
	}
	// Reinvoked over its own output: nothing more.
	_, rv = post(t, in, `{"request":{"uid":"u2","kind":{"kind":"Pod"},"object":{"spec":{"containers":[{"name":"app"},{"name":"proxy"}]}}}}`)
	if rv.Response.Patch != nil || !rv.Response.Allowed {
		t.Fatalf("a pod with the sidecar was patched: %+v", rv.Response)
	}
	if code, _ := post(t, in, `garbage`); code != http.StatusBadRequest {
		t.Fatalf("garbage: %d", code)
	}
}
