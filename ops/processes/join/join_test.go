package join_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/ops/processes/join"
	"github.com/podflow/podflow/services/apiserver/pki"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/objects/objectstest"
	"github.com/podflow/podflow/services/pipeline"
)

// cluster is a join endpoint over TLS with a CA and a token store.
type cluster struct {
	ca       *pki.CA
	store    *objects.Store
	srv      *httptest.Server
	admitted []join.Request
	joins    atomic.Int32 // POST /v1/join received
	now      time.Time
}

func newCluster(t *testing.T) *cluster {
	t.Helper()
	ca, err := pki.NewCA("podflow-ca")
	if err != nil {
		t.Fatal(err)
	}
	c := &cluster{ca: ca, store: objects.FromKV(objectstest.New()), now: time.Now()}
	js := &join.Server{Config: join.Config{CA: ca, Tokens: c.store, Now: func() time.Time { return c.now },
		Admit: func(_ context.Context, r *join.Request) (join.Bundle, error) {
			if slices.ContainsFunc(c.admitted, func(o join.Request) bool { return o.Name == r.Name && o.Advertise != r.Advertise }) {
				return join.Bundle{}, &join.Error{Code: join.CodeConflict, Message: "taken"}
			}
			c.admitted = append(c.admitted, *r)
			return join.Bundle{Files: map[string][]byte{"nats/creds.json": []byte("{}")}}, nil
		}}}
	h := js.Handler()
	c.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == join.PathJoin {
			c.joins.Add(1)
		}
		h.ServeHTTP(w, r)
	}))
	cert, key, err := ca.Issue(pki.Request{CommonName: "podflow-join", Hosts: []string{"127.0.0.1"}, Server: true})
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(cert, key)
	if err != nil {
		t.Fatal(err)
	}
	c.srv.TLS = &tls.Config{Certificates: []tls.Certificate{pair}}
	c.srv.StartTLS()
	t.Cleanup(c.srv.Close)
	return c
}

func (c *cluster) addr() string { return strings.TrimPrefix(c.srv.URL, "https://") }

