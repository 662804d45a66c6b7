package apiserver

import (
	"context"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/podflow/podflow/proto/apiv1"
	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/apiserver/pki"
	"github.com/podflow/podflow/services/auth"
)

// allowAll is a fake Backend for pure unit tests of the HTTP layer.
type allowAll struct{}

func (allowAll) AuthenticateToken(string) (*corev1.UserInfo, *corev1.Status) {
	return &corev1.UserInfo{Username: "u"}, nil
}
func (allowAll) Authorize(auth.Attributes) auth.Decision { return auth.Decision{Allowed: true} }
func (allowAll) RulesFor(*corev1.UserInfo, string) []*corev1.PolicyRule {
	return []*corev1.PolicyRule{{Verbs: []string{"*"}, ApiGroups: []string{"*"}, Resources: []string{"*"}}}
}
func (allowAll) CreatePod(context.Context, *corev1.UserInfo, *corev1.Pod, bool) (*corev1.Status, *corev1.Pod) {
	return nil, nil
}
func (allowAll) Object(context.Context, *corev1.UserInfo, *apiv1.ObjectRequest) (*corev1.Status, proto.Message) {
	return nil, nil
}

func newTestServer(t *testing.T, mod func(*Config)) *Server {
	dir := t.TempDir()
	ca, err := pki.NewCA("ca")
	if err != nil {
		t.Fatal(err)
	}
	c, k, err := ca.Issue(pki.Request{CommonName: "srv", Hosts: []string{"127.0.0.1"}, Server: true})
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.Addr, cfg.CertFile, cfg.KeyFile = "127.0.0.1:0", filepath.Join(dir, "c"), filepath.Join(dir, "k")
	_ = os.WriteFile(cfg.CertFile, c, 0o600)
	_ = os.WriteFile(cfg.KeyFile, k, 0o600)
	if mod != nil {
		mod(&cfg)
	}
	s, err := New(cfg, allowAll{}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestTooManyRequests: past MaxInFlight, requests get 429 with
// Retry-After; watches are not counted.
func TestTooManyRequests(t *testing.T) {
	t.Parallel()
	s := newTestServer(t, func(c *Config) { c.MaxInFlight = 2 })
	s.inflight <- struct{}{}
	s.inflight <- struct{}{}
	w := httptest.NewRecorder()
	r := httptest.NewRequest("GET", "/version", nil)
	r.Header.Set("Authorization", "Bearer some-token-value")
	s.Handler().ServeHTTP(w, r)
	if w.Code != 429 || w.Header().Get("Retry-After") == "" {
		t.Fatalf("saturated: %d %v %s", w.Code, w.Header(), w.Body)
	}
	<-s.inflight
	w = httptest.NewRecorder()
	s.Handler().ServeHTTP(w, r)
	if w.Code != 200 {
		t.Fatalf("after a slot freed: %d %s", w.Code, w.Body)
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	for name, mod := range map[string]func(*Config){
		"no addr":       func(c *Config) { c.Addr = "" },
		"no cert":       func(c *Config) { c.CertFile = "" },
		"tiny body":     func(c *Config) { c.MaxBodyBytes = 10 },
		"oidc no keys":  func(c *Config) { c.OIDC.IssuerURL, c.OIDC.ClientID = "https://i", "k" },
		"oidc no aud":   func(c *Config) { c.OIDC.IssuerURL, c.OIDC.KeysFile = "https://i", "f" },
		"no inflight":   func(c *Config) { c.MaxInFlight = 0 },
		"short watches": func(c *Config) { c.MaxWatchTimeout = 0 },
		"no mutating":   func(c *Config) { c.MaxMutatingInFlight = 0 },
		"no watches":    func(c *Config) { c.MaxWatches = 0 },
		"no copy bytes": func(c *Config) { c.JSONPatchMaxCopyBytes = 0 },
		"no body read":  func(c *Config) { c.BodyReadTimeout = 0 },
		"no rv wait":    func(c *Config) { c.TooLargeResourceVersionWait = 0 },
	} {
		c := DefaultConfig()
		c.Addr, c.CertFile, c.KeyFile = "a", "c", "k"
		if err := c.Validate(); err != nil {
			t.Fatalf("valid config refused: %v", err)
		}
		mod(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
