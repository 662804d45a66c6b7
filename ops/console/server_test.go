package console

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/podflow/podflow/ops/trace"
)

type fakeSource struct{ snaps atomic.Int64 }

func (f *fakeSource) Snapshot(context.Context) *Snapshot {
	f.snaps.Add(1)
	return &Snapshot{Time: time.Now(), Stages: []Stage{{Name: "api"}, {Name: "scheduler", Pending: 500, BackingUp: true}},
		Pods: []Pod{{Namespace: "default", Name: "web", Phase: "Pending", Stage: "scheduler", Reason: "FailedScheduling", Stuck: true}}}
}

func (f *fakeSource) Journey(_ context.Context, ns, name string) (*Journey, error) {
	return &Journey{Timeline: &trace.Timeline{Namespace: ns, Name: name, Where: "scheduler"}}, nil
}

const testToken = "0123456789abcdef0123456789abcdef"

func newTestServer(t *testing.T) (*httptest.Server, *Hub, *fakeSource) {
	t.Helper()
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens.csv")
	if err := os.WriteFile(tokens, []byte(testToken+",admin,admin,\"system:masters\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	src := &fakeSource{}
	hub := NewHub(src, time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { hub.Run(ctx); close(done) }()
	srv := httptest.NewServer((&Server{Hub: hub, Src: src, Allow: TokenFile(tokens)}).Handler())
	t.Cleanup(func() { srv.Close(); cancel(); <-done })
	return srv, hub, src
}

func TestAuth(t *testing.T) {
	srv, _, _ := newTestServer(t)
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, tc := range []struct {
		name, path, auth, cookie string
		want                     int
	}{
		{"events without token", "/api/events", "", "", http.StatusUnauthorized},
		{"journey without token", "/api/journey?namespace=a&name=b", "", "", http.StatusUnauthorized},
		{"events with a wrong token", "/api/events", "Bearer nope-nope-nope-nope", "", http.StatusUnauthorized},
		{"journey with the bearer token", "/api/journey?namespace=a&name=b", "Bearer " + testToken, "", http.StatusOK},
		{"a cookie holding the token itself", "/api/journey?namespace=a&name=b", "", testToken, http.StatusUnauthorized},
		{"journey without a name", "/api/journey", "Bearer " + testToken, "", http.StatusBadRequest},
		{"static files need none", "/static/app.js", "", "", http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodGet, srv.URL+tc.path, nil)
			if tc.auth != "" {
				req.Header.Set("Authorization", tc.auth)
			}
			if tc.cookie != "" {
				req.AddCookie(&http.Cookie{Name: CookieName, Value: tc.cookie})
			}
			resp, err := noRedirect.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Fatalf("GET %s: %d, want %d", tc.path, resp.StatusCode, tc.want)
			}
		})
	}
	t.Run("the page without a token is the login form", func(t *testing.T) {
		resp, err := http.Get(srv.URL + "/")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		var body strings.Builder
		for sc.Scan() {
			body.WriteString(sc.Text())
		}
		if !strings.Contains(body.String(), `action="/login"`) {
			t.Fatalf("no login form: %s", body.String())
		}
	})
	t.Run("login sets an HttpOnly SameSite=Strict cookie", func(t *testing.T) {
		resp, err := noRedirect.PostForm(srv.URL+"/login", url.Values{"token": {testToken}})
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusSeeOther {
			t.Fatalf("login: %d", resp.StatusCode)
		}
		c := resp.Cookies()
		if len(c) != 1 || c[0].Name != CookieName || !c[0].HttpOnly || c[0].SameSite != http.SameSiteStrictMode {
			t.Fatalf("cookie: %+v", c)
		}
	})
	t.Run("a wrong token does not log in", func(t *testing.T) {
		resp, err := noRedirect.PostForm(srv.URL+"/login", url.Values{"token": {"wrong-wrong-wrong-wrong"}})
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized || len(resp.Cookies()) != 0 {
			t.Fatalf("login with a wrong token: %d %v", resp.StatusCode, resp.Cookies())
		}
	})
	t.Run("a login from another origin is refused", func(t *testing.T) {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/login", strings.NewReader(url.Values{"token": {testToken}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Origin", "http://evil.example")
		resp, err := noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden || len(resp.Cookies()) != 0 {
			t.Fatalf("cross-origin login: %d %v", resp.StatusCode, resp.Cookies())
		}
	})
	t.Run("a non-loopback Host is refused", func(t *testing.T) {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/static/app.js", nil)
		req.Host = "evil.example:80"
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Fatalf("Host evil.example: %d", resp.StatusCode)
		}
	})
}