func (c *cluster) token(t *testing.T, ttl time.Duration, usages ...string) join.Token {
	t.Helper()
	tok, err := join.CreateToken(context.Background(), c.store, c.ca.CertPEM, ttl, usages...)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// request is a join request of host name at advertise with fresh keys for
// kinds; it returns the kept keys too.
func request(t *testing.T, name, advertise string, agent bool, kinds []string) (join.Request, map[string]string) {
	t.Helper()
	csrs, keys, err := join.NewKeys(kinds)
	if err != nil {
		t.Fatal(err)
	}
	return join.Request{Name: name, Advertise: advertise, Agent: agent, CSRs: csrs}, keys
}

func parseCert(t *testing.T, p string) *x509.Certificate {
	t.Helper()
	blk, _ := pem.Decode([]byte(p))
	if blk == nil {
		t.Fatalf("not PEM: %q", p)
	}
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestJoinedHostHasOnlyItsOwnNames (issue 39, item 1): a server joining as
// h2 at 10.0.0.2 gets every certificate of its kinds, each verified by the
// cluster CA, for its key, and valid for h2 and 10.0.0.2 only — also when
// its requests ask for another host's names; an agent gets only its own
// node's bus identity and is refused a server's certificate.
func TestJoinedHostHasOnlyItsOwnNames(t *testing.T) {
	c := newCluster(t)
	tok := c.token(t, time.Hour, join.UsageServer)
	ctx := context.Background()
	kinds := join.Kinds("h2", false)
	r, keys := request(t, "h2", "10.0.0.2", false, kinds)
	// A greedy request: names of the first host and a wildcard.
	greedy, gk, err := (func() (map[string]string, map[string]string, error) {
		return join.NewKeysFor(join.KindAPIServer, &x509.CertificateRequest{DNSNames: []string{"h1", "*.cluster"}, IPAddresses: []net.IP{net.ParseIP("10.0.0.1")}})
	})()
	if err != nil {
		t.Fatal(err)
	}
	r.CSRs[join.KindAPIServer], keys[join.KindAPIServer] = greedy[join.KindAPIServer], gk[join.KindAPIServer]
	resp, err := join.Join(ctx, c.addr(), tok, r)
	if err != nil {
		t.Fatal(err)
	}
	if string(resp.Files["nats/creds.json"]) != "{}" || len(c.admitted) != 1 || c.admitted[0].Name != "h2" {
		t.Fatalf("bundle %v, admitted %v", resp.Files, c.admitted)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM([]byte(resp.CA))
	if len(resp.Certs) != len(kinds) {
		t.Fatalf("%d certificates for %d kinds", len(resp.Certs), len(kinds))
	}
	for _, kind := range kinds {
		cert := parseCert(t, resp.Certs[kind])
		if _, err := tls.X509KeyPair([]byte(resp.Certs[kind]), []byte(keys[kind])); err != nil {
			t.Errorf("%s: not for the joiner's key: %v", kind, err)
		}
		if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
			t.Errorf("%s: %v", kind, err)
		}
		var ips []string
		for _, ip := range cert.IPAddresses {
			ips = append(ips, ip.String())
		}
		switch {
		case strings.HasPrefix(kind, "bus:"):
			if want := "podflow:bus:" + strings.TrimPrefix(kind, "bus:"); cert.Subject.CommonName != want || len(cert.DNSNames)+len(ips) != 0 {
				t.Errorf("%s: CN %q, names %v %v; want %q and no names", kind, cert.Subject.CommonName, cert.DNSNames, ips, want)
			}
		default:
			if !slices.Equal(cert.DNSNames, []string{"h2"}) || !slices.Equal(ips, []string{"10.0.0.2"}) {
				t.Errorf("%s: valid for %v %v, want h2 and 10.0.0.2 only", kind, cert.DNSNames, ips)
			}
		}
	}
	if cn := parseCert(t, resp.Certs[join.KindRaftPeer]).Subject.CommonName; cn != "podflow:raft:h2" {
		t.Errorf("raft certificate CN %q", cn)
	}
	// The same name from another address is another host: refused.
	r2, _ := request(t, "h2", "10.0.0.9", false, kinds[:1])
	if _, err := join.Join(ctx, c.addr(), tok, r2); !errors.Is(err, join.ErrConflict) {
		t.Errorf("h2 again from another address: %v, want Conflict", err)
	}

	// An agent: its node's bus identity only.
	agent := join.Kinds("h3", true)
	if want := []string{join.BusKind(pipeline.NodeRole("h3"))}; !slices.Equal(agent, want) {
		t.Fatalf("an agent's kinds: %v, want %v", agent, want)
	}
	for _, extra := range []string{join.KindRaftPeer, join.KindNATSServer, join.BusKind(bus.RoleAdmin), join.BusKind(pipeline.NodeRole("h2"))} {
		ra, _ := request(t, "h3", "10.0.0.3", true, append(slices.Clone(agent), extra))
		if _, err := join.Join(ctx, c.addr(), tok, ra); !errors.Is(err, join.ErrForbidden) || !strings.Contains(err.Error(), extra) {
			t.Errorf("an agent asking for %s: %v, want Forbidden naming it", extra, err)
		}
	}
	ra, _ := request(t, "h3", "10.0.0.3", true, agent)
	resp, err = join.Join(ctx, c.addr(), tok, ra)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Certs) != 1 || parseCert(t, resp.Certs[agent[0]]).Subject.CommonName != "podflow:bus:"+pipeline.NodeRole("h3") {
		t.Fatalf("the agent got %v", resp.Certs)
	}
}

// TestJoinRefusesBadTokens (issue 39, item 1): a wrong secret, an unknown
// id and an expired token are refused with 401; a token for node agents
// cannot join a server (403); a token of another cluster is refused by the
// joiner itself, which never sends it.
func TestJoinRefusesBadTokens(t *testing.T) {
	c := newCluster(t)
	ctx := context.Background()
	server := c.token(t, time.Hour, join.UsageServer)
	agentOnly := c.token(t, time.Hour, join.UsageAgent)
	expiring := c.token(t, time.Minute, join.UsageServer)
	r, _ := request(t, "h2", "10.0.0.2", false, []string{join.KindRaftPeer})
	ra, _ := request(t, "h3", "10.0.0.3", true, join.Kinds("h3", true))

	wrong := server
	wrong.Secret = strings.Repeat("a", 16)
	unknown := server
	unknown.ID = "zzzzzz"
	for _, tc := range []struct {
		name  string
		tok   join.Token
		req   join.Request
		after time.Duration
		want  error
		text  string
	}{
		{"wrong secret", wrong, r, 0, join.ErrUnauthorized, "wrong secret"},
		{"unknown id", unknown, r, 0, join.ErrUnauthorized, "unknown join token"},
		{"expired", expiring, r, 2 * time.Minute, join.ErrUnauthorized, "expired at"},
		{"agent token for a server", agentOnly, r, 0, join.ErrForbidden, "node agents only"},
		{"agent token for an agent", agentOnly, ra, 0, nil, ""},
		{"server token, before it expires", expiring, r, 30 * time.Second, nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c.now = time.Now().Add(tc.after)
			_, err := join.Join(ctx, c.addr(), tc.tok, tc.req)
			if tc.want == nil {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.text) || strings.Contains(err.Error(), tc.tok.Secret) {
				t.Fatalf("join: %v; want %v saying %q, without the secret", err, tc.want, tc.text)
			}
		})
	}

	// A token of another cluster: the joiner finds another CA and stops
	// before it sends anything.
	other, err := pki.NewCA("other")
	if err != nil {
		t.Fatal(err)
	}
	foreign := server
	foreign.CAHash = join.CAHash(other.CertPEM)
	before := c.joins.Load()
	if _, err := join.Join(ctx, c.addr(), foreign, r); err == nil || !strings.Contains(err.Error(), "not the cluster of this token") {
		t.Fatalf("join with another cluster's token: %v", err)
	}
	if c.joins.Load() != before {
		t.Fatal("the joiner sent its request to a server whose CA is not the token's")
	}
}

func TestParseToken(t *testing.T) {
	ca, _ := pki.NewCA("podflow-ca")
	good := join.Token{CAHash: join.CAHash(ca.CertPEM), ID: "abcdef", Secret: "0123456789abcdef"}
	if got, err := join.ParseToken(good.String()); err != nil || got != good {
		t.Fatalf("ParseToken(%q) = %v, %v", good, got, err)
	}
	for _, bad := range []string{"", "abcdef.0123456789abcdef", "K10::abcdef.0123456789abcdef",
		"K10" + good.CAHash + "::abcdef", "K10" + good.CAHash + "::ABCDEF.0123456789abcdef", "K10xyz::abcdef.0123456789abcdef",
		"K10" + good.CAHash + "::abcdef.0123456789abcdefg"} {
		if _, err := join.ParseToken(bad); !errors.Is(err, join.ErrToken) || strings.Contains(err.Error(), "0123456789abcdef") {
			t.Errorf("ParseToken(%q) = %v, want ErrToken without the secret", bad, err)
		}
	}
}
