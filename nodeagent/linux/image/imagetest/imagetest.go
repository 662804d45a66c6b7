// Package imagetest provides what tests of image consumers need: an OCI
// registry on loopback (go-containerregistry's registry package behind an
// httptest server) that counts the requests it serves and can be stopped,
// and a push helper for images built with package imagebuild.
//
// Example:
//
//	reg := imagetest.NewRegistry(t)
//	img, _ := imagebuild.Image(v1.Config{Cmd: []string{"sh"}}, layer)
//	reg.Push(t, "library/busybox:1", img)
//	store, _ := image.NewStore(image.Config{Dir: t.TempDir(), Mirror: reg.Addr, Parallelism: 4})
package imagetest

import (
	"context"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/podflow/podflow/nodeagent/linux/image/imagebuild"
)

// Registry is an in-memory OCI registry on a loopback port.
type Registry struct {
	// Addr is "127.0.0.1:PORT".
	Addr string

	srv      *httptest.Server
	requests atomic.Int64
	mu       sync.Mutex
	gets     map[string]int // URL path → GET count
	before   func(*http.Request)
	auth     *[2]string // user, password required by RequireBasicAuth
	stopped  atomic.Bool
}

// NewRegistry starts a registry closed when the test ends.
func NewRegistry(t testing.TB) *Registry {
	t.Helper()
	r := &Registry{gets: map[string]int{}}
	h := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.requests.Add(1)
		r.mu.Lock()
		if req.Method == http.MethodGet {
			r.gets[req.URL.Path]++
		}
		before, auth := r.before, r.auth
		r.mu.Unlock()
		if before != nil {
			before(req)
		}
		if auth != nil {
			if u, p, ok := req.BasicAuth(); !ok || u != auth[0] || p != auth[1] {
				// As a registry behind basic auth (distribution's htpasswd).
				w.Header().Set("WWW-Authenticate", `Basic realm="podflow-test"`)
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusUnauthorized)
				_, _ = io.WriteString(w, `{"errors":[{"code":"UNAUTHORIZED","message":"authentication required","detail":null}]}`)
				return
			}
		}
		h.ServeHTTP(w, req)
	}))
	r.Addr = strings.TrimPrefix(r.srv.URL, "http://")
	t.Cleanup(r.Stop)
	return r
}

// Push writes img to the registry as repoTag ("library/nginx:latest").
func (r *Registry) Push(t testing.TB, repoTag string, img v1.Image) {
	t.Helper()
	if err := imagebuild.Push(context.Background(), r.Addr, map[string]v1.Image{repoTag: img}); err != nil {
		t.Fatalf("push %q: %v", repoTag, err)
	}
}

// Requests is the number of requests served so far.
func (r *Registry) Requests() int64 { return r.requests.Load() }

// BlobGets is the number of GETs of the blob with digest ("sha256:…"),
// in any repository.
func (r *Registry) BlobGets(digest string) int {
	return r.getsWithSuffix("/blobs/" + digest)
}

// ManifestGets is the number of GETs of manifests of repo ("library/nginx").
func (r *Registry) ManifestGets(repo string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for p, c := range r.gets {
		if strings.HasPrefix(p, "/v2/"+repo+"/manifests/") {
			n += c
		}
	}
	return n
}

func (r *Registry) getsWithSuffix(suffix string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for p, c := range r.gets {
		if strings.HasSuffix(p, suffix) {
			n += c
		}
	}
	return n
}

// RequireBasicAuth makes every later request need HTTP basic auth as
// user:password; others are answered 401 UNAUTHORIZED with a Basic
// challenge. Push before calling it.
func (r *Registry) RequireBasicAuth(user, password string) {
	r.mu.Lock()
	r.auth = &[2]string{user, password}
	r.mu.Unlock()
}

// OnRequest sets a hook run before each request is served (tests use it to
// hold responses); nil removes it.
func (r *Registry) OnRequest(f func(*http.Request)) {
	r.mu.Lock()
	r.before = f
	r.mu.Unlock()
}

// Stop closes the server: later connections are refused. Idempotent.
func (r *Registry) Stop() {
	if r.stopped.CompareAndSwap(false, true) {
		r.srv.CloseClientConnections()
		r.srv.Close()
	}
}
