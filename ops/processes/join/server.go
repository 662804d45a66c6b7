package join

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/podflow/podflow/services/apiserver/pki"
	"github.com/podflow/podflow/services/objects"
)

// Paths of the join endpoint.
const (
	PathCACerts = "/cacerts"
	PathJoin    = "/v1/join"
)

// DefaultPort is the join endpoint's port (rke2's supervisor port).
const DefaultPort = 9345

// maxRequestBytes bounds a join request's body.
const maxRequestBytes = 256 << 10

// Request is what a joiner sends.
type Request struct {
	// Name is the host's name: its node's, its store replica's and NATS
	// server's (a DNS-1123 subdomain).
	Name string `json:"name"`
	// Advertise is the address the other hosts reach it at (an IP).
	Advertise string `json:"advertise"`
	// Agent: the host runs a node agent only.
	Agent bool `json:"agent,omitempty"`
	// Simulated: its node agent is a simulated cluster (testing), whose
	// bus identity may act for any node (SimulatedKind).
	Simulated bool `json:"simulated,omitempty"`
	// CSRs are the certificate requests, PEM, by kind (Kinds).
	CSRs map[string]string `json:"csrs"`
}

// Response is what a joiner gets.
type Response struct {
	CA    string            `json:"ca"`    // the cluster CA's certificate, PEM
	Certs map[string]string `json:"certs"` // the certificates, PEM, by kind
	Bundle
}

// Bundle is what Config.Admit hands a joiner besides its certificates.
type Bundle struct {
	// Files are files of the joiner's data directory (relative path →
	// content, written 0600): a server's share of the cluster's secrets.
	Files map[string][]byte `json:"files,omitempty"`
	// Cluster is what the joiner needs to know of the cluster (its
	// servers' addresses, its settings), for the caller to define.
	Cluster json.RawMessage `json:"cluster,omitempty"`
}

// Codes of a refused join.
const (
	CodeUnauthorized = "Unauthorized" // no valid token: 401
	CodeForbidden    = "Forbidden"    // the token or the host's kind does not allow it: 403
	CodeInvalid      = "Invalid"      // a malformed request: 400
	CodeConflict     = "Conflict"     // another host holds the name: 409
)

// Error is a refused join, as the server sends it and the joiner gets it.
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func (e *Error) Error() string { return "join refused (" + e.Code + "): " + e.Message }

// Is matches another *Error of the same code.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

// Sentinels to match refusals with errors.Is.
var (
	ErrUnauthorized = &Error{Code: CodeUnauthorized}
	ErrForbidden    = &Error{Code: CodeForbidden}
	ErrInvalid      = &Error{Code: CodeInvalid}
	ErrConflict     = &Error{Code: CodeConflict}
)

func refuse(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

func (e *Error) status() int {
	switch e.Code {
	case CodeUnauthorized:
		return http.StatusUnauthorized
	case CodeForbidden:
		return http.StatusForbidden
	case CodeConflict:
		return http.StatusConflict
	}
	return http.StatusBadRequest
}

// Config configures a join Server.
type Config struct {
	// CA issues the certificates; its certificate is served at /cacerts.
	CA *pki.CA
	// Tokens holds the join tokens (bootstrap token Secrets).
	Tokens *objects.Store
	// Admit is called for an authenticated, valid request before any
	// certificate is issued: it records the host (refusing a name another
	// host holds with a *Error CodeConflict) and returns what the joiner
	// gets besides its certificates. It may be called again for a host
	// that joins again (its own name and address).
	Admit func(ctx context.Context, r *Request) (Bundle, error)
	// Validity of the issued certificates. Default one year.
	Validity time.Duration
	// Now is the clock tokens expire by. Default time.Now.
	Now func() time.Time
	// Log records every join and refusal. Default: discarded.
	Log *slog.Logger
}

// Validate checks the Config.
func (c Config) Validate() error {
	if c.CA == nil || c.Tokens == nil || c.Admit == nil {
		return errors.New("join: Config needs CA, Tokens and Admit")
	}
	return nil
}

// Server serves the join endpoint. Joins are taken one at a time.
type Server struct {
	Config Config
	mu     sync.Mutex
}

// Handler serves GET /cacerts and POST /v1/join.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+PathCACerts, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/x-pem-file")
		_, _ = w.Write(s.Config.CA.CertPEM)
	})
	mux.HandleFunc("POST "+PathJoin, s.serveJoin)
	return mux
}

