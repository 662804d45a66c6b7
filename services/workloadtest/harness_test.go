// Package workloadtest tests podflow's workload controllers against a real
// slice of podflow in the test process: an embedded JetStream server with
// every role's permissions, a raft store of three replicas with the
// store's access rules, and the api (with its bootstrap controller),
// admission, persistence and serviceaccount stages, each on its own bus
// identity. Controllers run as they do in production (stage.Run, no
// consumer), as many replicas as a test starts, and create their pods
// through the api stage. Nodes are stood in for by a test kubelet that
// binds, runs and readies pods and finishes their deletion.
package workloadtest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/bus/bustest"
	"github.com/podflow/podflow/proto/apiv1"
	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/raftstore/raftstoretest"
	"github.com/podflow/podflow/services/auth"
	"github.com/podflow/podflow/services/controller"
	"github.com/podflow/podflow/services/informer"
	"github.com/podflow/podflow/services/manifest"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/pipeline"
	"github.com/podflow/podflow/services/registry"
	"github.com/podflow/podflow/services/stage"
	"github.com/podflow/podflow/services/stages/admission"
	"github.com/podflow/podflow/services/stages/api"
	"github.com/podflow/podflow/services/stages/bootstrap"
	"github.com/podflow/podflow/services/stages/persistence"
	"github.com/podflow/podflow/services/stages/serviceaccount"
)

const adminToken = "admin-token-0123456789"

// cluster is the system under test.
type cluster struct {
	t     testing.TB
	srv   *bus.Embedded
	admin *bus.Conn
	store *objects.Store // the admin's
	log   *slog.Logger

	runCtx context.Context
	wg     sync.WaitGroup

	kubelet *kubelet
}

