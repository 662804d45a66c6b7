package apiserver_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"k8s.io/client-go/kubernetes"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/bus/bustest"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/raftstore/raftstoretest"
	"github.com/podflow/podflow/services/apiserver"
	"github.com/podflow/podflow/services/apiserver/pki"
	"github.com/podflow/podflow/services/auth"
	"github.com/podflow/podflow/services/crd"
	"github.com/podflow/podflow/services/ipalloc"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/pipeline"
	"github.com/podflow/podflow/services/quota"
	"github.com/podflow/podflow/services/registry"
	"github.com/podflow/podflow/services/stage"
	"github.com/podflow/podflow/services/stages/admission"
	"github.com/podflow/podflow/services/stages/api"
	"github.com/podflow/podflow/services/stages/bootstrap"
	"github.com/podflow/podflow/services/stages/crds"
	"github.com/podflow/podflow/services/stages/kubernetesservice"
	"github.com/podflow/podflow/services/stages/namespace"
	"github.com/podflow/podflow/services/stages/persistence"
	"github.com/podflow/podflow/services/stages/resourcequota"
	"github.com/podflow/podflow/services/stages/scheduler"
	webhookkube "github.com/podflow/podflow/services/webhook/kube"
)

// Tokens of the static token file every test system has.
const (
	adminToken = "admin-token-0123456789"
	aliceToken = "alice-token-0123456789"
)

// system is a real slice of podflow in the test process: an embedded
// JetStream server, one raft store replica on loopback, and the api (with
// its HTTPS front door), admission and persistence stages. A pod POSTed
// over HTTPS goes through the same pipeline as in production up to its
// 201 (no scheduler or node: pods stay Pending).
type system struct {
	url   string
	dir   string
	ca    *pki.CA
	store *objects.Store
	conn  *bus.Conn
	srv   *bus.Embedded
}

type options struct {
	https    func(*apiserver.Config)
	history  int64 // store history kept, in revisions (0: default)
	replicas int   // store replicas (0: 1)
	fsync    bool  // fsync the raft log, as in production (tests skip it)
	// nodes are node agents' bus roles (pipeline.NodeAgentRole) the
	// server has besides the admin's, for tests that connect as a node.
	nodes []string
	// webhooks runs the admission webhooks and policies
	// (services/webhook/kube) in the api and admission stages.
	webhooks bool
	// resync is the controller stages' ResyncPeriod (0: none).
	resync time.Duration
	// scheduler runs the scheduler stage too: pods are bound to the
	// nodes the tests create (no node agent runs them).
	scheduler bool
	// maxPayload is the bus's largest message (0: bus.DefaultMaxPayload).
	maxPayload int32
	// admissionKV, when set, wraps the store the admission stage's
	// webhooks and policies (webhookkube) read, to hold its informers
	// behind the api's.
	admissionKV func(objects.KV) objects.KV
	// admission adjusts the admission stage's Config.
	admission func(*admission.Config)
}

// reserveAddr returns a loopback address whose port stays bound, without
// listening, until the test ends: the HTTPS server binds it beside this
// socket (both set SO_REUSEPORT, as apiserver.Listen does), and in the
// meantime no other socket takes it — a port merely found free and
// released was taken by an outgoing connection's ephemeral port at times
// ("bind: address already in use") when other processes were busy.
func reserveAddr(t testing.TB) string {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEPORT, 1); err != nil {
		t.Fatal(err)
	}
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(sa.(*unix.SockaddrInet4).Port))
}

// startTimeout bounds a system's start (its store's election, the
// stages' consumers pulling, the HTTPS server answering): a hang ends the
// test, not a slow machine — with three replicas under -race on two
// loaded cores a start has taken more than 20 s.
const startTimeout = time.Minute

