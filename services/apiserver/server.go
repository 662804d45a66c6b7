package apiserver

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podflow/podflow/proto/apiv1"
	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/auth"
	"github.com/podflow/podflow/services/objects"
)

// Backend is what the server needs from the api stage it runs in. The
// server calls it in process, so the user it authenticated is trusted
// without crossing the bus. Implementations are safe for concurrent use.
// LogBackend is implemented by backends that can read container logs
// from the nodes (pods/log, `kubectl logs`). PodLogs opens the log (a
// Status if it cannot: nothing is written yet); the handler writes each
// piece Next returns as it comes, so a log is never held whole.
type LogBackend interface {
	PodLogs(ctx context.Context, pod *corev1.Pod, opts LogOptions) (LogStream, *corev1.Status)
}

// LogOptions are pods/log's parameters (Kubernetes' PodLogOptions).
type LogOptions struct {
	Container  string
	Previous   bool
	Follow     bool
	Timestamps bool
	TailLines  *int64    // the last lines only; nil: all
	Since      time.Time // sinceSeconds or sinceTime; zero: any
	LimitBytes int64     // 0: no limit
}

// LogStream is a log being read: Next returns the next piece of text, and
// io.EOF at the end.
type LogStream interface {
	Next(ctx context.Context) ([]byte, error)
}

type Backend interface {
	// AuthenticateToken maps a bearer token (static token file,
	// ServiceAccount token) to a user, or returns the 401 Status.
	AuthenticateToken(token string) (*corev1.UserInfo, *corev1.Status)
	// Authorize decides a request with RBAC.
	Authorize(a auth.Attributes) auth.Decision
	// RulesFor lists the RBAC rules that apply to user in namespace
	// (SelfSubjectRulesReview, `kubectl auth can-i --list`).
	RulesFor(user *corev1.UserInfo, namespace string) []*corev1.PolicyRule
	// CreatePod runs a pod creation through the pipeline on behalf of an
	// authenticated user and waits for its outcome: 201 and the stored pod
	// (or the dry-run result), or the failure Status of whichever stage
	// ended it.
	CreatePod(ctx context.Context, user *corev1.UserInfo, pod *corev1.Pod, dryRun bool) (*corev1.Status, *corev1.Pod)
	// Object serves an apiv1.ObjectRequest (create, apply, delete) on
	// behalf of an authenticated user; req.Token and req.User are ignored.
	Object(ctx context.Context, user *corev1.UserInfo, req *apiv1.ObjectRequest) (*corev1.Status, proto.Message)
}

// Server is the Kubernetes REST front door over HTTPS.
type Server struct {
	cfg     Config
	backend Backend
	store   *objects.Store
	log     *slog.Logger
	tls     *tls.Config
	oidc    *oidcVerifier
	cache   *kubeCache
	// snapshots keep paged lists' snapshots for their continue pages.
	snapshots *snapshots
	handler   http.Handler
	// clientCAs verify client certificates (nil: none accepted); certs
	// remembers the chains they verified.
	clientCAs *x509.CertPool
	certs     *certCache
	// now is the clock certificates are checked against.
	now func() time.Time
	// proxyTransport carries pods/proxy and services/proxy (proxy.go).
	proxyTransport http.RoundTripper
	// proxyClientCert is the front-proxy client certificate presented to
	// extension API servers (aggregator.go); nil: none.
	proxyClientCert *tls.Certificate
	// aggTransports are the extension API servers' transports.
	aggTransports apiServiceTransports
	// inflight, mutating and watches bound the read-only requests, the
	// mutating requests and the watches being served (429 beyond).
	inflight, mutating, watches chan struct{}
	// watchFlows and mutatingFlows are each user's seats inside watches
	// and mutating (fairness.go).
	watchFlows, mutatingFlows *flows
	// crs is the custom resources' surface of the catalog's last
	// generation (customresources.go).
	crs atomic.Pointer[crSurface]

	mu     sync.Mutex
	srv    *http.Server
	addr   net.Addr
	closed bool
}

// patchLimits are the bounds of applying one patch.
func (s *Server) patchLimits() patchLimits {
	return patchLimits{maxCopyBytes: s.cfg.JSONPatchMaxCopyBytes, maxBytes: s.cfg.MaxBodyBytes}
}