// newCluster starts the system; everything stops when the test ends.
func newCluster(t testing.TB) *cluster {
	t.Helper()
	dir := t.TempDir()
	bcfg := bus.DefaultEmbeddedConfig(t.TempDir())
	bcfg.Roles = pipeline.Roles()
	srv := bustest.ServerAt(t, bcfg)
	admin := bustest.Connect(t, srv, "admin")
	// A bound on a hang, not on the start's speed: three store replicas
	// and the stages under -race on two loaded cores have needed more
	// than 30 s.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	ls := raftstoretest.Listeners(t, 3)
	var peers []raftstore.Peer
	for i, l := range ls {
		peers = append(peers, raftstore.Peer{ID: fmt.Sprintf("r%d", i), Address: l.Addr().String()})
	}
	for i, p := range peers {
		scfg := raftstore.DefaultConfig()
		raftstoretest.FastConfig(&scfg)
		scfg.NoSync = true
		scfg.ID, scfg.RaftAddr, scfg.DataDir, scfg.Bootstrap = p.ID, p.Address, filepath.Join(dir, p.ID), peers
		scfg.RaftListener = ls[i]
		scfg.TLS = raftstoretest.PeerTLS(t)
		scfg.WriteACL, scfg.ReadACL, scfg.ReadFilter = pipeline.StoreWriteACL, pipeline.StoreReadACL, pipeline.StoreReadFilter
		scfg.WriteFilter, scfg.ReplyACL = pipeline.StoreWriteFilter, pipeline.StoreReplyACL
		scfg.Conn = bustest.ConnectAs(t, srv, pipeline.RoleStore, fmt.Sprintf("store-%d", i)).NATS()
		node, err := raftstore.NewNode(scfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := node.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = node.Shutdown() })
	}
	st := objects.New(client(t, admin))
	for {
		if _, err := st.KV().Get(ctx, "/registry/namespaces/default"); err == nil || errors.Is(err, raftstore.ErrNotFound) {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("store not ready: %v", ctx.Err())
		}
		time.Sleep(20 * time.Millisecond)
	}
	topo, err := pipeline.Topology(bus.DefaultStreamsConfig())
	if err != nil {
		t.Fatal(err)
	}
	if err := bus.Provision(ctx, admin.JetStream(), topo); err != nil {
		t.Fatal(err)
	}
	tokens := fmt.Sprintf("%s,admin,admin,%q\n", adminToken, auth.GroupMasters)
	if err := os.WriteFile(filepath.Join(dir, "tokens.csv"), []byte(tokens), 0o600); err != nil {
		t.Fatal(err)
	}

	runCtx, stop := context.WithCancel(context.Background())
	c := &cluster{t: t, srv: srv, admin: admin, store: st, log: slog.New(slog.NewTextHandler(io.Discard, nil)), runCtx: runCtx}
	if testing.Verbose() && os.Getenv("WORKLOADTEST_LOG") != "" {
		c.log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	c.run(pipeline.API, "api-1", func(env stage.Env) (stage.Handler, error) {
		cfg := api.DefaultConfig()
		cfg.TokenFile = filepath.Join(dir, "tokens.csv")
		var s *api.Stage
		reg, err := registry.New(registry.Config{Store: env.Store, Authorize: func(a auth.Attributes) auth.Decision { return s.Authorize(a) }})
		if err != nil {
			return nil, err
		}
		cfg.Registry = reg
		if s, err = api.New(env, cfg); err != nil {
			return nil, err
		}
		boot, err := bootstrap.New(env, bootstrap.DefaultConfig())
		if err != nil {
			return nil, err
		}
		return stage.Compose(s, boot), nil
	}, false)
	c.run(pipeline.Admission, "admission-1", func(env stage.Env) (stage.Handler, error) {
		return admission.NewStage(env, admission.DefaultConfig())
	}, false)
	c.run(pipeline.Persistence, "persistence-1", func(env stage.Env) (stage.Handler, error) { return persistence.New(env), nil }, false)
	c.run(pipeline.ServiceAccount, "serviceaccount-1", func(env stage.Env) (stage.Handler, error) {
		return serviceaccount.New(env, serviceaccount.DefaultConfig())
	}, true)
	for _, name := range []string{pipeline.Admission, pipeline.Persistence, pipeline.API} {
		for {
			cons, err := admin.JetStream().Consumer(ctx, bus.EventsStream, name)
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
	c.eventually("the default ServiceAccount", 30*time.Second, func() bool {
		_, err := objects.Get[*corev1.ServiceAccount](ctx, st, "default", "default")
		return err == nil
	})
	c.kubelet = startKubelet(t, runCtx, st, &c.wg)
	t.Cleanup(func() { stop(); c.wg.Wait() }) // before the connections close (cleanups run last-in first-out)
	return c
}

// client is the store client of a connection: a role's reads and writes
// are named after it (the store's access rules check them), the admin's
// are not.
func client(t testing.TB, c *bus.Conn, role ...string) *raftstore.Client {
	sc := raftstore.DefaultClientConfig()
	if len(role) > 0 {
		sc.User = role[0]
	}
	kv, err := raftstore.NewClient(c.NATS(), sc)
	if err != nil {
		t.Fatal(err)
	}
	return kv
}

// run starts a replica of stage name on its own bus identity until the
// test ends; it returns a function that stops it (SIGKILL-like: it does
// not release its Lease when kill is true... see startController).
func (c *cluster) run(name, replica string, build func(env stage.Env) (stage.Handler, error), controllerStage bool) {
	c.t.Helper()
	conn := bustest.ConnectAs(c.t, c.srv, pipeline.StageRole(name), replica)
	env := stage.NewEnv(conn, objects.New(client(c.t, conn, pipeline.StageRole(name))), name, replica, c.log.With("replica", replica))
	h, err := build(env)
	if err != nil {
		c.t.Fatal(err)
	}
	rc, err := pipeline.RunnerConfig(name, replica)
	if err != nil {
		c.t.Fatal(err)
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		if err := stage.Run(c.runCtx, conn, env, h, stage.Config{Runner: rc, NoConsumer: controllerStage, ResyncPeriod: 2 * time.Second}); err != nil && c.runCtx.Err() == nil {
			c.t.Errorf("stage %s: %v", name, err)
		}
	}()
}

// replica is a controller replica a test started.
type replica struct {
	name string
	stop context.CancelFunc
	done chan struct{}
	conn *bus.Conn
}

// Kill stops the replica abruptly: its connection closes first, so it
// neither finishes its syncs' writes nor releases its Lease (a SIGKILL's
// effect on the rest of the system).
func (r *replica) Kill() {
	r.conn.Close()
	r.stop()
	<-r.done
}

// Stop stops the replica gracefully (it releases its Lease).
func (r *replica) Stop() {
	r.stop()
	<-r.done
}

// startController starts a replica of controller stage name.
func (c *cluster) startController(name, replicaName string, build func(env stage.Env, cfg controller.Config) (stage.Handler, error)) *replica {
	c.t.Helper()
	conn := bustest.ConnectAs(c.t, c.srv, pipeline.StageRole(name), replicaName)
	env := stage.NewEnv(conn, objects.New(client(c.t, conn, pipeline.StageRole(name))), name, replicaName, c.log.With("replica", replicaName))
	cfg := controller.DefaultConfig(name, replicaName)
	controller.FastConfig(&cfg)
	cfg.Log = env.Log
	h, err := build(env, cfg)
	if err != nil {
		c.t.Fatal(err)
	}
	rc, _ := pipeline.RunnerConfig(name, replicaName)
	ctx, stop := context.WithCancel(c.runCtx)
	r := &replica{name: replicaName, stop: stop, done: make(chan struct{}), conn: conn}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		defer close(r.done)
		if err := stage.Run(ctx, conn, env, h, stage.Config{Runner: rc, NoConsumer: true, ResyncPeriod: 2 * time.Second}); err != nil && ctx.Err() == nil {
			c.log.Warn("controller stopped", "replica", replicaName, "err", err)
		}
	}()
	c.t.Cleanup(func() { stop(); <-r.done })
	return r
}

// apply creates (verb create) or replaces (update) a Kubernetes object
// through the api stage as the admin, as kubectl's requests do; it returns
// the stored object or fails the test.
func (c *cluster) apply(verb string, obj runtime.Object) *corev1.Unstructured {
	c.t.Helper()
	st, out := c.object(verb, obj)
	if st.GetCode() >= 300 || st.GetStatus() == "Failure" {
		c.t.Fatalf("%s %T: %d %s: %s", verb, obj, st.GetCode(), st.GetReason(), st.GetMessage())
	}
	return out
}

// object sends an object request as the admin and returns its outcome.
func (c *cluster) object(verb string, obj runtime.Object) (*corev1.Status, *corev1.Unstructured) {
	c.t.Helper()
	m, err := manifest.FromKube(obj)
	if err != nil {
		c.t.Fatal(err)
	}
	u := m.(*corev1.Unstructured)
	k, err := objects.KindOf(u)
	if err != nil {
		c.t.Fatal(err)
	}
	b, err := proto.Marshal(u)
	if err != nil {
		c.t.Fatal(err)
	}
	return c.request(&apiv1.ObjectRequest{Token: adminToken, Verb: verb, Kind: k.Qualified(), Namespace: u.GetMetadata().GetNamespace(),
		Name: u.GetMetadata().GetName(), Object: b})
}

func (c *cluster) request(req *apiv1.ObjectRequest) (*corev1.Status, *corev1.Unstructured) {
	c.t.Helper()
	b, err := proto.Marshal(req)
	if err != nil {
		c.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m, err := c.admin.NATS().RequestWithContext(ctx, pipeline.ObjectSubject, b)
	if err != nil {
		c.t.Fatalf("object request: %v", err)
	}
	resp := &apiv1.Response{}
	if err := proto.Unmarshal(m.Data, resp); err != nil {
		c.t.Fatal(err)
	}
	var out *corev1.Unstructured
	if resp.GetKind() == "Unstructured" {
		out = &corev1.Unstructured{}
		if err := proto.Unmarshal(resp.GetObject(), out); err != nil {
			c.t.Fatal(err)
		}
	}
	return resp.GetStatus(), out
}

// get reads a generic object from the store as its Go type.
func get[T runtime.Object](c *cluster, k objects.Kind, ns, name string) (T, bool) {
	c.t.Helper()
	var zero T
	o, err := c.store.GetKind(context.Background(), k, ns, name)
	if errors.Is(err, raftstore.ErrNotFound) {
		return zero, false
	}
	if err != nil {
		c.t.Fatal(err)
	}
	ko, err := manifest.ToKube(o)
	if err != nil {
		c.t.Fatal(err)
	}
	return ko.(T), true
}

// pods lists the pods of namespace ns.
func (c *cluster) pods(ns string) []*corev1.Pod {
	c.t.Helper()
	ps, _, err := objects.List[*corev1.Pod](context.Background(), c.store, ns)
	if err != nil {
		c.t.Fatal(err)
	}
	return ps
}

// eventually waits for cond, failing the test after d (a hang, not a
// speed check).
func (c *cluster) eventually(what string, d time.Duration, cond func() bool) {
	c.t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			c.t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// kubelet stands in for the nodes: it binds every new pod to one of three
// node names, makes it Running and Ready (unless notReady says so), and
// finishes the deletion of every pod marked terminating (after Grace).
type kubelet struct {
	store      *objects.Store
	inf        *informer.Informer[*corev1.Pod]
	grace      atomic.Int64 // nanoseconds a terminating pod lingers
	mu         sync.Mutex
	hold       map[string]bool // pods kept not ready, by name
	holdImages map[string]bool // pods kept not ready, by a container's image
	n          atomic.Int64
	work       chan string
}

func startKubelet(t testing.TB, ctx context.Context, st *objects.Store, wg *sync.WaitGroup) *kubelet {
	k := &kubelet{store: st, hold: map[string]bool{}, holdImages: map[string]bool{}, work: make(chan string, 100000)}
	queue := func(p *corev1.Pod) { k.work <- p.GetMetadata().GetNamespace() + "/" + p.GetMetadata().GetName() }
	inf, err := informer.New[*corev1.Pod](st, "", informer.Handlers[*corev1.Pod]{OnAdd: queue, OnUpdate: func(_, p *corev1.Pod) { queue(p) }})
	if err != nil {
		t.Fatal(err)
	}
	k.inf = inf
	var infs informer.Group
	infs.Add(inf)
	wg.Add(1)
	go func() {
		defer wg.Done()
		_ = inf.Run(ctx)
	}()
	if err := infs.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-ctx.Done():
					return
				case key := <-k.work:
					ns, name, _ := controller.SplitKey(key)
					k.handle(ctx, ns, name)
				}
			}
		}()
	}
	return k
}