func startSystem(t testing.TB, o options) *system {
	t.Helper()
	dir := t.TempDir()
	bcfg := bus.DefaultEmbeddedConfig(t.TempDir())
	bcfg.MaxPayload = o.maxPayload
	for _, n := range o.nodes {
		bcfg.Roles = append(bcfg.Roles, pipeline.NodeAgentRole(pipeline.NodeAgentRunnerConfig(n), n))
	}
	srv := bustest.ServerAt(t, bcfg)
	conn := bustest.Connect(t, srv, "test")
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()

	// The store: o.replicas raft replicas (default 1) on loopback.
	n := max(o.replicas, 1)
	ls := raftstoretest.Listeners(t, n)
	var peers []raftstore.Peer
	for i, l := range ls {
		peers = append(peers, raftstore.Peer{ID: fmt.Sprintf("r%d", i), Address: l.Addr().String()})
	}
	for i, p := range peers {
		scfg := raftstore.DefaultConfig()
		raftstoretest.FastConfig(&scfg)
		if n == 1 {
			raftstoretest.SoloConfig(&scfg)
		}
		scfg.NoSync = !o.fsync
		scfg.ID, scfg.RaftAddr, scfg.DataDir, scfg.Bootstrap = p.ID, p.Address, filepath.Join(dir, p.ID), peers
		scfg.RaftListener = ls[i]
		scfg.TLS = raftstoretest.PeerTLS(t)
		if o.history > 0 {
			scfg.HistoryRevisions = o.history
		}
		scfg.Conn = bustest.Connect(t, srv, fmt.Sprintf("store-%d", i)).NATS()
		node, err := raftstore.NewNode(scfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := node.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = node.Shutdown() })
	}
	kv, err := raftstore.NewClient(conn.NATS(), raftstore.DefaultClientConfig())
	if err != nil {
		t.Fatal(err)
	}
	st := objects.New(kv)
	for {
		if _, err := kv.Get(ctx, "/registry/namespaces/default"); err == nil || errors.Is(err, raftstore.ErrNotFound) {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("store not ready: %v", ctx.Err())
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The namespaces (default ...) and the bootstrap RBAC come from the
	// api process's bootstrap controller, as in production.

	// The bus topology.
	topo, err := pipeline.Topology(bus.DefaultStreamsConfig())
	if err != nil {
		t.Fatal(err)
	}
	if err := bus.Provision(ctx, conn.JetStream(), topo); err != nil {
		t.Fatal(err)
	}

	// Certificates and the token file.
	ca, err := pki.NewCA("test-ca")
	if err != nil {
		t.Fatal(err)
	}
	caCert, caKey := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "ca.key")
	if err := ca.WriteFiles(caCert, caKey); err != nil {
		t.Fatal(err)
	}
	sc, sk, err := ca.Issue(pki.Request{CommonName: "apiserver", Hosts: []string{"127.0.0.1", "localhost"}, Server: true})
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "srv.crt"), sc)
	writeFile(t, filepath.Join(dir, "srv.key"), sk)
	tokens := fmt.Sprintf("%s,admin,admin,%q\n%s,alice,alice,\"devs\"\n", adminToken, auth.GroupMasters, aliceToken)
	writeFile(t, filepath.Join(dir, "tokens.csv"), []byte(tokens))

	hc := apiserver.DefaultConfig()
	hc.Addr, hc.CertFile, hc.KeyFile, hc.ClientCAFile = reserveAddr(t), filepath.Join(dir, "srv.crt"), filepath.Join(dir, "srv.key"), caCert
	if o.https != nil {
		o.https(&hc)
	}

	// The stages.
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	runCtx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	run := func(name string, build func(env stage.Env) (stage.Handler, error)) {
		c := bustest.Connect(t, srv, name)
		env := stage.NewEnv(c, objects.New(mustClient(t, c)), name, name+"-1", log)
		h, err := build(env)
		if err != nil {
			t.Fatal(err)
		}
		rc, err := pipeline.RunnerConfig(name, env.Replica)
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			cfg := stage.Config{Runner: rc, NoConsumer: pipeline.Controller(name), ResyncPeriod: o.resync}
			if err := stage.Run(runCtx, c, env, h, cfg); err != nil && runCtx.Err() == nil {
				t.Errorf("stage %s: %v", name, err)
			}
		}()
	}
	run(pipeline.API, func(env stage.Env) (stage.Handler, error) { return apiProcess(env, dir, hc, o.webhooks) })
	run(pipeline.Admission, func(env stage.Env) (stage.Handler, error) {
		cfg := admission.DefaultConfig()
		cfg.Quota = quota.NewAdmission(env.Store)
		if o.admission != nil {
			o.admission(&cfg)
		}
		if !o.webhooks {
			return admission.NewStage(env, cfg)
		}
		hookStore := env.Store
		if o.admissionKV != nil {
			hookStore = objects.FromKV(o.admissionKV(env.Store.KV()))
		}
		hooks, err := webhookkube.New(webhookkube.Config{Store: hookStore})
		if err != nil {
			return nil, err
		}
		cfg.Webhooks = hooks
		st, err := admission.NewStage(env, cfg)
		if err != nil {
			return nil, err
		}
		return stage.Compose(st, hooks), nil
	})
	run(pipeline.ResourceQuota, func(env stage.Env) (stage.Handler, error) {
		return resourcequota.New(env, resourcequota.DefaultConfig())
	})
	run(pipeline.Persistence, func(env stage.Env) (stage.Handler, error) { return persistence.New(env), nil })
	pulling := []string{pipeline.Admission, pipeline.Persistence}
	if o.scheduler {
		run(pipeline.Scheduler, func(env stage.Env) (stage.Handler, error) {
			return scheduler.NewStage(env, scheduler.DefaultStageConfig())
		})
		pulling = append(pulling, pipeline.Scheduler)
	}
	t.Cleanup(func() { stop(); wg.Wait() }) // before the connections close (cleanups run last-in first-out)

	s := &system{url: "https://" + hc.Addr, dir: dir, ca: ca, store: st, conn: conn, srv: srv}
	c := s.client(t, adminToken)
	deadline := time.Now().Add(startTimeout)
	for {
		resp, err := c.Get(s.url + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the HTTPS server did not answer: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The stages' consumers must be pulling before the first request.
	for _, name := range pulling {
		for {
			cons, err := conn.JetStream().Consumer(ctx, bus.EventsStream, name)
			if err == nil {
				if info, err := cons.Info(ctx); err == nil && info.NumWaiting > 0 {
					break
				}
			}
			if ctx.Err() != nil {
				t.Fatalf("consumer %s not pulling", name)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return s
}

func mustClient(t testing.TB, c *bus.Conn) *raftstore.Client {
	kv, err := raftstore.NewClient(c.NATS(), raftstore.DefaultClientConfig())
	if err != nil {
		t.Fatal(err)
	}
	return kv
}

func writeFile(t testing.TB, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// transport trusts the system's CA and presents cert, if any.
func (s *system) transport(cert *tls.Certificate) *http.Transport {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(s.ca.CertPEM)
	tc := &tls.Config{RootCAs: pool}
	if cert != nil {
		// Present the certificate whatever CAs the server names, so that
		// a foreign one reaches the server's verification.
		tc.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return cert, nil }
	}
	return &http.Transport{TLSClientConfig: tc, ForceAttemptHTTP2: true, MaxIdleConnsPerHost: 64}
}

// client sends token as a bearer token (none when empty).
func (s *system) client(t testing.TB, token string) *http.Client {
	tr := s.transport(nil)
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: bearer{token: token, next: tr}, Timeout: 30 * time.Second}
}

// certClient presents a client certificate issued by ca for user/groups.
func (s *system) certClient(t testing.TB, ca *pki.CA, user string, groups ...string) *http.Client {
	c, k, err := ca.Issue(pki.Request{CommonName: user, Groups: groups})
	if err != nil {
		t.Fatal(err)
	}
	return s.pairClient(t, c, k)
}

// pairClient presents the PEM certificate and key.
func (s *system) pairClient(t testing.TB, c, k []byte) *http.Client {
	pair, err := tls.X509KeyPair(c, k)
	if err != nil {
		t.Fatal(err)
	}
	tr := s.transport(&pair)
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}
}

type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	if b.token != "" {
		r = r.Clone(r.Context())
		r.Header.Set("Authorization", "Bearer "+b.token)
	}
	return b.next.RoundTrip(r)
}

// do sends a request and returns the status code and decoded JSON body.
func do(t testing.TB, c *http.Client, method, url, contentType, body string, hdr ...string) (int, map[string]any, http.Header) {
	t.Helper()
	code, out, h, err := tryDo(c, method, url, contentType, body, hdr...)
	if err != nil {
		t.Fatal(err)
	}
	return code, out, h
}

// tryDo is do for any goroutine: it returns what fails instead of
// failing the test.
func tryDo(c *http.Client, method, url, contentType, body string, hdr ...string) (int, map[string]any, http.Header, error) {
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		return 0, nil, nil, err
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Add(hdr[i], hdr[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, nil, nil, fmt.Errorf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if len(bytes.TrimSpace(b)) > 0 {
		if err := json.Unmarshal(b, &out); err != nil {
			return 0, nil, nil, fmt.Errorf("%s %s: %d: not JSON: %q", method, url, resp.StatusCode, b)
		}
	}
	return resp.StatusCode, out, resp.Header, nil
}

// path returns the value at a dotted path of a JSON tree.
func path(tree map[string]any, p string) any {
	var cur any = tree
	for _, k := range strings.Split(p, ".") {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = m[k]
	}
	return cur
}

func podJSON(name string, extra string) string {
	return fmt.Sprintf(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":%q,"labels":{"app":"web"}},
"spec":{"containers":[{"name":"c","image":"nginx"%s}]}}`, name, extra)
}

// apiProcess is the api process as `podflow stage api` composes it
// (ops/processes/roles.APIProcess): the api stage, the CRD catalog, the
// namespace controller, the CRD controller, the bootstrap controller, the node token signer, the HTTPS
// front door hc (with its pod network listeners) and the kubernetes
// Service's controller; with webhooks, the admission webhooks and
// policies.
func apiProcess(env stage.Env, dir string, hc apiserver.Config, webhooks bool) (stage.Handler, error) {
	tokens, err := auth.LoadBoundTokens(filepath.Join(dir, "sa.key")) // the TokenRequest API
	if err != nil {
		return nil, err
	}
	cfg := api.DefaultConfig()
	cfg.TokenFile = filepath.Join(dir, "tokens.csv")
	cfg.Authn.BoundTokens = tokens
	nc := namespace.DefaultConfig()
	nc.DeletionGrace = 0 // the tests here wait for the content's deletion, not kube's grace
	if nc.ServiceIPs, err = ipalloc.New(cfg.Services); err != nil {
		return nil, err
	}
	ns, err := namespace.New(env, nc)
	if err != nil {
		return nil, err
	}
	cfg.NamespaceDeleted = ns.Enqueue
	var s *api.Stage
	reg, err := registry.New(registry.Config{Store: env.Store, Authorize: func(a auth.Attributes) auth.Decision { return s.Authorize(a) }})
	if err != nil {
		return nil, err
	}
	cat, err := crd.NewCatalog(crd.Config{Store: env.Store, Log: env.Log})
	if err != nil {
		return nil, err
	}
	crdc, err := crds.New(env, crds.DefaultConfig())
	if err != nil {
		return nil, err
	}
	cfg.Registry = crd.Registry{Builtin: reg, Catalog: cat}
	cfg.SyncKinds = cat.Sync
	cfg.Quota = quota.NewAdmission(env.Store)
	if hc.Printer == nil {
		hc.Printer = reg
	}
	hc.CustomResources = cat
	var parts []stage.Starter
	if webhooks {
		hooks, err := webhookkube.New(webhookkube.Config{Store: env.Store, Authorize: func(a auth.Attributes) auth.Decision { return s.Authorize(a) },
			CustomResources: cat})
		if err != nil {
			return nil, err
		}
		cfg.Webhooks = hooks
		parts = append(parts, hooks)
	}
	if s, err = api.New(env, cfg); err != nil {
		return nil, err
	}
	boot, err := bootstrap.New(env, bootstrap.DefaultConfig())
	if err != nil {
		return nil, err
	}
	ap, err := netip.ParseAddrPort(hc.Addr)
	if err != nil {
		return nil, err
	}
	pods := &apiserver.PodListeners{Store: env.Store, Port: int(ap.Port()), Fallback: ap, Interval: 200 * time.Millisecond, Log: env.Log}
	kc := kubernetesservice.DefaultConfig()
	kc.ServiceIPs, kc.Endpoint = nc.ServiceIPs, pods.Endpoint
	kc.Interval = 500 * time.Millisecond // tests wait for it less
	ks, err := kubernetesservice.New(env, kc)
	if err != nil {
		return nil, err
	}
	return stage.Compose(s, append(parts, cat, ns, crdc, boot,
		&apiserver.NodeTokens{NATS: env.NATS, Store: env.Store, Tokens: tokens, Workers: cfg.Workers, Log: env.Log, Cache: s},
		&apiserver.LocalAPIServices{Store: env.Store, Log: env.Log, Period: 200 * time.Millisecond},
		apiserver.FrontDoor{Config: hc, Backend: s, Store: env.Store, NATS: env.NATS, Tokens: tokens, Pods: pods, Log: env.Log}, ks)...), nil
}

// adminClientset is a client-go clientset of the admin, over HTTPS
// (restConfig: no client-side rate limit).
func (s *system) adminClientset(t testing.TB) *kubernetes.Clientset {
	t.Helper()
	cs, err := kubernetes.NewForConfig(restConfig(s))
	if err != nil {
		t.Fatal(err)
	}
	return cs
}
