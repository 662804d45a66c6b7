package console

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/podflow/podflow/services/auth"
)

//go:embed static
var static embed.FS

// CookieName is the cookie holding the console session's id (session.go).
const CookieName = "podflow_console"

// Checker reports whether a bearer token may use the console.
type Checker func(token string) bool

// TokenFile accepts the tokens of the Kubernetes API's static token file
// (kube-apiserver's --token-auth-file format), re-read when it changes.
func TokenFile(path string) Checker {
	var mu sync.Mutex
	var mod time.Time
	var a *auth.TokenAuthenticator
	return func(token string) bool {
		if token == "" {
			return false
		}
		mu.Lock()
		defer mu.Unlock()
		fi, err := os.Stat(path)
		if err != nil {
			return false
		}
		if a == nil || !fi.ModTime().Equal(mod) {
			f, err := os.Open(path)
			if err != nil {
				return false
			}
			toks, err := auth.ParseTokenFile(f)
			f.Close()
			if err != nil {
				return false
			}
			cfg := auth.DefaultAuthenticatorConfig()
			cfg.ServiceAccountTokens = false
			if a, err = auth.NewTokenAuthenticator(cfg, toks); err != nil {
				return false
			}
			mod = fi.ModTime()
		}
		u, st := a.AuthenticateToken(token)
		return st == nil && u != nil
	}
}

// Server is the console's HTTP handler.
type Server struct {
	Hub   *Hub
	Src   Source
	Allow Checker
	// SessionTTL is how long a login lasts (default DefaultSessionTTL).
	SessionTTL time.Duration
	// Links are the one-time login links it accepts (nil: none).
	Links *LoginLinks

	once     sync.Once
	sessions *sessions
}

// store is the server's session store (made on first use).
func (s *Server) store() *sessions {
	s.once.Do(func() { s.sessions = newSessions(s.SessionTTL) })
	return s.sessions
}

// Handler routes the console: the page, the login form, and the API
// (/api/events: server-sent snapshots; /api/journey: one pod's waterfall;
// /api/pods: a page of pods; /api/timeline: the stream's history).
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	files, _ := fs.Sub(static, "static")
	mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(files)))
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		page := "index.html"
		if !s.authed(r) {
			page = "login.html"
		}
		b, _ := fs.ReadFile(files, page)
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		w.Write(b)
	})
	mux.HandleFunc("POST /login", s.login)
	mux.HandleFunc("GET /login", s.loginLink)
	mux.HandleFunc("POST /logout", func(w http.ResponseWriter, r *http.Request) {
		if c, err := r.Cookie(CookieName); err == nil {
			s.store().revoke(c.Value) // the session ends here, not only in this browser
		}
		http.SetCookie(w, &http.Cookie{Name: CookieName, Path: "/", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode})
		http.Redirect(w, r, "/", http.StatusSeeOther)
	})
	mux.Handle("GET /api/events", s.guard(http.HandlerFunc(s.events)))
	mux.Handle("GET /api/journey", s.guard(http.HandlerFunc(s.journey)))
	mux.Handle("GET /api/pods", s.guard(http.HandlerFunc(s.pods)))
	mux.Handle("GET /api/timeline", s.guard(http.HandlerFunc(s.timeline)))
	return loopbackOnly(securityHeaders(mux))
}

// token is the request's bearer token: the Authorization header, else the
// token of the live session its cookie names.
func (s *Server) token(r *http.Request) string {
	if t, ok := auth.ParseBearer(r.Header.Get("Authorization")); ok {
		return t
	}
	if c, err := r.Cookie(CookieName); err == nil {
		return s.store().token(c.Value)
	}
	return ""
}

// authed: the token (given, or the session's) is still in the token file.
func (s *Server) authed(r *http.Request) bool { return s.Allow != nil && s.Allow(s.token(r)) }

