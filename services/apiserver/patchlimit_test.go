package apiserver

import (
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
)

// testPatchLimits are the defaults the server applies.
var testPatchLimits = patchLimits{maxCopyBytes: 3 << 20, maxBytes: 3 << 20}

// copyBomb is a JSON patch that adds a 1 KiB annotation map and then
// copies it into itself n times: each copy doubles the object.
func copyBomb(n int) string {
	ops := []string{fmt.Sprintf(`{"op":"add","path":"/metadata/annotations","value":{"a":%q}}`, strings.Repeat("x", 1024))}
	for i := range n {
		ops = append(ops, fmt.Sprintf(`{"op":"copy","from":"/metadata/annotations","path":"/metadata/annotations/c%d"}`, i))
	}
	return "[" + strings.Join(ops, ",") + "]"
}

// tooManyOps is a JSON patch of n harmless test operations.
func tooManyOps(n int) string {
	return "[" + strings.TrimSuffix(strings.Repeat(`{"op":"test","path":"/metadata/name","value":"a"},`, n), ",") + "]"
}

func TestPatchLimits(t *testing.T) {
	t.Parallel()
	orig := []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a"},"data":{"k":"v"}}`)
	res := lookupResource("v1", "configmaps")
	for _, c := range []struct {
		name     string
		patch    string
		typ      string
		lim      patchLimits
		wantCode int32
		wantMsg  string
	}{
		{"copy bomb", copyBomb(40), patchJSON, testPatchLimits, 422, "exceeding the limit 3145728"},
		{"small copies", copyBomb(3), patchJSON, testPatchLimits, 0, ""},
		{"ops at the limit", tooManyOps(MaxJSONPatchOperations), patchJSON, testPatchLimits, 0, ""},
		{"one op too many", tooManyOps(MaxJSONPatchOperations + 1), patchJSON, testPatchLimits, 413,
			"The allowed maximum operations in a JSON patch is 10000, got 10001"},
		{"result too large", `{"data":{"big":"` + strings.Repeat("y", 2048) + `"}}`, patchMerge, patchLimits{maxCopyBytes: 1 << 20, maxBytes: 1024}, 413,
			"limit 1024 bytes"},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, st := applyPatch(orig, []byte(c.patch), c.typ, res, c.lim)
			if c.wantCode == 0 {
				if st != nil || len(out) == 0 {
					t.Fatalf("refused: %v", st)
				}
				return
			}
			if st == nil || st.GetCode() != c.wantCode || !strings.Contains(st.GetMessage(), c.wantMsg) {
				t.Fatalf("got %v (%d bytes), want %d %q", st, len(out), c.wantCode, c.wantMsg)
			}
		})
	}
}

// TestInFlightClasses: each class of request counts under its own limit,
// and a watch parameter on a write does not move it out of its class.
func TestInFlightClasses(t *testing.T) {
	t.Parallel()
	s := newTestServer(t, func(c *Config) { c.MaxInFlight, c.MaxMutatingInFlight, c.MaxWatches = 1, 1, 1 })
	for _, c := range []struct {
		name, method, url string
		full              chan struct{}
	}{
		{"read", "GET", "/version", s.inflight},
		{"write", "POST", "/api/v1/namespaces/default/configmaps", s.mutating},
		{"write with watch=1", "POST", "/api/v1/namespaces/default/configmaps?watch=1", s.mutating},
		{"delete with watch=true", "DELETE", "/api/v1/namespaces/default/configmaps/a?watch=true", s.mutating},
		{"watch", "GET", "/api/v1/namespaces/default/configmaps?watch=1", s.watches},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.full <- struct{}{}
			defer func() { <-c.full }()
			w := httptest.NewRecorder()
			r := httptest.NewRequest(c.method, c.url, strings.NewReader("{}"))
			r.Header.Set("Authorization", "Bearer some-token-value")
			s.Handler().ServeHTTP(w, r)
			if w.Code != 429 || w.Header().Get("Retry-After") == "" {
				t.Fatalf("with its class full: %d %s", w.Code, w.Body)
			}
		})
	}
	// A full watch class does not hold up reads.
	s.watches <- struct{}{}
	defer func() { <-s.watches }()
	w := httptest.NewRecorder()
	r := httptest.NewRequest("GET", "/version", nil)
	r.Header.Set("Authorization", "Bearer some-token-value")
	s.Handler().ServeHTTP(w, r)
	if w.Code != 200 {
		t.Fatalf("read with watches full: %d %s", w.Code, w.Body)
	}
}
