// Package registry serves an OCI distribution registry on loopback for
// podflow's nodes (`podflow registry`): go-containerregistry's registry
// package with blobs on disk (its disk blob handler) and manifests made
// durable here, because that package keeps them in memory only. Every
// successful manifest PUT or DELETE is recorded under the data directory
// before the client sees its response, and replayed into the handler on
// start, so pushed images survive a restart.
//
// Layout under Config.Dir:
//
//	blobs/sha256/<hex>       layers and configs (disk blob handler)
//	manifests/sha256/<hex>   manifest bodies, by digest
//	manifests.json           the tags and digests of each repository, in push order
//
// Caller's obligations:
//
//  1. One Server per data directory (New takes a lock on it; Close releases
//     it).
//  2. Addr must be a loopback address: podflow's registry never listens
//     elsewhere.
//  3. Cancel the context given to Serve to stop it; Serve returns after the
//     listener is closed and requests in flight have finished. Then Close.
//
// Example:
//
//	srv, err := registry.New(registry.Config{Dir: dir, Addr: "127.0.0.1:5000"})
//	if err != nil { ... }
//	fmt.Println("listening on", srv.Addr())
//	defer srv.Close()
//	err = srv.Serve(ctx) // until ctx ends
package registry

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	ggcr "github.com/google/go-containerregistry/pkg/registry"
)

// Package sentinels.
var (
	// ErrInvalidConfig wraps every Config.Validate failure.
	ErrInvalidConfig = errors.New("registry: invalid config")
	// ErrLocked is returned by New when another Server has the data
	// directory.
	ErrLocked = errors.New("registry: data directory in use by another registry")
	// ErrCorrupt is returned by New when the persisted manifests do not
	// match their digests or cannot be replayed.
	ErrCorrupt = errors.New("registry: corrupt data directory")
)

// Config configures a Server.
type Config struct {
	// Dir is the data directory. Required.
	Dir string
	// Addr is the loopback address to listen on ("127.0.0.1:5000"; port 0
	// picks a free port). Default "127.0.0.1:0".
	Addr string
	// Log receives one line per request; nil discards them.
	Log *log.Logger
	// ShutdownTimeout bounds how long Serve waits for requests in flight
	// after its context ends. Default 5s.
	ShutdownTimeout time.Duration
}

// DefaultConfig returns a Config for dir on a free loopback port.
func DefaultConfig(dir string) Config {
	return Config{Dir: dir, Addr: "127.0.0.1:0", ShutdownTimeout: 5 * time.Second}
}

