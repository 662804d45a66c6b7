package main

import (
	"bytes"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestFetch: the client mode verifies the server with the CA given and
// sends the token; a server it cannot verify gives no answer (exit 2).
func TestFetch(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer tok" {
			http.Error(w, "who are you", http.StatusUnauthorized)
			return
		}
		_, _ = w.Write([]byte(`{"kind":"APIVersions"}`))
	}))
	defer srv.Close()
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o644); err != nil {
		t.Fatal(err)
	}
	tok := filepath.Join(dir, "token")
	if err := os.WriteFile(tok, []byte("tok\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	if code := fetch([]string{srv.URL + "/api", "-ca", ca, "-token-file", tok}, &out, &errOut); code != 0 || !strings.HasPrefix(out.String(), "HTTP 200\n{\"kind\":\"APIVersions\"}") {
		t.Fatalf("fetch: %d %q %q", code, out.String(), errOut.String())
	}
	out.Reset()
	if code := fetch([]string{srv.URL + "/api", "-ca", ca}, &out, &errOut); code != 0 || !strings.HasPrefix(out.String(), "HTTP 401") {
		t.Fatalf("fetch without the token: %d %q", code, out.String())
	}
	if code := fetch([]string{srv.URL + "/api", "-ca", ca, "-expect", "200"}, &out, &errOut); code != 1 {
		t.Fatalf("fetch of a 401 expecting 200: exit %d, want 1", code)
	}
	out.Reset()
	errOut.Reset()
	if code := fetch([]string{srv.URL + "/api"}, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), "certificate") {
		t.Fatalf("fetch without the CA: %d %q %q", code, out.String(), errOut.String())
	}
}
