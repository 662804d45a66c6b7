// Command httpserver is podflow's test HTTP server, packaged as the images
// podflow/http:1 and library/nginx:latest. It listens on every port of
// $PORTS (comma or space separated; default "8080,80" — a port that cannot
// be bound, such as 80 without privilege, is logged and skipped) and logs
// each request to stdout. It exits 0 on SIGTERM or SIGINT.
//
// Endpoints:
//
//	GET /                  hello: hostname, pod IP and the request
//	GET /healthz, /readyz  200 "ok", or 503 while readiness is failed
//	GET /livez             200 "ok", or 503 once liveness is failed
//	GET /fail-readiness    fail /healthz and /readyz;  /recover-readiness undoes it
//	GET /fail-liveness     fail /livez
//	GET /crash?code=N      answer, then exit with code N (default 1)
//	GET /alloc?mb=N        allocate and hold N more MiB (touched, so resident)
//	GET /env               the environment
//
// As a client (the pods of tests that ask the API server from inside):
//
//	httpserver fetch URL [-ca FILE] [-token-file FILE] [-expect CODE]
//
// GETs URL, verifying the server with the CA bundle FILE (PEM) and sending
// the bearer token read from -token-file, then prints "HTTP <code>" and
// the body; it exits 0 once it has an answer (1 when -expect names
// another status), 2 when it has none.
//
// Environment switches, read at start: FAIL_READINESS=1, FAIL_LIVENESS=1,
// READY_AFTER=<duration> (readiness fails until then), CRASH_AFTER=<duration>
// with CRASH_CODE=N (exit N after that long), ALLOC_MB=N (allocate at
// start), MESSAGE (a line added to /).
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

type server struct {
	notReady  atomic.Bool
	notLive   atomic.Bool
	readyAt   atomic.Int64 // unix nanoseconds before which readiness fails
	exit      func(code int)
	mu        sync.Mutex
	held      [][]byte
	heldBytes atomic.Int64
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "fetch" {
		os.Exit(fetch(os.Args[2:], os.Stdout, os.Stderr))
	}
	log.SetOutput(os.Stdout)
	log.SetFlags(log.LstdFlags | log.Lmicroseconds | log.LUTC)
	s := newServer(os.Getenv, func(code int) { os.Exit(code) })
	if err := s.run(os.Getenv("PORTS")); err != nil {
		log.Printf("httpserver: %v", err)
		os.Exit(1)
	}
}

func newServer(getenv func(string) string, exit func(int)) *server {
	s := &server{exit: exit}
	s.notReady.Store(getenv("FAIL_READINESS") == "1")
	s.notLive.Store(getenv("FAIL_LIVENESS") == "1")
	if d, err := time.ParseDuration(getenv("READY_AFTER")); err == nil {
		s.readyAt.Store(time.Now().Add(d).UnixNano())
	}
	if mb, err := strconv.Atoi(getenv("ALLOC_MB")); err == nil && mb > 0 {
		s.alloc(mb)
	}
	if d, err := time.ParseDuration(getenv("CRASH_AFTER")); err == nil {
		code, err := strconv.Atoi(getenv("CRASH_CODE"))
		if err != nil {
			code = 1
		}
		time.AfterFunc(d, func() {
			log.Printf("httpserver: CRASH_AFTER %s: exiting %d", d, code)
			s.exit(code)
		})
	}
	return s
}