// Validate reports the first invalid field, wrapped in ErrInvalidConfig.
func (c Config) Validate() error {
	if c.Dir == "" {
		return fmt.Errorf("%w: Dir is required", ErrInvalidConfig)
	}
	host, _, err := net.SplitHostPort(c.Addr)
	if err != nil {
		return fmt.Errorf("%w: Addr %q: %v", ErrInvalidConfig, c.Addr, err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return fmt.Errorf("%w: Addr %q is not a loopback address", ErrInvalidConfig, c.Addr)
	}
	if c.ShutdownTimeout <= 0 {
		return fmt.Errorf("%w: ShutdownTimeout (%s) must be positive", ErrInvalidConfig, c.ShutdownTimeout)
	}
	return nil
}

// Server is a registry listening on loopback.
type Server struct {
	cfg   Config
	inner http.Handler
	ln    net.Listener
	lock  *os.File // flock held on Dir/.lock until Close
	once  sync.Once

	mu   sync.Mutex // serialises manifest writes and their journal
	tags []entry    // push order: replay order
}

// entry says that repo's ref (a tag or a digest) names manifest Digest.
type entry struct {
	Repo        string `json:"repo"`
	Ref         string `json:"ref"`
	Digest      string `json:"digest"`
	ContentType string `json:"contentType"`
}

// New opens the data directory, replays its manifests and listens on
// cfg.Addr.
func New(cfg Config) (*Server, error) {
	if cfg.Addr == "" {
		cfg.Addr = "127.0.0.1:0"
	}
	if cfg.ShutdownTimeout == 0 {
		cfg.ShutdownTimeout = 5 * time.Second
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	for _, d := range []string{"blobs", "manifests/sha256"} {
		if err := os.MkdirAll(filepath.Join(cfg.Dir, d), 0o755); err != nil {
			return nil, fmt.Errorf("registry: %w", err)
		}
	}
	lock, err := os.OpenFile(filepath.Join(cfg.Dir, ".lock"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("registry: %w", err)
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		lock.Close()
		return nil, fmt.Errorf("%w: %q: %v", ErrLocked, cfg.Dir, err)
	}
	ok := false
	defer func() {
		if !ok {
			lock.Close()
		}
	}()
	logger := cfg.Log
	if logger == nil {
		logger = log.New(io.Discard, "", 0)
	}
	s := &Server{cfg: cfg, lock: lock, inner: ggcr.New(ggcr.Logger(logger), ggcr.WithBlobHandler(ggcr.NewDiskBlobHandler(filepath.Join(cfg.Dir, "blobs"))))}
	if err := s.replay(); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("registry: listen on %q: %w", cfg.Addr, err)
	}
	s.ln = ln
	ok = true
	return s, nil
}

// Close closes the listener (if Serve did not) and releases the data
// directory. Idempotent.
func (s *Server) Close() error {
	s.once.Do(func() {
		s.ln.Close()
		s.lock.Close()
	})
	return nil
}

// Addr is the address the server listens on ("127.0.0.1:PORT").
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Handler is the registry's HTTP handler (with manifest persistence), for
// callers that serve it themselves.
func (s *Server) Handler() http.Handler { return http.HandlerFunc(s.serveHTTP) }

// Serve serves until ctx ends, then shuts down gracefully.
func (s *Server) Serve(ctx context.Context) error {
	hs := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(s.ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("registry: serve: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownTimeout)
	defer cancel()
	err := hs.Shutdown(sctx)
	<-errc
	return err
}

// manifestTarget splits /v2/<repo>/manifests/<ref>.
func manifestTarget(p string) (repo, ref string, ok bool) {
	rest, ok := strings.CutPrefix(p, "/v2/")
	if !ok {
		return "", "", false
	}
	i := strings.LastIndex(rest, "/manifests/")
	if i <= 0 {
		return "", "", false
	}
	return rest[:i], rest[i+len("/manifests/"):], rest[i+len("/manifests/"):] != ""
}

func (s *Server) serveHTTP(w http.ResponseWriter, r *http.Request) {
	repo, ref, ok := manifestTarget(r.URL.Path)
	if !ok || (r.Method != http.MethodPut && r.Method != http.MethodDelete) {
		s.inner.ServeHTTP(w, r)
		return
	}
	var body []byte
	if r.Method == http.MethodPut {
		b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 16<<20))
		if err != nil {
			http.Error(w, "read manifest: "+err.Error(), http.StatusBadRequest)
			return
		}
		body = b
		r.Body = io.NopCloser(bytes.NewReader(b))
	}
	// The handler's answer is held until the change is on disk.
	s.mu.Lock()
	defer s.mu.Unlock()
	rec := httptest.NewRecorder()
	s.inner.ServeHTTP(rec, r)
	if rec.Code/100 == 2 {
		var err error
		if r.Method == http.MethodPut {
			err = s.recordPut(repo, ref, r.Header.Get("Content-Type"), body)
		} else {
			err = s.recordDelete(repo, ref)
		}
		if err != nil {
			http.Error(w, "persist manifest: "+err.Error(), http.StatusInternalServerError)
			return
		}
	}
	for k, v := range rec.Header() {
		w.Header()[k] = v
	}
	w.WriteHeader(rec.Code)
	w.Write(rec.Body.Bytes())
}

func digestOf(b []byte) string {
	h := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(h[:])
}

func (s *Server) manifestPath(digest string) string {
	return filepath.Join(s.cfg.Dir, "manifests", "sha256", strings.TrimPrefix(digest, "sha256:"))
}

func (s *Server) recordPut(repo, ref, contentType string, body []byte) error {
	d := digestOf(body)
	if err := writeFileAtomic(s.manifestPath(d), body); err != nil {
		return err
	}
	next := make([]entry, 0, len(s.tags)+2)
	for _, e := range s.tags {
		if e.Repo == repo && (e.Ref == ref || e.Ref == d) {
			continue // superseded; re-added last, after what it may reference
		}
		next = append(next, e)
	}
	next = append(next, entry{Repo: repo, Ref: ref, Digest: d, ContentType: contentType})
	return s.saveTags(next)
}

func (s *Server) recordDelete(repo, ref string) error {
	next := make([]entry, 0, len(s.tags))
	for _, e := range s.tags {
		if e.Repo == repo && e.Ref == ref {
			continue
		}
		next = append(next, e)
	}
	return s.saveTags(next)
}

func (s *Server) saveTags(next []entry) error {
	b, err := json.MarshalIndent(next, "", "  ")
	if err != nil {
		return err
	}
	if err := writeFileAtomic(filepath.Join(s.cfg.Dir, "manifests.json"), b); err != nil {
		return err
	}
	s.tags = next
	return nil
}

// replay PUTs every recorded manifest into the in-memory handler, in push
// order (so an index follows the manifests it lists).
func (s *Server) replay() error {
	b, err := os.ReadFile(filepath.Join(s.cfg.Dir, "manifests.json"))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("registry: %w", err)
	}
	var tags []entry
	if err := json.Unmarshal(b, &tags); err != nil {
		return fmt.Errorf("%w: manifests.json: %v", ErrCorrupt, err)
	}
	for _, e := range tags {
		body, err := os.ReadFile(s.manifestPath(e.Digest))
		if err != nil {
			return fmt.Errorf("%w: manifest %s of %s:%s: %v", ErrCorrupt, e.Digest, e.Repo, e.Ref, err)
		}
		if d := digestOf(body); d != e.Digest {
			return fmt.Errorf("%w: manifest %s has digest %s", ErrCorrupt, e.Digest, d)
		}
		req := httptest.NewRequest(http.MethodPut, "/v2/"+e.Repo+"/manifests/"+e.Ref, bytes.NewReader(body))
		req.Header.Set("Content-Type", e.ContentType)
		rec := httptest.NewRecorder()
		s.inner.ServeHTTP(rec, req)
		if rec.Code != http.StatusCreated {
			return fmt.Errorf("%w: replay %s:%s: %d %s", ErrCorrupt, e.Repo, e.Ref, rec.Code, rec.Body.String())
		}
	}
	s.tags = tags
	return nil
}

func writeFileAtomic(path string, b []byte) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
}
