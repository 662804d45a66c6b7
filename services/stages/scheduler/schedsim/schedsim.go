// Package schedsim runs scheduler stage replicas against real parts in one
// process — an embedded NATS JetStream server, a raftstore cluster on
// loopback TCP transports — with nodes and pods written to the store the
// way node agents and the persistence stage write them, and checks the
// outcome from the store's history and the event stream. The scheduler's
// integration tests and `podflow bench scheduler` are built on it.
//
// The caller:
//
//  1. starts an Env with Start (it owns cfg.Dir, which it creates and
//     removes itself) and calls Close when done;
//  2. writes nodes with CreateNodes, starts replicas with StartReplica,
//     submits pods with CreatePods then Publish (or Submit);
//  3. waits with Recorder.Wait and checks the invariants with Verify.
//
// Example:
//
//	env, err := schedsim.Start(ctx, schedsim.DefaultConfig(dir))
//	if err != nil { ... }
//	defer env.Close()
//	_ = env.CreateNodes(ctx, schedsim.Nodes(500, "8", "32Gi", 110))
//	r, _ := env.StartReplica(ctx, "s1")
//	pods := schedsim.Pods(5000, "250m", "256Mi")
//	_ = env.Submit(ctx, pods)
//	_ = env.Scheduled.Wait(ctx, len(pods))
//	report, err := env.Verify(ctx)
package schedsim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/eventsv1"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/raftstore/raftstoretest"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/pipeline"
	"github.com/podflow/podflow/services/stage"
	"github.com/podflow/podflow/services/stages/scheduler"
)

// Config configures an Env.
type Config struct {
	// Dir holds the bus's and the store's data; Start creates it and
	// Close removes it.
	Dir string
	// StoreReplicas is the raftstore cluster's size. Default 3.
	StoreReplicas int
	// StoreNoSync disables the raft log's fsync (for tests; a benchmark
	// should say whether it set it).
	StoreNoSync bool
	// AckWait of the scheduler's consumer: how soon the events a dead
	// replica held come back to the others. Default 30s.
	AckWait time.Duration
	// Stage configures every scheduler replica.
	Stage scheduler.StageConfig
	// ResyncPeriod of every replica's reconciliation; 0 reconciles only
	// at start.
	ResyncPeriod time.Duration
	// Concurrency overrides the runner's handlers in flight per replica
	// (0 keeps pipeline.RunnerConfig's).
	Concurrency int
	// Log receives the replicas' logs; nil discards them.
	Log *slog.Logger
}

// DefaultConfig returns a 3-replica store and the stage's defaults.
func DefaultConfig(dir string) Config {
	return Config{Dir: dir, StoreReplicas: 3, AckWait: 30 * time.Second, Stage: scheduler.DefaultStageConfig()}
}

// Validate checks the Config.
func (c Config) Validate() error {
	if c.Dir == "" || c.StoreReplicas < 1 || c.AckWait <= 0 || c.ResyncPeriod < 0 || c.Concurrency < 0 {
		return fmt.Errorf("schedsim: config: Dir %q, StoreReplicas %d, AckWait %s, ResyncPeriod %s and Concurrency %d", c.Dir, c.StoreReplicas, c.AckWait, c.ResyncPeriod, c.Concurrency)
	}
	return c.Stage.Validate()
}

// Env is a running bus, store and set of scheduler replicas.
type Env struct {
	cfg  Config
	Bus  *bus.Embedded
	Conn *bus.Conn // the harness's own connection
	// Store is the harness's store client (its own connection).
	Store *objects.Store
	// Scheduled records every PodScheduled in the stream, from Start on.
	Scheduled *Recorder

	storeNodes []*raftstore.Node
	storeConns []*bus.Conn
	startRev   int64

	mu         sync.Mutex
	replicas   []*Replica
	finalizers []*Finalizer
}

