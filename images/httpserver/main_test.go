package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func get(t *testing.T, h http.Handler, path string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	return rec.Code, rec.Body.String()
}

func TestSwitches(t *testing.T) {
	var exited atomic.Int32
	exited.Store(-1)
	s := newServer(func(string) string { return "" }, func(c int) { exited.Store(int32(c)) })
	h := s.handler()
	steps := []struct {
		path string
		code int
	}{
		{"/healthz", 200}, {"/livez", 200}, {"/", 200},
		{"/fail-readiness", 200}, {"/healthz", 503}, {"/readyz", 503}, {"/livez", 200},
		{"/recover-readiness", 200}, {"/healthz", 200},
		{"/fail-liveness", 200}, {"/livez", 503},
		{"/alloc?mb=2", 200}, {"/alloc?mb=x", 400},
		{"/nope", 404},
	}
	for _, st := range steps {
		if code, body := get(t, h, st.path); code != st.code {
			t.Fatalf("GET %s = %d %q, want %d", st.path, code, body, st.code)
		}
	}
	if s.heldBytes.Load() != 2<<20 {
		t.Fatalf("holding %d bytes, want 2 MiB", s.heldBytes.Load())
	}
	if code, body := get(t, h, "/crash?code=3"); code != 200 || !strings.Contains(body, "exiting 3") {
		t.Fatalf("/crash = %d %q", code, body)
	}
	deadline := time.Now().Add(10 * time.Second)
	for exited.Load() != 3 {
		if time.Now().After(deadline) {
			t.Fatalf("exit code %d, want 3", exited.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestEnvSwitches(t *testing.T) {
	env := map[string]string{"FAIL_READINESS": "1", "FAIL_LIVENESS": "1"}
	s := newServer(func(k string) string { return env[k] }, func(int) {})
	h := s.handler()
	if code, _ := get(t, h, "/healthz"); code != 503 {
		t.Fatalf("healthz with FAIL_READINESS=1 = %d", code)
	}
	if code, _ := get(t, h, "/livez"); code != 503 {
		t.Fatalf("livez with FAIL_LIVENESS=1 = %d", code)
	}
	s2 := newServer(func(k string) string { return map[string]string{"READY_AFTER": "1h"}[k] }, func(int) {})
	if code, _ := get(t, s2.handler(), "/readyz"); code != 503 {
		t.Fatalf("readyz before READY_AFTER = %d", code)
	}
}