func (s *Server) guard(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.authed(r) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="podflow console"`)
			http.Error(w, "Unauthorized: a bearer token of the Kubernetes API's token file is required", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}

func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	if o := r.Header.Get("Origin"); o != "" && o != "http://"+r.Host {
		http.Error(w, "Forbidden: cross-origin login", http.StatusForbidden)
		return
	}
	tok := r.PostFormValue("token")
	if !s.Allow(tok) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.WriteHeader(http.StatusUnauthorized)
		b, _ := fs.ReadFile(static, "static/login.html")
		w.Write(b)
		return
	}
	id, err := s.store().open(tok)
	if err != nil {
		http.Error(w, "login: "+err.Error(), http.StatusInternalServerError)
		return
	}
	http.SetCookie(w, &http.Cookie{Name: CookieName, Value: id, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode,
		MaxAge: int(s.store().ttl / time.Second)})
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

// loginLink opens a session from a one-time link (GET /login?code=…):
// the code is spent whatever happens, and the browser is sent on to the
// page without it in the address.
func (s *Server) loginLink(w http.ResponseWriter, r *http.Request) {
	tok := s.Links.use(r.URL.Query().Get("code"))
	if tok == "" || s.Allow == nil || !s.Allow(tok) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(http.StatusUnauthorized)
		b, _ := fs.ReadFile(static, "static/login.html")
		w.Write(b)
		return
	}
	id, err := s.store().open(tok)
	if err != nil {
		http.Error(w, "login: "+err.Error(), http.StatusInternalServerError)
		return
	}
	http.SetCookie(w, &http.Cookie{Name: CookieName, Value: id, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode,
		MaxAge: int(s.store().ttl / time.Second)})
	// A page of the console's own moves on to it: the link came from
	// another site (a terminal), and a SameSite=Strict cookie is sent on
	// a same-site navigation only, not on a redirect of that one.
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	fmt.Fprint(w, `<!doctype html><meta http-equiv="refresh" content="0;url=/"><title>podflow console</title><a href="/">Open the console</a>`)
}

// events streams snapshots as server-sent events until the viewer leaves.
func (s *Server) events(w http.ResponseWriter, r *http.Request) {
	fl, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	fmt.Fprint(w, "retry: 1000\n\n")
	fl.Flush()
	ch, cancel := s.Hub.Subscribe()
	defer cancel()
	keep := time.NewTicker(15 * time.Second)
	defer keep.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case b, ok := <-ch:
			if !ok {
				return // too far behind: the browser reconnects for a fresh snapshot
			}
			if _, err := w.Write(b); err != nil {
				return
			}
			fl.Flush()
		case <-keep.C:
			fmt.Fprint(w, ": keep-alive\n\n")
			fl.Flush()
		}
	}
}

// pods answers a page of the pods a query selects (/api/pods?q=&namespace=
// &stage=&phase=&reason=&node=&stuck=1&offset=&limit=).
func (s *Server) pods(w http.ResponseWriter, r *http.Request) {
	v := r.URL.Query()
	q := PodQuery{Q: v.Get("q"), Namespace: v.Get("namespace"), Stage: v.Get("stage"), Phase: v.Get("phase"),
		Reason: v.Get("reason"), Node: v.Get("node"), Stuck: v.Get("stuck") == "1" || v.Get("stuck") == "true"}
	var err error
	for _, f := range []struct {
		name string
		into *int
	}{{"offset", &q.Offset}, {"limit", &q.Limit}} {
		if s := v.Get(f.name); s != "" {
			if *f.into, err = strconv.Atoi(s); err != nil || *f.into < 0 {
				http.Error(w, fmt.Sprintf("%s must be a non-negative integer, got %q", f.name, s), http.StatusBadRequest)
				return
			}
		}
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	json.NewEncoder(w).Encode(s.Hub.Pods(q))
}

// HistorySource is a Source that reads the events stream's history
// (BusSource): the timeline over a range.
type HistorySource interface {
	History(ctx context.Context, q HistoryQuery) (*History, error)
}

// timeline answers the events stream's history over a range
// (/api/timeline?range=15m or from=&to=, step=): ParseHistoryQuery.
func (s *Server) timeline(w http.ResponseWriter, r *http.Request) {
	hs, ok := s.Src.(HistorySource)
	if !ok {
		http.Error(w, "this console reads no stream history", http.StatusNotImplemented)
		return
	}
	q, err := ParseHistoryQuery(r.URL.Query().Get, time.Now())
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), DefaultHistoryMaxWait+5*time.Second)
	defer cancel()
	h, err := hs.History(ctx, q)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	json.NewEncoder(w).Encode(h)
}

func (s *Server) journey(w http.ResponseWriter, r *http.Request) {
	ns, name := r.URL.Query().Get("namespace"), r.URL.Query().Get("name")
	if ns == "" || name == "" {
		http.Error(w, "namespace and name are required", http.StatusBadRequest)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	j, err := s.Src.Journey(ctx, ns, name)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	json.NewEncoder(w).Encode(j)
}

func securityHeaders(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'")
		hd.Set("X-Content-Type-Options", "nosniff")
		hd.Set("Referrer-Policy", "same-origin") // no-referrer would make the login form's Origin "null"
		h.ServeHTTP(w, r)
	})
}

// loopbackOnly refuses requests whose Host is not a loopback name, so a
// page of another site cannot reach the console by DNS rebinding.
func loopbackOnly(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, _, err := net.SplitHostPort(r.Host)
		if err != nil {
			host = r.Host
		}
		if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
			http.Error(w, "Forbidden: the console answers on loopback names only", http.StatusForbidden)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// ErrNotLoopback is returned by Listen for an address off loopback.
var ErrNotLoopback = errors.New("console: the listen address must be on loopback")

// Listen listens on addr, which must be a loopback address.
func Listen(addr string) (net.Listener, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return nil, fmt.Errorf("%w: %q", ErrNotLoopback, addr)
	}
	return net.Listen("tcp", addr)
}

// Serve runs a hub over src and serves the console on l until ctx is
// done; both stop then. links, when given, are the one-time login links
// it accepts.
func Serve(ctx context.Context, l net.Listener, src Source, allow Checker, links ...*LoginLinks) error {
	hub := NewHub(src, time.Second)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if st, ok := src.(interface{ Start(context.Context) }); ok {
		st.Start(ctx)
	}
	done := make(chan struct{})
	go func() { hub.Run(ctx); close(done) }()
	s := &Server{Hub: hub, Src: src, Allow: allow}
	if len(links) > 0 {
		s.Links = links[0]
	}
	srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second,
		BaseContext: func(net.Listener) context.Context { return ctx }}
	go func() {
		<-ctx.Done()
		sctx, c := context.WithTimeout(context.Background(), 2*time.Second)
		defer c()
		_ = srv.Shutdown(sctx)
	}()
	err := srv.Serve(l)
	cancel()
	<-done
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}