// Start starts the bus, provisions the pipeline's streams and consumers,
// starts the store and waits for its leader.
func Start(ctx context.Context, cfg Config) (_ *Env, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	e := &Env{cfg: cfg}
	defer func() {
		if err != nil {
			e.Close()
		}
	}()
	if e.Bus, err = bus.StartEmbedded(ctx, bus.DefaultEmbeddedConfig(filepath.Join(cfg.Dir, "bus"))); err != nil {
		return nil, err
	}
	if e.Conn, err = e.connect(ctx, "schedsim"); err != nil {
		return nil, err
	}
	topo, err := pipeline.Topology(bus.DefaultStreamsConfig())
	if err != nil {
		return nil, err
	}
	for i := range topo.Consumers {
		if topo.Consumers[i].Durable == pipeline.Scheduler {
			topo.Consumers[i].AckWait = cfg.AckWait
		}
	}
	if err := bus.Provision(ctx, e.Conn.JetStream(), topo); err != nil {
		return nil, err
	}
	if err := e.startStore(ctx); err != nil {
		return nil, err
	}
	kv, err := raftstore.NewClient(e.Conn.NATS(), raftstore.ClientConfig{})
	if err != nil {
		return nil, err
	}
	e.Store = objects.New(kv)
	if e.startRev, err = e.waitStore(ctx); err != nil {
		return nil, err
	}
	if e.Scheduled, err = record(ctx, e.Conn.JetStream(), "PodScheduled"); err != nil {
		return nil, err
	}
	return e, nil
}

func (e *Env) connect(ctx context.Context, name string) (*bus.Conn, error) {
	c := e.Bus.ClientConfig(name)
	c.DrainTimeout = 2 * time.Second
	return bus.Connect(ctx, c)
}

func (e *Env) startStore(ctx context.Context) error {
	// Every replica's port is held from before the first one dials its
	// peers (raftstore.Config.RaftListener).
	var peers []raftstore.Peer
	var ls []net.Listener
	defer func() {
		for _, l := range ls[len(e.storeNodes):] { // those no replica took over
			_ = l.Close()
		}
	}()
	for i := range e.cfg.StoreReplicas {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		ls = append(ls, l)
		peers = append(peers, raftstore.Peer{ID: fmt.Sprintf("r%d", i), Address: l.Addr().String()})
	}
	for i, p := range peers {
		conn, err := e.connect(ctx, "store-"+p.ID)
		if err != nil {
			return err
		}
		e.storeConns = append(e.storeConns, conn)
		cfg := raftstore.DefaultConfig()
		cfg.ID, cfg.RaftAddr, cfg.RaftListener, cfg.Bootstrap, cfg.Conn = p.ID, p.Address, ls[i], peers, conn.NATS()
		if cfg.TLS, err = raftstoretest.EphemeralPeerTLS(); err != nil {
			return err
		}
		cfg.DataDir = filepath.Join(e.cfg.Dir, "store", p.ID)
		cfg.HeartbeatTimeout, cfg.ElectionTimeout, cfg.LeaderLeaseTimeout = 500*time.Millisecond, 500*time.Millisecond, 250*time.Millisecond
		cfg.CommitTimeout = 5 * time.Millisecond
		cfg.NoSync = e.cfg.StoreNoSync
		cfg.LogOutput = io.Discard
		n, err := raftstore.NewNode(cfg)
		if err != nil {
			return err
		}
		if err := n.Start(ctx); err != nil {
			return err
		}
		e.storeNodes = append(e.storeNodes, n)
	}
	return nil
}