func (s *server) run(ports string) error {
	if ports == "" {
		ports = "8080,80"
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	hs := &http.Server{Handler: s.handler(), ReadHeaderTimeout: 10 * time.Second}
	var wg sync.WaitGroup
	listening := 0
	for _, p := range strings.FieldsFunc(ports, func(r rune) bool { return r == ',' || r == ' ' }) {
		ln, err := net.Listen("tcp", ":"+p)
		if err != nil {
			log.Printf("httpserver: skip port %s: %v", p, err)
			continue
		}
		listening++
		log.Printf("httpserver: listening on %s", ln.Addr())
		wg.Go(func() {
			if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Printf("httpserver: serve %s: %v", ln.Addr(), err)
			}
		})
	}
	if listening == 0 {
		return fmt.Errorf("no port of %q could be bound", ports)
	}
	<-ctx.Done()
	log.Printf("httpserver: signalled, shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := hs.Shutdown(sctx)
	wg.Wait()
	return err
}

func (s *server) alloc(mb int) {
	b := make([]byte, mb<<20)
	for i := 0; i < len(b); i += 4096 {
		b[i] = 1 // touch every page so it is resident and charged
	}
	s.mu.Lock()
	s.held = append(s.held, b)
	s.mu.Unlock()
	s.heldBytes.Add(int64(len(b)))
}

func (s *server) ready() bool {
	return !s.notReady.Load() && time.Now().UnixNano() >= s.readyAt.Load()
}

// statusWriter records the status for the access log.
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) { w.code = code; w.ResponseWriter.WriteHeader(code) }

func (s *server) handler() http.Handler {
	mux := http.NewServeMux()
	health := func(ok func() bool) http.HandlerFunc {
		return func(w http.ResponseWriter, _ *http.Request) {
			if !ok() {
				http.Error(w, "failing", http.StatusServiceUnavailable)
				return
			}
			fmt.Fprintln(w, "ok")
		}
	}
	mux.HandleFunc("GET /healthz", health(s.ready))
	mux.HandleFunc("GET /readyz", health(s.ready))
	mux.HandleFunc("GET /livez", health(func() bool { return !s.notLive.Load() }))
	mux.HandleFunc("GET /fail-readiness", func(w http.ResponseWriter, _ *http.Request) {
		s.notReady.Store(true)
		fmt.Fprintln(w, "readiness failing")
	})
	mux.HandleFunc("GET /recover-readiness", func(w http.ResponseWriter, _ *http.Request) {
		s.notReady.Store(false)
		s.readyAt.Store(0)
		fmt.Fprintln(w, "readiness recovered")
	})
	mux.HandleFunc("GET /fail-liveness", func(w http.ResponseWriter, _ *http.Request) {
		s.notLive.Store(true)
		fmt.Fprintln(w, "liveness failing")
	})
	mux.HandleFunc("GET /crash", func(w http.ResponseWriter, r *http.Request) {
		code, err := strconv.Atoi(r.URL.Query().Get("code"))
		if err != nil {
			code = 1
		}
		fmt.Fprintf(w, "exiting %d\n", code)
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
		log.Printf("httpserver: /crash: exiting %d", code)
		go func() { time.Sleep(50 * time.Millisecond); s.exit(code) }()
	})
	mux.HandleFunc("GET /alloc", func(w http.ResponseWriter, r *http.Request) {
		mb, err := strconv.Atoi(r.URL.Query().Get("mb"))
		if err != nil || mb <= 0 {
			http.Error(w, "mb must be a positive integer", http.StatusBadRequest)
			return
		}
		s.alloc(mb)
		fmt.Fprintf(w, "holding %d MiB\n", s.heldBytes.Load()>>20)
	})
	mux.HandleFunc("GET /env", func(w http.ResponseWriter, _ *http.Request) {
		env := os.Environ()
		sort.Strings(env)
		fmt.Fprintln(w, strings.Join(env, "\n"))
	})
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		host, _ := os.Hostname()
		fmt.Fprintf(w, "podflow httpserver on %s (%s): %s %s from %s\n", host, r.Context().Value(http.LocalAddrContextKey), r.Method, r.URL, r.RemoteAddr)
		if m := os.Getenv("MESSAGE"); m != "" {
			fmt.Fprintln(w, m)
		}
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w, code: http.StatusOK}
		mux.ServeHTTP(sw, r)
		log.Printf("%s %s %s %d %s", r.RemoteAddr, r.Method, r.URL, sw.code, time.Since(start).Round(time.Microsecond))
	})
}