// New returns a server; it reads the certificates and keys now, so that a
// bad file fails the start of the stage rather than the first request.
func New(cfg Config, backend Backend, store *objects.Store, log *slog.Logger) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.Default()
	}
	cert, err := tls.LoadX509KeyPair(cfg.CertFile, cfg.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("apiserver: serving certificate: %w", err)
	}
	tc := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12, NextProtos: []string{"h2", "http/1.1"}}
	if cfg.ClientCAFile != "" {
		b, err := os.ReadFile(cfg.ClientCAFile)
		if err != nil {
			return nil, fmt.Errorf("apiserver: client CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(b) {
			return nil, fmt.Errorf("%w: %q holds no PEM certificate", ErrInvalidConfig, cfg.ClientCAFile)
		}
		tc.ClientCAs = pool // named to clients as the acceptable issuers
		// A certificate is optional (tokens work too) and is verified by
		// authenticate, not by the handshake: a bad one gets a 401 whose
		// reason is logged, as kube-apiserver does.
		tc.ClientAuth = tls.RequestClientCert
	}
	s := &Server{cfg: cfg, backend: backend, store: store, log: log, tls: tc, cache: newKubeCache(cfg.CacheObjects),
		snapshots: newSnapshots(cfg.MaxListSnapshots, cfg.ListSnapshotTTL),
		clientCAs: tc.ClientCAs, certs: newCertCache(certCacheSize), now: time.Now, inflight: make(chan struct{}, cfg.MaxInFlight),
		mutating: make(chan struct{}, cfg.MaxMutatingInFlight), watches: make(chan struct{}, cfg.MaxWatches),
		watchFlows: newFlows(seats(cfg.MaxWatchesPerUser, cfg.MaxWatches)), mutatingFlows: newFlows(seats(cfg.MaxMutatingPerUser, cfg.MaxMutatingInFlight)),
		proxyTransport: newProxyTransport(cfg.ProxyDialContext)}
	if cfg.ProxyClientCertFile != "" {
		pc, err := tls.LoadX509KeyPair(cfg.ProxyClientCertFile, cfg.ProxyClientKeyFile)
		if err != nil {
			return nil, fmt.Errorf("apiserver: front-proxy client certificate: %w", err)
		}
		s.proxyClientCert = &pc
	}
	if cfg.OIDC.IssuerURL != "" {
		if s.oidc, err = newOIDCVerifier(cfg.OIDC); err != nil {
			return nil, err
		}
	}
	s.handler = http.HandlerFunc(s.serveHTTP)
	return s, nil
}

// Handler returns the server's HTTP handler (authentication included; the
// TLS connection state must come from a listener using TLSConfig).
func (s *Server) Handler() http.Handler { return s.handler }

// TLSConfig returns the server's TLS configuration.
func (s *Server) TLSConfig() *tls.Config { return s.tls.Clone() }

// Listen opens the configured address with SO_REUSEPORT.
func Listen(ctx context.Context, addr string) (net.Listener, error) {
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1)
		}); err != nil {
			return err
		}
		return serr
	}}
	return lc.Listen(ctx, "tcp", addr)
}

// Run listens on Config.Addr and serves until ctx ends, then shuts down:
// it stops accepting, ends open watches and waits up to 5s for requests in
// flight.
func (s *Server) Run(ctx context.Context) error {
	l, err := Listen(ctx, s.cfg.Addr)
	if err != nil {
		return fmt.Errorf("apiserver: listen %q: %w", s.cfg.Addr, err)
	}
	return s.Serve(ctx, l)
}

// Serve serves on l (a plain TCP listener: Serve adds TLS) until ctx
// ends.
func (s *Server) Serve(ctx context.Context, l net.Listener) error {
	return s.serve(ctx, l, true)
}

// serveExtra serves on another listener l (PodListeners) until ctx ends;
// Addr still names the first.
func (s *Server) serveExtra(ctx context.Context, l net.Listener) error {
	return s.serve(ctx, l, false)
}

func (s *Server) serve(ctx context.Context, l net.Listener, primary bool) error {
	srv := &http.Server{
		Handler:           s.handler,
		TLSConfig:         s.tls,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       90 * time.Second,
		MaxHeaderBytes:    1 << 20,
		BaseContext:       func(net.Listener) context.Context { return ctx },
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		l.Close()
		return nil
	}
	if primary {
		s.srv, s.addr = srv, l.Addr()
	}
	s.mu.Unlock()
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		select {
		case <-ctx.Done():
		case <-done:
			return
		}
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	err := srv.ServeTLS(l, "", "")
	close(done)
	<-stopped
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Addr returns the address being served, once Serve runs (nil before).
func (s *Server) Addr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addr
}