// waitStore waits until the store takes writes and returns its revision.
func (e *Env) waitStore(ctx context.Context) (int64, error) {
	for {
		_, rev, err := e.Store.Client().List(ctx, "/schedsim/")
		if err == nil {
			return rev, nil
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("schedsim: store not ready: %w (last: %w)", ctx.Err(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Close stops the replicas, the recorder, the store and the bus, and
// removes Dir. It is safe to call on a partly started Env.
func (e *Env) Close() {
	e.mu.Lock()
	replicas, finalizers := e.replicas, e.finalizers
	e.replicas, e.finalizers = nil, nil
	e.mu.Unlock()
	for _, r := range replicas {
		_ = r.Stop()
	}
	for _, f := range finalizers {
		f.Stop()
	}
	if e.Scheduled != nil {
		e.Scheduled.stop()
	}
	for _, n := range e.storeNodes {
		_ = n.Shutdown()
	}
	for _, c := range e.storeConns {
		c.Close()
	}
	if e.Conn != nil {
		e.Conn.Close()
	}
	if e.Bus != nil {
		e.Bus.Shutdown()
	}
	_ = os.RemoveAll(e.cfg.Dir)
}

// Replica is one running scheduler stage replica, on its own NATS
// connection (bus and store client alike).
type Replica struct {
	Name  string
	Stage *scheduler.Stage

	conn   *bus.Conn
	cancel context.CancelFunc
	done   chan struct{}
	err    error
}

// StartReplica starts a scheduler replica named name and waits until its
// caches are synced. It runs until Stop, Kill or Close; ctx only bounds
// the start.
func (e *Env) StartReplica(ctx context.Context, name string) (*Replica, error) {
	conn, err := e.connect(ctx, name)
	if err != nil {
		return nil, err
	}
	kv, err := raftstore.NewClient(conn.NATS(), raftstore.ClientConfig{})
	if err != nil {
		conn.Close()
		return nil, err
	}
	env := stage.NewEnv(conn, objects.New(kv), pipeline.Scheduler, name, e.cfg.Log.With("replica", name))
	sc := e.cfg.Stage
	// Well inside AckWait, which tests shorten so that a killed
	// replica's events come back soon.
	sc.InProgressEvery = min(sc.InProgressEvery, e.cfg.AckWait/3)
	st, err := scheduler.NewStage(env, sc)
	if err != nil {
		conn.Close()
		return nil, err
	}
	rc, err := pipeline.RunnerConfig(pipeline.Scheduler, name)
	if err != nil {
		conn.Close()
		return nil, err
	}
	rc.AckWait, rc.DrainTimeout = e.cfg.AckWait, 2*time.Second
	if e.cfg.Concurrency > 0 {
		rc.Concurrency = e.cfg.Concurrency
	}
	rctx, cancel := context.WithCancel(context.Background())
	r := &Replica{Name: name, Stage: st, conn: conn, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		r.err = stage.Run(rctx, conn, env, st, stage.Config{Runner: rc, ResyncPeriod: e.cfg.ResyncPeriod})
	}()
	e.mu.Lock()
	e.replicas = append(e.replicas, r)
	e.mu.Unlock()
	select {
	case <-st.Started():
		return r, nil
	case <-r.done:
		return nil, fmt.Errorf("schedsim: replica %q: %w", name, r.err)
	case <-ctx.Done():
		return nil, fmt.Errorf("schedsim: replica %q not synced: %w", name, ctx.Err())
	}
}

// Stop stops the replica gracefully (the runner drains) and returns what
// stage.Run returned. It is idempotent.
func (r *Replica) Stop() error {
	r.cancel()
	<-r.done
	r.conn.Close()
	return r.err
}

// Kill stops the replica abruptly: its connection is closed without
// draining, so whatever it had in flight is lost mid-way (unacked events
// come back to the other replicas after AckWait), then its goroutines
// are stopped.
func (r *Replica) Kill() {
	r.conn.NATS().Close()
	r.cancel()
	<-r.done
}

// Sever closes the replica's connection at once, without draining, and
// returns without waiting: from then on the replica can neither write
// the store nor publish, as after a SIGKILL. A hook running inside the
// replica calls it; Kill then stops the rest.
func (r *Replica) Sever() { r.conn.NATS().Close() }

// Done is closed when the replica has stopped.
func (r *Replica) Done() <-chan struct{} { return r.done }

// Node returns a Ready node with the given allocatable cpu, memory and pod
// count (capacity the same).
func Node(name, cpu, memory string, pods int) *corev1.Node {
	res := map[string]string{"cpu": cpu, "memory": memory, "pods": fmt.Sprint(pods), "ephemeral-storage": "100Gi"}
	return &corev1.Node{
		Metadata: &corev1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/hostname": name}},
		Spec:     &corev1.NodeSpec{},
		Status: &corev1.NodeStatus{
			Capacity: res, Allocatable: res,
			Conditions: []*corev1.NodeCondition{{Type: "Ready", Status: "True", Reason: "KubeletReady", LastHeartbeatTime: timestamppb.Now()}},
		},
	}
}

// Nodes returns n nodes node-00000, node-00001, ... of one size.
func Nodes(n int, cpu, memory string, pods int) []*corev1.Node {
	out := make([]*corev1.Node, n)
	for i := range out {
		out[i] = Node(fmt.Sprintf("node-%05d", i), cpu, memory, pods)
	}
	return out
}

// Pod returns a pending pod of one container requesting cpu and memory,
// with a uid.
func Pod(namespace, name, cpu, memory string) *corev1.Pod {
	return &corev1.Pod{
		Metadata: &corev1.ObjectMeta{Namespace: namespace, Name: name, Uid: "uid-" + namespace + "-" + name},
		Spec: &corev1.PodSpec{Containers: []*corev1.Container{{
			Name: "app", Image: "registry.k8s.io/pause:3.10",
			Resources: &corev1.ResourceRequirements{Requests: map[string]string{"cpu": cpu, "memory": memory}},
		}}},
	}
}

// Pods returns n pods pod-00000, ... in namespace "bench".
func Pods(n int, cpu, memory string) []*corev1.Pod {
	out := make([]*corev1.Pod, n)
	for i := range out {
		out[i] = Pod("bench", fmt.Sprintf("pod-%05d", i), cpu, memory)
	}
	return out
}

// workers bounds the harness's concurrent store writes.
const workers = 64

// parallel runs f for each index with bounded concurrency.
func parallel(ctx context.Context, n int, f func(ctx context.Context, i int) error) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(workers)
	for i := range n {
		g.Go(func() error { return f(gctx, i) })
	}
	return g.Wait()
}

// CreateNodes writes nodes to the store (as their node agents register
// them).
func (e *Env) CreateNodes(ctx context.Context, nodes []*corev1.Node) error {
	return parallel(ctx, len(nodes), func(ctx context.Context, i int) error {
		_, err := e.Store.Create(ctx, proto.CloneOf(nodes[i]))
		return err
	})
}

// CreatePods stores pods as the persistence stage does (generation 1,
// creationTimestamp, phase Pending) and sets each one's resourceVersion.
func (e *Env) CreatePods(ctx context.Context, pods []*corev1.Pod) error {
	return parallel(ctx, len(pods), func(ctx context.Context, i int) error {
		p := pods[i]
		p.Metadata.Generation = 1
		p.Metadata.CreationTimestamp = timestamppb.Now()
		if p.Status == nil {
			p.Status = &corev1.PodStatus{}
		}
		p.Status.Phase = "Pending"
		_, err := e.Store.Create(ctx, p)
		return err
	})
}

// Publish publishes a PodPersisted for each stored pod, as the
// persistence stage does, as fast as the bus takes them.
func (e *Env) Publish(ctx context.Context, pods []*corev1.Pod) error {
	for _, p := range pods {
		md := p.GetMetadata()
		env := &eventsv1.Envelope{
			PodUid: md.GetUid(), RequestId: "req-" + md.GetUid(), Namespace: md.GetNamespace(), PodName: md.GetName(),
			Stage: pipeline.Persistence, Replica: "schedsim", Attempt: 1, Generation: 1, Traceparent: bus.NewTraceparent(),
		}
		if err := bus.SetPayload(env, &eventsv1.PodPersisted{Pod: p, Revision: objects.Revision(p)}); err != nil {
			return err
		}
		if _, err := e.Conn.PublishAsync(env); err != nil {
			return err
		}
	}
	return e.Conn.PublishAsyncComplete(ctx)
}

// Submit is CreatePods then Publish.
func (e *Env) Submit(ctx context.Context, pods []*corev1.Pod) error {
	if err := e.CreatePods(ctx, pods); err != nil {
		return err
	}
	return e.Publish(ctx, pods)
}

// ErrInvariant: Verify found a broken invariant.
var ErrInvariant = errors.New("schedsim: invariant violated")