// readSnapshot reads the first snapshot of an event stream.
func readSnapshot(t *testing.T, srvURL string) Snapshot {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, srvURL+"/api/events", nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := http.DefaultClient.Do(req.WithContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type %q", ct)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	event := ""
	for sc.Scan() {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, "event: "); ok {
			event = v
		}
		if v, ok := strings.CutPrefix(line, "data: "); ok && event == "snapshot" {
			var s Snapshot
			if err := json.Unmarshal([]byte(v), &s); err != nil {
				t.Fatal(err)
			}
			return s
		}
	}
	t.Fatalf("no snapshot: %v", sc.Err())
	return Snapshot{}
}

func TestEventsDeliversSnapshots(t *testing.T) {
	srv, hub, src := newTestServer(t)
	if n := src.snaps.Load(); n != 0 {
		t.Fatalf("the hub polled %d times with nobody watching", n)
	}
	s := readSnapshot(t, srv.URL)
	if len(s.Stages) != 2 || s.Stages[1].Name != "scheduler" || !s.Stages[1].BackingUp {
		t.Fatalf("stages: %+v", s.Stages)
	}
	if len(s.Pods) != 0 || s.Summary == nil || s.Summary.Total != 1 || s.Summary.Stuck != 1 || s.Summary.ByReason["FailedScheduling"] != 1 {
		t.Fatalf("pods in the snapshot %+v, summary %+v: want none, and one stuck counted", s.Pods, s.Summary)
	}
	req, _ := http.NewRequest("GET", srv.URL+"/api/pods?stage=scheduler&stuck=1", nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var page PodPage
	err = json.NewDecoder(resp.Body).Decode(&page)
	resp.Body.Close()
	if err != nil || page.Total != 1 || page.Pods[0].Name != "web" {
		t.Fatalf("/api/pods: %+v, %v", page, err)
	}
	t.Run("viewers share the poll", func(t *testing.T) {
		before := hub.Polls()
		start := time.Now()
		done := make(chan struct{})
		for range 5 {
			go func() { readSnapshot(t, srv.URL); done <- struct{}{} }()
		}
		for range 5 {
			<-done
		}
		secs := int(time.Since(start)/time.Second) + 2
		if got := hub.Polls() - before; got > secs {
			t.Fatalf("5 viewers over %ds caused %d polls, want at most one a second", secs-2, got)
		}
	})
}

func TestServeStops(t *testing.T) {
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens.csv")
	if err := os.WriteFile(tokens, []byte(testToken+",admin,admin,\"system:masters\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	l, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, l, &fakeSource{}, TokenFile(tokens)) }()
	readSnapshot(t, "http://"+l.Addr().String()) // a viewer connected and served
	// A viewer still connected when the console stops.
	req, _ := http.NewRequest(http.MethodGet, "http://"+l.Addr().String()+"/api/events", nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Serve: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return after its context ended")
	}
}

func TestListenLoopbackOnly(t *testing.T) {
	for _, tc := range []struct {
		addr string
		ok   bool
	}{{"127.0.0.1:0", true}, {"localhost:0", true}, {"0.0.0.0:0", false}, {":0", false}} {
		t.Run(tc.addr, func(t *testing.T) {
			l, err := Listen(tc.addr)
			if l != nil {
				l.Close()
			}
			if (err == nil) != tc.ok {
				t.Fatalf("Listen(%q): %v", tc.addr, err)
			}
		})
	}
}

// TestSessions: the login cookie is a server-side session's id, never the
// token; it works until logout revokes it (the old cookie replayed is
// refused), until it expires, or until its token leaves the token file.
func TestSessions(t *testing.T) {
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens.csv")
	if err := os.WriteFile(tokens, []byte(testToken+",admin,admin,\"system:masters\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	src := &fakeSource{}
	s := &Server{Hub: NewHub(src, time.Second), Src: src, Allow: TokenFile(tokens), SessionTTL: time.Hour}
	now := time.Now()
	var mu sync.Mutex
	s.store().now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	login := func(t *testing.T) *http.Cookie {
		t.Helper()
		resp, err := noRedirect.PostForm(srv.URL+"/login", url.Values{"token": {testToken}})
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		c := resp.Cookies()
		if resp.StatusCode != http.StatusSeeOther || len(c) != 1 {
			t.Fatalf("login: %d %v", resp.StatusCode, c)
		}
		if strings.Contains(c[0].Value, testToken) || c[0].Value == "" || c[0].MaxAge != 3600 {
			t.Fatalf("the cookie %+v holds the token, or no session id, or not the session's lifetime", c[0])
		}
		return c[0]
	}
	get := func(t *testing.T, c *http.Cookie) int {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/api/journey?namespace=a&name=b", nil)
		req.AddCookie(c)
		resp, err := noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	t.Run("logout revokes the session", func(t *testing.T) {
		c := login(t)
		if code := get(t, c); code != http.StatusOK {
			t.Fatalf("with the session: %d", code)
		}
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/logout", nil)
		req.AddCookie(c)
		resp, err := noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if code := get(t, c); code != http.StatusUnauthorized {
			t.Fatalf("the old cookie after logout: %d, want 401", code)
		}
	})
	t.Run("an expired session is refused", func(t *testing.T) {
		c := login(t)
		mu.Lock()
		now = now.Add(time.Hour)
		mu.Unlock()
		if code := get(t, c); code != http.StatusUnauthorized {
			t.Fatalf("an hour later: %d, want 401", code)
		}
	})
	t.Run("a session ends with its token", func(t *testing.T) {
		c := login(t)
		time.Sleep(10 * time.Millisecond) // another modification time
		if err := os.WriteFile(tokens, []byte("another-token-0123456789,bob,bob,\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if code := get(t, c); code != http.StatusUnauthorized {
			t.Fatalf("after its token left the file: %d, want 401", code)
		}
	})
	t.Run("a made-up session id is refused", func(t *testing.T) {
		if code := get(t, &http.Cookie{Name: CookieName, Value: "made-up"}); code != http.StatusUnauthorized {
			t.Fatalf("%d, want 401", code)
		}
	})
}

// TestLoginLink: a one-time link opens a session once; the same link
// again, an unknown code, or a link whose token left the token file,
// does not.
func TestLoginLink(t *testing.T) {
	links := NewLoginLinks(time.Minute)
	allowed := map[string]bool{"good": true}
	s := &Server{Allow: func(tok string) bool { return allowed[tok] }, Links: links}
	h := s.Handler()
	code, err := links.New("good")
	if err != nil {
		t.Fatal(err)
	}
	get := func(path string, cookie *http.Cookie) *httptest.ResponseRecorder {
		r := httptest.NewRequest("GET", path, nil)
		r.Host = "127.0.0.1:8089"
		if cookie != nil {
			r.AddCookie(cookie)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	w := get("/login?code="+code, nil)
	cookies := w.Result().Cookies()
	if w.Code != http.StatusOK || len(cookies) != 1 || cookies[0].Name != CookieName || cookies[0].SameSite != http.SameSiteStrictMode || strings.Contains(cookies[0].Value, code) {
		t.Fatalf("first use: %d, cookies %v", w.Code, cookies)
	}
	if page := get("/", cookies[0]); !strings.Contains(page.Body.String(), "app.js") {
		t.Fatalf("the session does not open the console: %s", page.Body.String())
	}
	if w := get("/login?code="+code, nil); w.Code != http.StatusUnauthorized || len(w.Result().Cookies()) != 0 {
		t.Fatalf("second use: %d", w.Code)
	}
	if w := get("/login?code=nope", nil); w.Code != http.StatusUnauthorized {
		t.Fatalf("unknown code: %d", w.Code)
	}
	code, _ = links.New("revoked")
	if w := get("/login?code="+code, nil); w.Code != http.StatusUnauthorized {
		t.Fatalf("a token no longer in the token file: %d", w.Code)
	}
}