// request is one parsed API request.
type request struct {
	user      *corev1.UserInfo
	res       *resource
	gv        string
	namespace string
	name      string
	sub       string
	verb      string
}

// limiter is the in-flight limit a request counts under, as
// kube-apiserver's max-in-flight filter classifies them: watches
// (long-running: a GET whose watch parameter is true as queryBool reads
// it, whatever else it asks)
// and followed logs have their own limit, mutating requests theirs, the rest MaxInFlight. A
// watch parameter on any other method changes nothing.
func (s *Server) limiter(r *http.Request) chan struct{} {
	if isStream(r.URL.Path) { // exec and attach are long-running too
		return s.watches
	}
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		if queryBool(r.URL.Query(), "watch") {
			return s.watches
		}
		if strings.HasSuffix(r.URL.Path, "/log") && queryBool(r.URL.Query(), "follow") {
			return s.watches // a followed log is long-running too
		}
		return s.inflight
	case http.MethodOptions:
		return s.inflight
	}
	return s.mutating
}

func (s *Server) serveHTTP(w http.ResponseWriter, r *http.Request) {
	slots := s.limiter(r)
	select {
	case slots <- struct{}{}:
		defer func() { <-slots }()
	default:
		w.Header().Set("Retry-After", "1")
		writeStatus(w, &corev1.Status{Status: "Failure", Code: 429, Reason: "TooManyRequests",
			Message: "Too many requests, please try again later."})
		return
	}
	user, why := s.authenticate(r)
	if user == nil {
		s.log.Info("authentication failed", "remote", r.RemoteAddr, "path", r.URL.Path, "reason", why)
		writeStatus(w, auth.Unauthorized())
		return
	}
	user, st := s.impersonate(r, user)
	if st != nil {
		writeStatus(w, st)
		return
	}
	if f := s.userFlows(slots); f != nil {
		release, ok := f.acquire(user)
		if !ok {
			tooManyForUser(w, user, f.seats)
			return
		}
		defer release()
	}
	s.route(w, r, user)
}

// impersonate honours Impersonate-User and Impersonate-Group (kubectl
// --as, --as-group) when RBAC allows the caller to impersonate them.
func (s *Server) impersonate(r *http.Request, user *corev1.UserInfo) (*corev1.UserInfo, *corev1.Status) {
	as := r.Header.Get("Impersonate-User")
	groups := r.Header.Values("Impersonate-Group")
	if as == "" {
		if len(groups) > 0 {
			return nil, badRequest("requested Impersonate-Group without Impersonate-User")
		}
		return user, nil
	}
	check := func(resource, name string) *corev1.Status {
		a := auth.Attributes{User: user, Verb: "impersonate", Resource: resource, Name: name}
		if !s.backend.Authorize(a).Allowed {
			return auth.Forbidden(a, "")
		}
		return nil
	}
	resource := "users"
	if strings.HasPrefix(as, auth.ServiceAccountUsernamePrefix) {
		resource = "serviceaccounts"
	}
	if st := check(resource, as); st != nil {
		return nil, st
	}
	out := &corev1.UserInfo{Username: as}
	for _, g := range groups {
		if st := check("groups", g); st != nil {
			return nil, st
		}
		out.Groups = append(out.Groups, g)
	}
	if as != UserAnonymous {
		out.Groups = append(out.Groups, auth.GroupAuthenticated)
	}
	return out, nil
}

