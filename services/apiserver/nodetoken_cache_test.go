package apiserver_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sync/errgroup"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/bus/bustest"
	"github.com/podflow/podflow/proto/apiv1"
	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/raftstore/raftstoretest"
	"github.com/podflow/podflow/services/apiserver"
	"github.com/podflow/podflow/services/auth"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/pipeline"
)

// fakeTokenCache is an apiserver.TokenCache the test sets, as stale as it
// likes.
type fakeTokenCache struct {
	mu   sync.Mutex
	objs map[string]objects.Object // kind/ns/name
}

func (c *fakeTokenCache) set(kind, ns, name string, o objects.Object) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if o == nil {
		delete(c.objs, kind+"/"+ns+"/"+name)
		return
	}
	c.objs[kind+"/"+ns+"/"+name] = o
}

func (c *fakeTokenCache) get(kind, ns, name string) (objects.Object, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	o, ok := c.objs[kind+"/"+ns+"/"+name]
	return o, ok
}

func (c *fakeTokenCache) CachedPod(ns, name string) (*corev1.Pod, bool) {
	o, ok := c.get("pod", ns, name)
	p, _ := o.(*corev1.Pod)
	return p, ok
}

func (c *fakeTokenCache) CachedServiceAccount(ns, name string) (*corev1.ServiceAccount, bool) {
	o, ok := c.get("sa", ns, name)
	sa, _ := o.(*corev1.ServiceAccount)
	return sa, ok
}

func (c *fakeTokenCache) CachedNode(name string) (*corev1.Node, bool) {
	o, ok := c.get("node", "", name)
	n, _ := o.(*corev1.Node)
	return n, ok
}