func (s *Server) serveJoin(w http.ResponseWriter, hr *http.Request) {
	resp, err := s.join(hr)
	log := s.Config.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	w.Header().Set("Content-Type", "application/json")
	if err != nil {
		var je *Error
		if !errors.As(err, &je) {
			je = &Error{Code: "Internal", Message: err.Error()}
			w.WriteHeader(http.StatusInternalServerError)
		} else {
			w.WriteHeader(je.status())
		}
		log.Warn("join refused", "remote", hr.RemoteAddr, "code", je.Code, "reason", je.Message)
		_ = json.NewEncoder(w).Encode(je)
		return
	}
	_ = json.NewEncoder(w).Encode(resp)
}

func (s *Server) join(hr *http.Request) (*Response, error) {
	if err := s.Config.Validate(); err != nil {
		return nil, err
	}
	now := time.Now
	if s.Config.Now != nil {
		now = s.Config.Now
	}
	bearer, ok := strings.CutPrefix(hr.Header.Get("Authorization"), "Bearer ")
	if !ok {
		return nil, refuse(CodeUnauthorized, "no join token (Authorization: Bearer <id>.<secret>)")
	}
	ctx := hr.Context()
	tok, err := checkToken(ctx, s.Config.Tokens, bearer, now())
	if err != nil {
		return nil, err
	}
	var r Request
	dec := json.NewDecoder(io.LimitReader(hr.Body, maxRequestBytes))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return nil, refuse(CodeInvalid, "decode the join request: %v", err)
	}
	if errs := validation.IsDNS1123Subdomain(r.Name); len(errs) > 0 {
		return nil, refuse(CodeInvalid, "name %q: %s", r.Name, strings.Join(errs, "; "))
	}
	if a, err := netip.ParseAddr(r.Advertise); err != nil || a.IsUnspecified() {
		return nil, refuse(CodeInvalid, "advertise address %q: want the IP address other hosts reach it at", r.Advertise)
	}
	switch {
	case !r.Agent && !hasUsage(tok, UsageServer):
		return nil, refuse(CodeForbidden, "join token %q may join node agents only, not a server (usage %s)", tok.GetMetadata().GetName(), UsageServer)
	case r.Agent && !hasUsage(tok, UsageServer) && !hasUsage(tok, UsageAgent):
		return nil, refuse(CodeForbidden, "join token %q allows no join", tok.GetMetadata().GetName())
	}
	allowed := Kinds(r.Name, r.Agent)
	if r.Simulated {
		allowed = append(allowed, SimulatedKind(r.Name))
	}
	for kind := range r.CSRs {
		if !slices.Contains(allowed, kind) {
			what := "a server"
			if r.Agent {
				what = "a node agent"
			}
			return nil, refuse(CodeForbidden, "%s named %q may not hold a %q certificate", what, r.Name, kind)
		}
	}
	type signed struct {
		kind string
		req  pki.Request
		pub  any
	}
	var todo []signed
	for kind, p := range r.CSRs {
		csr, err := parseCSR(p)
		if err != nil {
			return nil, refuse(CodeInvalid, "certificate request %q: %v", kind, err)
		}
		pr, err := request(kind, r.Name, r.Advertise)
		if err != nil {
			return nil, refuse(CodeInvalid, "%v", err)
		}
		pr.Validity = s.Config.Validity
		todo = append(todo, signed{kind, pr, csr.PublicKey})
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	b, err := s.Config.Admit(ctx, &r)
	if err != nil {
		return nil, err
	}
	out := &Response{CA: string(s.Config.CA.CertPEM), Certs: map[string]string{}, Bundle: b}
	for _, t := range todo {
		c, err := s.Config.CA.Sign(t.req, t.pub)
		if err != nil {
			return nil, fmt.Errorf("issue %q: %w", t.kind, err)
		}
		out.Certs[t.kind] = string(c)
	}
	if s.Config.Log != nil {
		s.Config.Log.Info("host joined", "name", r.Name, "advertise", r.Advertise, "agent", r.Agent, "token", tok.GetMetadata().GetName(), "certificates", len(out.Certs))
	}
	return out, nil
}