// setReady makes pod name ready (true) or holds it not ready.
func (k *kubelet) setReady(ns, name string, ready bool) {
	k.mu.Lock()
	k.hold[name] = !ready
	k.mu.Unlock()
	k.work <- ns + "/" + name
}

// holdImage keeps every pod with a container of image not ready.
func (k *kubelet) holdImage(image string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.holdImages[image] = true
}

func (k *kubelet) held(p *corev1.Pod) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, ctr := range p.GetSpec().GetContainers() {
		if k.holdImages[ctr.GetImage()] {
			return true
		}
	}
	return k.hold[p.GetMetadata().GetName()]
}

func (k *kubelet) handle(ctx context.Context, ns, name string) {
	p, ok := k.inf.Get(ns, name)
	if !ok {
		return
	}
	if p.GetMetadata().GetDeletionTimestamp() != nil {
		go func() {
			if g := time.Duration(k.grace.Load()); g > 0 {
				select {
				case <-time.After(g):
				case <-ctx.Done():
				}
			}
			if _, err := k.store.Delete(ctx, objects.Pods, ns, name, 0); err != nil && !errors.Is(err, raftstore.ErrNotFound) {
				k.retry(ctx, ns, name)
			}
		}()
		return
	}
	if ph := p.GetStatus().GetPhase(); ph == "Succeeded" || ph == "Failed" {
		return // its containers ended (a Job's pod): nothing more to run
	}
	wantReady := !k.held(p)
	ready := false
	for _, c := range p.GetStatus().GetConditions() {
		if c.GetType() == "Ready" && c.GetStatus() == "True" {
			ready = true
		}
	}
	if p.GetSpec().GetNodeName() != "" && p.GetStatus().GetPhase() == "Running" && ready == wantReady {
		return
	}
	_, err := objects.Mutate(ctx, k.store, ns, name, func(p *corev1.Pod) error {
		if ph := p.GetStatus().GetPhase(); p.GetMetadata().GetDeletionTimestamp() != nil || ph == "Succeeded" || ph == "Failed" {
			return objects.ErrNoChange
		}
		if p.Spec.NodeName == "" {
			p.Spec.NodeName = fmt.Sprintf("node-%d", k.n.Add(1)%3)
		}
		now := timestamppb.Now()
		status := "False"
		if wantReady {
			status = "True"
		}
		p.Status = &corev1.PodStatus{Phase: "Running", StartTime: now, Conditions: []*corev1.PodCondition{
			{Type: "PodScheduled", Status: "True", LastTransitionTime: now},
			{Type: "Ready", Status: status, LastTransitionTime: now},
		}}
		for _, ctr := range p.GetSpec().GetContainers() {
			p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, &corev1.ContainerStatus{Name: ctr.GetName(), Ready: wantReady})
		}
		return nil
	})
	if err != nil && !errors.Is(err, raftstore.ErrNotFound) {
		k.retry(ctx, ns, name)
	}
}

// retry handles pod ns/name again shortly, as kubelet retries a status
// update the API server did not take (a conflict, a store busy electing):
// the informer sends no new event for a write that did not happen.
func (k *kubelet) retry(ctx context.Context, ns, name string) {
	time.AfterFunc(100*time.Millisecond, func() {
		if ctx.Err() == nil {
			select {
			case k.work <- ns + "/" + name:
			default:
			}
		}
	})
}