// TestNodeTokensCache attacks NodeTokens' cache (NodeTokens.Cache, the
// api process's informers): the cache may lag the store, but a node gets
// no token for a pod the store holds with another uid, on another node or
// of another ServiceAccount, nor for one deleted, whatever the cache
// holds — a cached copy decides only when it holds the uid, node and
// ServiceAccount the request names (which never change for a uid, so a
// cache that lags holds either them or no node yet), and anything else
// is read from the store. A request the cache decides needs no store read: its token names
// the cached node's uid.
func TestNodeTokensCache(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cache := &fakeTokenCache{objs: map[string]objects.Object{}}
	srv, store := startNodeTokens(t, cache, "n1", "n2")

	pod := func(uid, node, sa string) *corev1.Pod {
		return &corev1.Pod{Metadata: &corev1.ObjectMeta{Namespace: "default", Name: "web", Uid: uid},
			Spec: &corev1.PodSpec{NodeName: node, ServiceAccountName: sa}}
	}
	robot := &corev1.ServiceAccount{Metadata: &corev1.ObjectMeta{Namespace: "default", Name: "robot", Uid: "uid-robot"}}
	// The store: web was deleted and recreated on n2 (uid-new); robot
	// exists, and so does default.
	for _, o := range []objects.Object{pod("uid-new", "n2", "robot"), robot,
		&corev1.ServiceAccount{Metadata: &corev1.ObjectMeta{Namespace: "default", Name: "default", Uid: "uid-default"}}} {
		if _, err := store.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	conns := map[string]*bus.Conn{"n1": bustest.ConnectAs(t, srv, pipeline.NodeRole("n1"), "n1"), "n2": bustest.ConnectAs(t, srv, pipeline.NodeRole("n2"), "n2")}
	ask := func(node, uid, sa string) (string, error) {
		tok, _, err := pipeline.RequestNodeToken(ctx, conns[node].NATS(), node, &apiv1.NodeTokenRequest{
			Namespace: "default", PodName: "web", PodUid: uid, ServiceAccount: sa})
		return tok, err
	}

	for _, tc := range []struct {
		name    string
		cached  *corev1.Pod // nil: the cache does not hold web
		node    string
		uid, sa string
		code    int32
		words   string
	}{
		{"the cache lags the recreation: the new uid from the old node", pod("uid-old", "n1", "robot"), "n1", "uid-new", "robot", 403, "scheduled on a different node"},
		{"the cache lags the recreation: the new pod from its node", pod("uid-old", "n1", "robot"), "n2", "uid-new", "robot", 0, ""},
		{"the cache is current: the old uid from the old node", pod("uid-new", "n2", "robot"), "n1", "uid-old", "robot", 409, "does not match the UID in record (uid-new)"},
		{"the cache is current: another node asks", pod("uid-new", "n2", "robot"), "n1", "uid-new", "robot", 403, "scheduled on a different node"},
		{"the cache is current: another ServiceAccount", pod("uid-new", "n2", "robot"), "n2", "uid-new", "default", 403, "runs as serviceaccount robot"},
		{"the cache saw no pod", nil, "n2", "uid-new", "robot", 0, ""},
		{"the cache is current: the pod's node asks", pod("uid-new", "n2", "robot"), "n2", "uid-new", "robot", 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cache.set("pod", "default", "web", nil)
			if tc.cached != nil {
				cache.set("pod", "default", "web", tc.cached)
			}
			cache.set("sa", "default", "robot", robot)
			cache.set("node", "", "n2", &corev1.Node{Metadata: &corev1.ObjectMeta{Name: "n2", Uid: "uid-n2-cached"}})
			tok, err := ask(tc.node, tc.uid, tc.sa)
			if tc.code != 0 {
				var refused *pipeline.TokenRefusedError
				if !errors.As(err, &refused) || refused.Code() != tc.code || !strings.Contains(err.Error(), tc.words) || tok != "" {
					t.Fatalf("got %q, %v; want a %d refusal containing %q", tok, err, tc.code, tc.words)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			k, _ := jwtClaims(t, tok)["kubernetes.io"].(map[string]any)
			if path(k, "pod.uid") != "uid-new" || path(k, "node.name") != "n2" || path(k, "serviceaccount.uid") != "uid-robot" {
				t.Errorf("claims %v: want pod uid-new on n2 of robot (uid-robot)", k)
			}
			if got := path(k, "node.uid") == "uid-n2-cached"; got != true {
				t.Errorf("node uid %v: want the cached node's", path(k, "node.uid"))
			}
		})
	}

	// Deleted: whatever the cache still holds with another uid, the
	// store has no web.
	if _, err := store.Delete(ctx, objects.Pods, "default", "web", 0); err != nil {
		t.Fatal(err)
	}
	cache.set("pod", "default", "web", pod("uid-old", "n1", "robot"))
	var refused *pipeline.TokenRefusedError
	if tok, err := ask("n2", "uid-new", "robot"); !errors.As(err, &refused) || refused.Code() != 404 {
		t.Errorf("a deleted pod: got %q, %v; want 404", tok, err)
	}
	cache.set("pod", "default", "web", nil)
	if tok, err := ask("n2", "uid-new", "robot"); !errors.As(err, &refused) || refused.Code() != 404 {
		t.Errorf("a deleted pod the cache saw deleted: got %q, %v; want 404", tok, err)
	}
}

// waitingTokenCache is a fakeTokenCache that is also an
// apiserver.PodCacheWaiter: WaitPods tells the test the revision it
// waits for (asked) and returns what the test answers (reached).
type waitingTokenCache struct {
	*fakeTokenCache
	asked   chan int64
	reached chan bool
}

func (c *waitingTokenCache) WaitPods(ctx context.Context, rev int64) bool {
	c.asked <- rev
	return <-c.reached
}

// TestNodeTokensWaitForPodCache: a request naming the revision the node
// saw its pod at, whose pod the cache does not hold yet, waits for the
// cache to reach that revision and is decided by the cache then, without
// a store read (the store does not hold the pod: a read would answer
// 404). A cache that does not reach it sends the request to the store, as
// does a cached pod that still does not decide; a request naming no
// revision, or one the cache decides at once, does not wait.
func TestNodeTokensWaitForPodCache(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cache := &waitingTokenCache{fakeTokenCache: &fakeTokenCache{objs: map[string]objects.Object{}}, asked: make(chan int64), reached: make(chan bool)}
	srv, store := startNodeTokens(t, cache, "n1")
	robot := &corev1.ServiceAccount{Metadata: &corev1.ObjectMeta{Namespace: "default", Name: "robot", Uid: "uid-robot"}}
	if _, err := store.Create(ctx, robot); err != nil {
		t.Fatal(err)
	}
	cache.set("sa", "default", "robot", robot)
	web := &corev1.Pod{Metadata: &corev1.ObjectMeta{Namespace: "default", Name: "web", Uid: "uid-web"},
		Spec: &corev1.PodSpec{NodeName: "n1", ServiceAccountName: "robot"}}
	n1 := bustest.ConnectAs(t, srv, pipeline.NodeRole("n1"), "n1")
	type answer struct {
		tok string
		err error
	}
	ask := func(rev int64) <-chan answer {
		out := make(chan answer, 1)
		go func() {
			tok, _, err := pipeline.RequestNodeToken(ctx, n1.NATS(), "n1", &apiv1.NodeTokenRequest{
				Namespace: "default", PodName: "web", PodUid: "uid-web", ServiceAccount: "robot", PodRevision: rev})
			out <- answer{tok, err}
		}()
		return out
	}
	waited := func(got <-chan answer) int64 {
		t.Helper()
		select {
		case rev := <-cache.asked:
			return rev
		case a := <-got:
			t.Fatalf("answered without waiting for the cache: %q, %v", a.tok, a.err)
			return 0
		}
	}
	notFound := func(what string, a answer) {
		t.Helper()
		var refused *pipeline.TokenRefusedError
		if !errors.As(a.err, &refused) || refused.Code() != 404 {
			t.Errorf("%s: got %q, %v; want the store's 404", what, a.tok, a.err)
		}
	}

	// The cache reaches the revision with the pod: the cache decides.
	got := ask(42)
	if rev := waited(got); rev != 42 {
		t.Fatalf("waited for revision %d, want 42", rev)
	}
	cache.set("pod", "default", "web", web)
	cache.reached <- true
	if a := <-got; a.err != nil {
		t.Fatalf("the pod cached at the revision asked for: %v", a.err)
	} else if k, _ := jwtClaims(t, a.tok)["kubernetes.io"].(map[string]any); path(k, "pod.uid") != "uid-web" {
		t.Errorf("claims %v: want pod uid-web", k)
	}
	// Cached and deciding: no wait (WaitPods would block the test).
	if a := <-ask(42); a.err != nil {
		t.Fatalf("a cached pod: %v", a.err)
	}
	// The cache does not reach the revision: the store answers.
	cache.set("pod", "default", "web", nil)
	got = ask(43)
	waited(got)
	cache.reached <- false
	notFound("the cache behind", <-got)
	// The cache reaches it but holds another pod: the store answers.
	got = ask(44)
	waited(got)
	cache.set("pod", "default", "web", &corev1.Pod{Metadata: &corev1.ObjectMeta{Namespace: "default", Name: "web", Uid: "uid-other"},
		Spec: &corev1.PodSpec{NodeName: "n1", ServiceAccountName: "robot"}})
	cache.reached <- true
	notFound("another pod cached", <-got)
	// No revision named: no wait.
	cache.set("pod", "default", "web", nil)
	notFound("no revision", <-ask(0))
}

// startNodeTokens serves the token requests of nodes with NodeTokens
// deciding on cache, over an embedded NATS server (where each node has
// its bus role) and a one-replica store, until the test ends. It returns
// the server, to connect nodes to, and the store.
func startNodeTokens(t *testing.T, cache apiserver.TokenCache, nodes ...string) (*bus.Embedded, *objects.Store) {
	t.Helper()
	bcfg := bus.DefaultEmbeddedConfig(t.TempDir())
	for _, n := range nodes {
		bcfg.Roles = append(bcfg.Roles, pipeline.NodeAgentRole(pipeline.NodeAgentRunnerConfig(n), n))
	}
	srv := bustest.ServerAt(t, bcfg)
	apiConn := bustest.Connect(t, srv, "api")
	store := objects.New(raftstoretest.MakeCluster(t, 1).Client(t))
	tokens, err := auth.LoadBoundTokens(filepath.Join(t.TempDir(), "sa.key"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	g, gctx := errgroup.WithContext(ctx)
	nt := &apiserver.NodeTokens{NATS: apiConn.NATS(), Store: store, Tokens: tokens, Workers: 2, Cache: cache,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if err := nt.Start(gctx, g); err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); _ = g.Wait() })
	return srv, store
}