func (s *Server) route(w http.ResponseWriter, r *http.Request, user *corev1.UserInfo) {
	if pr, ok := parseProxy(r.URL.Path); ok { // pods/proxy, services/proxy: proxy.go
		s.serveProxy(w, r, user, pr)
		return
	}
	path := strings.TrimSuffix(r.URL.Path, "/")
	switch {
	case path == "/version":
		writeJSON(w, http.StatusOK, versionInfo)
		return
	case path == "/healthz" || path == "/livez" || path == "/readyz":
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write([]byte("ok"))
		return
	case (path == "/api" || path == "/apis") && wantsAggregated(r):
		if path == "/apis" {
			s.syncCustomResources(r.Context())
		}
		s.writeAggregated(w, r.Context(), path == "/api")
		return
	case path == "/api":
		writeJSON(w, http.StatusOK, apiVersions(r))
		return
	case path == "/apis":
		s.syncCustomResources(r.Context())
		l := s.apiGroupList()
		groups, byGroup := s.remoteAPIServices(r.Context()) // aggregator.go
		for _, g := range groups {
			l.Groups = append(l.Groups, remoteGroup(g, byGroup[g]))
		}
		writeJSON(w, http.StatusOK, l)
		return
	}
	if g, ok := strings.CutPrefix(path, "/apis/"); ok && g != "" {
		// An extension API server's group version: aggregator.go.
		if _, builtin := groupVersions[strings.Split(g, "/")[0]]; !builtin && strings.Count(g, "/") >= 1 && !s.servesCustom(g) {
			gv := strings.Join(strings.SplitN(g, "/", 3)[:2], "/")
			as, err := s.remoteAPIService(r.Context(), gv, true)
			if err != nil {
				writeStatus(w, storeStatus(err, lookupResource("apiregistration.k8s.io/v1", "apiservices"), gv))
				return
			}
			if as != nil {
				s.serveAggregated(w, r, user, as)
				return
			}
		} else if !builtin && r.Method == http.MethodGet {
			if _, custom := s.customGroup(r.Context(), g); !custom {
				groups, byGroup := s.remoteAPIServices(r.Context())
				if slices.Contains(groups, g) {
					doc := remoteGroup(g, byGroup[g])
					writeJSON(w, http.StatusOK, &doc)
					return
				}
			}
		}
	}
	if s.serveOpenAPI(w, r, path) {
		return
	}
	if s.serveOIDC(w, r, path) { // oidc.go
		return
	}
	parts := strings.Split(strings.TrimPrefix(path, "/"), "/")
	var gv string
	var rest []string
	switch {
	case len(parts) >= 2 && parts[0] == "api" && parts[1] == "v1":
		gv, rest = "v1", parts[2:]
	case len(parts) == 2 && parts[0] == "apis":
		if _, ok := resources[apiGroup(parts[1]).PreferredVersion.GroupVersion]; ok {
			g := apiGroup(parts[1])
			writeJSON(w, http.StatusOK, &g)
			return
		}
		if g, ok := s.customGroup(r.Context(), parts[1]); ok {
			writeJSON(w, http.StatusOK, &g)
			return
		}
	case len(parts) >= 3 && parts[0] == "apis":
		gv, rest = parts[1]+"/"+parts[2], parts[3:]
	}
	_, builtin := resources[gv]
	if len(rest) == 0 {
		var l *metav1.APIResourceList
		switch {
		case builtin:
			l = apiResourceList(gv)
		case gv != "":
			l = s.customResourceList(r.Context(), gv)
		}
		if l == nil {
			writeStatus(w, notFoundPath(r.URL.Path))
			return
		}
		if r.Method != http.MethodGet {
			writeStatus(w, methodNotAllowed(r.Method, r.URL.Path))
			return
		}
		writeJSON(w, http.StatusOK, l)
		return
	}
	req := &request{user: user, gv: gv}
	// /api/v1/namespaces/NAME/{status,finalize} are the namespace's own
	// subresources, not a namespaced resource.
	nsSub := gv == "v1" && len(rest) == 3 && rest[0] == "namespaces" && (rest[2] == "status" || rest[2] == "finalize")
	if rest[0] == "namespaces" && len(rest) >= 3 && !nsSub {
		req.namespace, rest = rest[1], rest[2:]
	}
	if builtin {
		req.res = lookupResource(gv, rest[0])
	}
	if req.res == nil && gv != "" && len(rest) <= 3 {
		req.res = s.lookupCustomResource(r.Context(), gv, rest[0])
	}
	if req.res == nil || len(rest) > 3 {
		writeStatus(w, notFoundPath(r.URL.Path))
		return
	}
	if len(rest) >= 2 {
		req.name = rest[1]
	}
	if len(rest) == 3 {
		req.sub = rest[2]
	}
	if req.res.namespaced && req.namespace == "" && req.name != "" {
		writeStatus(w, notFoundPath(r.URL.Path))
		return
	}
	if !req.res.namespaced && req.namespace != "" {
		writeStatus(w, notFoundPath(r.URL.Path))
		return
	}
	s.serveResource(w, r, req)
}
