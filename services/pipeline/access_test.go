package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/bus/bustest"
	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/eventsv1"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/raftstore/raftstoretest"
	"github.com/podflow/podflow/services/ipalloc"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/pipeline"
)

// event returns an envelope of type t addressed to node n1, for pod
// default/web.
func event(t *testing.T, typ eventsv1.Type, id string) *eventsv1.Envelope {
	t.Helper()
	env := &eventsv1.Envelope{RequestId: id, PodUid: "uid-" + id, Namespace: "default", PodName: "web", NodeName: "n1"}
	m := env.ProtoReflect()
	fields := m.Descriptor().Oneofs().ByName("payload").Fields()
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		if string(fd.Message().Name()) == string(typ) {
			m.Set(fd, protoreflect.ValueOfMessage(m.NewField(fd).Message()))
			return env
		}
	}
	t.Fatalf("no event type %q", typ)
	return nil
}

// lockedDown is a server with podflow's roles, its streams and every
// stage's consumers, plus the node agents of nodes n1 and n2.
func lockedDown(t testing.TB) (*bus.Embedded, *bus.Conn) {
	t.Helper()
	cfg := bus.DefaultEmbeddedConfig(t.TempDir())
	cfg.Roles = pipeline.Roles()
	for _, n := range []string{"n1", "n2"} {
		cfg.Roles = append(cfg.Roles, pipeline.NodeAgentRole(pipeline.NodeAgentRunnerConfig(n), n))
	}
	srv := bustest.ServerAt(t, cfg)
	admin := bustest.Connect(t, srv, "admin")
	topo, err := pipeline.Topology(bus.DefaultStreamsConfig())
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"n1", "n2"} {
		topo.Consumers = append(topo.Consumers, pipeline.NodeAgentRunnerConfig(n).ConsumerSpecs()...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), bustest.Timeout)
	defer cancel()
	if err := bus.Provision(ctx, admin.JetStream(), topo); err != nil {
		t.Fatal(err)
	}
	return srv, admin
}

// refused reports whether the server refuses a publish by conn.
func refused(t *testing.T, conn *bus.Conn, env *eventsv1.Envelope) bool {
	t.Helper()
	return len(accepted(conn, env)) == 0
}

// accepted publishes envs concurrently and returns the types the server
// acknowledged. A refused publish gets no PubAck (the server answers the
// connection with a permissions violation), so it times out; what matters
// is that it never reaches the stream, which the callers check too.
func accepted(conn *bus.Conn, envs ...*eventsv1.Envelope) []eventsv1.Type {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var (
		mu  sync.Mutex
		out []eventsv1.Type
		wg  sync.WaitGroup
	)
	for _, env := range envs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := conn.Publish(ctx, env); err == nil {
				mu.Lock()
				out = append(out, env.Type())
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return out
}

// allowedCalls runs calls concurrently, each bounded by a short timeout,
// and returns the names of those that succeeded. A JetStream API request
// the server refuses is never answered, so a refused call times out; an
// allowed one answers within milliseconds.
func allowedCalls(calls map[string]func(ctx context.Context) error) []string {
	var (
		mu  sync.Mutex
		out []string
		wg  sync.WaitGroup
	)
	for name, call := range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			if call(ctx) == nil {
				mu.Lock()
				out = append(out, name)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	slices.Sort(out)
	return out
}

// management are the calls only the admin may make: create a stream,
// create a consumer, delete consumer (all through js).
func management(js jetstream.JetStream, consumer string) map[string]func(ctx context.Context) error {
	return map[string]func(ctx context.Context) error{
		"create a stream": func(ctx context.Context) error {
			_, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: "EVIL", Subjects: []string{"evil.>"}})
			return err
		},
		"create a consumer": func(ctx context.Context) error {
			_, err := js.CreateOrUpdateConsumer(ctx, bus.EventsStream, jetstream.ConsumerConfig{Durable: "evil"})
			return err
		},
		"delete its own consumer": func(ctx context.Context) error { return js.DeleteConsumer(ctx, bus.EventsStream, consumer) },
		"purge the events stream": func(ctx context.Context) error {
			s, err := js.Stream(ctx, bus.EventsStream)
			if err != nil {
				return err
			}
			return s.Purge(ctx)
		},
	}
}

// consumerInfo is a call looking consumer up on the events stream.
func consumerInfo(js jetstream.JetStream, consumer string) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		_, err := js.Consumer(ctx, bus.EventsStream, consumer)
		return err
	}
}

// subscribeRefused reports whether the server refuses conn a subscription
// to subject (the refusal arrives asynchronously, as the connection's
// last error).
func subscribeRefused(t *testing.T, conn *bus.Conn, subject string) bool {
	t.Helper()
	nc := conn.NATS()
	sub, err := nc.SubscribeSync(subject)
	if err != nil {
		return true
	}
	defer sub.Unsubscribe()
	if err := nc.FlushTimeout(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	// The server answers the subscription before the flush's PONG, so a
	// refusal is normally here already; allow a loaded machine time.
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if err := nc.LastError(); err != nil && errors.Is(err, nats.ErrPermissionViolation) && strings.Contains(err.Error(), subject) {
			return true
		}
		time.Sleep(10 * time.Millisecond)
	}
	return false
}

// serves reports whether server, subscribed to subject, answers a request
// asker sends there.
func serves(t *testing.T, server, asker *bus.Conn, subject string) error {
	t.Helper()
	sub, err := server.NATS().Subscribe(subject, func(m *nats.Msg) { _ = m.Respond([]byte("ok")) })
	if err != nil {
		return err
	}
	defer sub.Unsubscribe()
	if err := server.NATS().Flush(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), bustest.Timeout)
	defer cancel()
	msg, err := asker.NATS().RequestWithContext(ctx, subject, nil)
	if err != nil {
		return err
	}
	if string(msg.Data) != "ok" {
		return fmt.Errorf("answer %q", msg.Data)
	}
	return nil
}

// runOnce runs conn's runner of cfg until it has handled an input of type
// in (published by the admin), each delivery publishing out (when set).
func runOnce(t *testing.T, admin, conn *bus.Conn, cfg bus.RunnerConfig, in eventsv1.Type, out eventsv1.Type) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), bustest.Timeout)
	defer cancel()
	var handled, published atomic.Int32
	var handledOwn atomic.Bool
	r, err := bus.NewRunner(conn, cfg, func(ctx context.Context, d *bus.Delivery) error {
		handled.Add(1)
		if d.Envelope.GetRequestId() == "in-"+cfg.Consumer {
			handledOwn.Store(true)
		}
		if out != "" {
			next := event(t, out, "out")
			next.RequestId = d.Envelope.GetRequestId()
			if _, err := conn.Publish(ctx, next); err != nil {
				return err
			}
			published.Add(1)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(rctx) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("runner %s: %v", cfg.Consumer, err)
		}
	}()
	if _, err := admin.Publish(ctx, event(t, in, "in-"+cfg.Consumer)); err != nil {
		t.Fatal(err)
	}
	cons, err := admin.JetStream().Consumer(ctx, cfg.Stream, cfg.Consumer)
	if err != nil {
		t.Fatal(err)
	}
	// Earlier subtests' outputs may be this consumer's inputs too: every
	// delivery is handled once, acknowledged, and nothing is left. (The
	// server counts a stored message into a consumer's pending ones
	// asynchronously, after the publish acknowledgement, so the counts
	// alone may be all zero before the input is seen.)
	bustest.Eventually(t, cfg.Consumer+" handles and acknowledges its inputs", func() bool {
		if !handledOwn.Load() {
			return false
		}
		ci, err := cons.Info(ctx)
		return err == nil && ci.NumAckPending == 0 && ci.NumPending == 0 && ci.NumRedelivered == 0 &&
			ci.AckFloor.Consumer == ci.Delivered.Consumer && int64(ci.Delivered.Consumer) == int64(handled.Load())
	})
	if out != "" && published.Load() != handled.Load() {
		t.Errorf("%s published %s %d times for %d deliveries", cfg.Consumer, out, published.Load(), handled.Load())
	}
}

// TestStageRoles: every stage's NATS user may consume its own inputs and
// publish its own outputs, and the server refuses it everything else that
// matters: another stage's events, another stage's consumer, managing
// streams and consumers, and reading other identities' replies.
func TestStageRoles(t *testing.T) {
	t.Parallel()
	srv, admin := lockedDown(t)
	for _, stage := range pipeline.Stages {
		t.Run(stage, func(t *testing.T) {
			t.Parallel()
			conn := bustest.ConnectAs(t, srv, pipeline.StageRole(stage), stage+"-1")
			cfg, err := pipeline.RunnerConfig(stage, "1")
			if err != nil {
				t.Fatal(err)
			}
			var out eventsv1.Type
			if o := pipeline.Outputs[stage]; len(o) > 0 {
				out = o[0]
			}
			if pipeline.Controller(stage) {
				// No consumer (management, below, may not make one); it
				// publishes its outputs, if it has any.
				if out != "" {
					if got := accepted(conn, event(t, out, stage)); len(got) != 1 { // one pod per stage: no deduplication
						t.Errorf("controller stage %s may not publish its output %s", stage, out)
					}
				}
			} else {
				runOnce(t, admin, conn, cfg, pipeline.Inputs[stage][0], out)
			}

			// Every event type outside its outputs is refused.
			var forged []*eventsv1.Envelope
			for _, typ := range eventsv1.Types() {
				if bus.NodeLevel(typ) || typ == "DeadLetter" || slices.Contains(pipeline.Outputs[stage], typ) {
					continue
				}
				forged = append(forged, event(t, typ, "forged"))
			}
			if got := accepted(conn, forged...); len(got) > 0 {
				t.Errorf("stage %s may publish %v", stage, got)
			}
			// Not another stage's dead letters, nor a node's heartbeat.
			if _, err := conn.NATS().Request(bus.DLQSubject("other"), nil, time.Second); err == nil {
				t.Errorf("stage %s may write another stage's dead letters", stage)
			}
			hb, _ := bus.NewEnvelope(&eventsv1.NodeHeartbeat{})
			hb.NodeName = "n1"
			if !refused(t, conn, hb) {
				t.Errorf("stage %s may publish a node's heartbeat", stage)
			}
			// Another stage's consumer (not even its info), a node's, and
			// managing streams and consumers are refused.
			calls := management(conn.JetStream(), stage)
			for _, other := range pipeline.Stages {
				if other != stage {
					calls["look up the consumer of "+other] = consumerInfo(conn.JetStream(), other)
				}
			}
			calls["look up node n1's consumer"] = consumerInfo(conn.JetStream(), pipeline.NodeAgentRunnerConfig("n1").Consumer)
			if got := allowedCalls(calls); len(got) > 0 {
				t.Errorf("stage %s may %q", stage, got)
			}
			// Its own replies only.
			if !subscribeRefused(t, conn, "_INBOX.>") {
				t.Errorf("stage %s may read every identity's replies", stage)
			}
			// No stage answers for a node: its logs, exec sessions and
			// metrics (kubectl logs, exec, top) come from the node alone.
			for _, subject := range []string{pipeline.LogsPrefix + ".n1", pipeline.ExecPrefix + ".n1", pipeline.MetricsPrefix + ".n1"} {
				if !subscribeRefused(t, conn, subject) {
					t.Errorf("stage %s may answer %s", stage, subject)
				}
			}
		})
	}
	t.Cleanup(func() { checkStream(t, admin) })
}

// checkStream: the admin's view once every stage's subtest is done.
func checkStream(t *testing.T, admin *bus.Conn) {
	// The admin's view: nothing forged reached the stream. Inputs (one per
	// stage) and one output per stage that has outputs.
	ctx, cancel := context.WithTimeout(context.Background(), bustest.Timeout)
	defer cancel()
	info, err := admin.JetStream().Stream(ctx, bus.EventsStream)
	if err != nil {
		t.Fatal(err)
	}
	want := uint64(0)
	for _, s := range pipeline.Stages {
		if !pipeline.Controller(s) {
			want++ // its input
		}
		if len(pipeline.Outputs[s]) > 0 {
			want++
		}
	}
	if got := info.CachedInfo().State.Msgs; got != want {
		t.Errorf("the events stream holds %d messages, want %d (inputs and outputs only)", got, want)
	}
}

// TestNodeRole: a node agent pulls its node's consumer and publishes what
// happens on its node; it may not schedule pods (PodScheduled), admit
// them, pull a stage's or another node's consumer, report for another node
// (its pods' events, its heartbeat, its logs) or create a consumer.
func TestNodeRole(t *testing.T) {
	t.Parallel()
	srv, admin := lockedDown(t)
	n1 := pipeline.NodeAgentRunnerConfig("n1")
	conn := bustest.ConnectAs(t, srv, pipeline.NodeRole("n1"), "n1")
	runOnce(t, admin, conn, n1, "PodScheduled", "PodRunning")
	var forged []*eventsv1.Envelope
	for _, typ := range []eventsv1.Type{"PodScheduled", "PodAdmitted", "PodAuthorized", "PodPersisted", "PodRequested", "PodDeleteRequested"} {
		forged = append(forged, event(t, typ, "forged"))
	}
	for _, typ := range pipeline.NodeAgentOutputs {
		env := event(t, typ, "other-node")
		env.NodeName = "n2"
		forged = append(forged, env)
	}
	if got := accepted(conn, forged...); len(got) > 0 {
		t.Errorf("node n1 may publish %v (on n2's subjects for the node events)", got)
	}
	heartbeat := func(node string) *eventsv1.Envelope {
		hb, err := bus.NewEnvelope(&eventsv1.NodeHeartbeat{})
		if err != nil {
			t.Fatal(err)
		}
		hb.NodeName = node
		return hb
	}
	pctx, pcancel := context.WithTimeout(context.Background(), bustest.Timeout)
	defer pcancel()
	if _, err := conn.Publish(pctx, heartbeat("n1")); err != nil {
		t.Errorf("node n1 may not publish its heartbeat: %v", err)
	}
	if !refused(t, conn, heartbeat("n2")) {
		t.Error("node n1 may publish n2's heartbeat")
	}
	calls := management(conn.JetStream(), n1.Consumer)
	for _, s := range pipeline.Stages {
		calls["look up the consumer of stage "+s] = consumerInfo(conn.JetStream(), s)
	}
	calls["look up node n2's consumer"] = consumerInfo(conn.JetStream(), pipeline.NodeAgentRunnerConfig("n2").Consumer)
	if got := allowedCalls(calls); len(got) > 0 {
		t.Errorf("node n1 may %q", got)
	}
	// It answers its own node's log requests, not another node's.
	if err := serves(t, conn, admin, pipeline.LogsPrefix+".n1"); err != nil {
		t.Errorf("node n1 does not answer its log requests: %v", err)
	}
	if !subscribeRefused(t, conn, pipeline.LogsPrefix+".n2") {
		t.Error("node n1 may answer n2's log requests")
	}
	// Likewise its own metrics requests (kubectl top), and exec sessions
	// opened to itself only.
	if err := serves(t, conn, admin, pipeline.MetricsPrefix+".n1"); err != nil {
		t.Errorf("node n1 does not answer its metrics requests: %v", err)
	}
	for _, subject := range []string{pipeline.MetricsPrefix + ".n2", pipeline.MetricsPrefix + ".*", pipeline.ExecPrefix + ".n2"} {
		if !subscribeRefused(t, conn, subject) {
			t.Errorf("node n1 may subscribe to %s", subject)
		}
	}
}

// TestStoreRole: the store serves podflow.store.> and answers to anybody's
// inbox, but publishes no lifecycle event and reads no stream.
func TestStoreRole(t *testing.T) {
	t.Parallel()
	srv, admin := lockedDown(t)
	conn := bustest.ConnectAs(t, srv, pipeline.RoleStore, "store-1")
	if err := serves(t, conn, admin, bus.StorePrefix+".get"); err != nil {
		t.Fatalf("the store does not answer: %v", err)
	}
	if !refused(t, conn, event(t, "PodScheduled", "forged")) {
		t.Error("the store may publish PodScheduled")
	}
	calls := management(conn.JetStream(), "scheduler")
	calls["look up the events stream"] = func(ctx context.Context) error {
		_, err := conn.JetStream().Stream(ctx, bus.EventsStream)
		return err
	}
	if got := allowedCalls(calls); len(got) > 0 {
		t.Errorf("the store may %q", got)
	}
}

// storeWithPolicy starts a one-replica store on srv (storeReplicas).
func storeWithPolicy(t *testing.T, srv *bus.Embedded) func(role, writer string) *raftstore.Client {
	t.Helper()
	return storeReplicas(t, srv, 1)
}

// storeReplicas starts an n-replica store on srv, each replica serving as
// the store role with podflow's read and write policies, and returns a
// function that connects a client as role, reading and writing as writer
// (the admin: unnamed). It returns once the store has elected a leader
// and holds Namespace default.
func storeReplicas(t *testing.T, srv *bus.Embedded, n int, opts ...raftstoretest.Option) func(role, writer string) *raftstore.Client {
	t.Helper()
	ls := raftstoretest.Listeners(t, n)
	var peers []raftstore.Peer
	for i, l := range ls {
		peers = append(peers, raftstore.Peer{ID: fmt.Sprintf("store-%d", i+1), Address: l.Addr().String()})
	}
	ctx, cancel := context.WithTimeout(context.Background(), bustest.Timeout)
	defer cancel()
	for i, p := range peers {
		cfg := raftstore.DefaultConfig()
		raftstoretest.FastConfig(&cfg)
		if n == 1 {
			raftstoretest.SoloConfig(&cfg)
		}
		cfg.ID, cfg.RaftAddr, cfg.RaftListener, cfg.DataDir = p.ID, p.Address, ls[i], t.TempDir()
		cfg.Bootstrap = peers
		cfg.TLS = raftstoretest.PeerTLS(t)
		cfg.Conn = bustest.ConnectAs(t, srv, pipeline.RoleStore, p.ID).NATS()
		cfg.WriteACL, cfg.ReadACL, cfg.ReadFilter = pipeline.StoreWriteACL, pipeline.StoreReadACL, pipeline.StoreReadFilter
		cfg.WriteFilter, cfg.ReplyACL = pipeline.StoreWriteFilter, pipeline.StoreReplyACL
		for _, o := range opts {
			o(&cfg)
		}
		node, err := raftstore.NewNode(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := node.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = node.Shutdown() })
	}
	client := func(role, writer string) *raftstore.Client {
		t.Helper()
		var conn *bus.Conn
		if role == bus.RoleAdmin {
			conn = bustest.Connect(t, srv, "admin-store")
		} else {
			conn = bustest.ConnectAs(t, srv, role, role)
		}
		c, err := raftstore.NewClient(conn.NATS(), raftstore.ClientConfig{User: writer, Timeout: 3 * time.Second, AttemptTimeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	admin := client(bus.RoleAdmin, "")
	ns, err := objects.Encode(&corev1.Namespace{Metadata: &corev1.ObjectMeta{Name: "default"}})
	if err != nil {
		t.Fatal(err)
	}
	raftstoretest.WaitFor(t, bustest.Timeout, "the store to elect a leader", func() bool {
		_, err := admin.Create(ctx, objects.Namespaces.Key("", "default"), ns)
		return err == nil || errors.Is(err, raftstore.ErrAlreadyExists)
	})
	return client
}

// TestStoreWritesByRole: with the real store serving as the store role
// and its ACLs set to podflow's policy, a stage reads no Secret unless it
// is the api stage, and writes only the kinds
// its step records — the endpoints stage an EndpointSlice but not a
// ClusterRoleBinding that would make it an admin — and cannot pass itself
// off as another writer: the bus refuses its publish on another's write
// subject. The admin's writes are not checked.
func TestStoreWritesByRole(t *testing.T) {
	t.Parallel()
	srv, _ := lockedDown(t)
	client := storeWithPolicy(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), bustest.Timeout)
	defer cancel()
	admin := client(bus.RoleAdmin, "")
	slice := objects.EndpointSlices.Key("default", "web")
	binding := objects.ClusterRoleBindings.Key("", "endpoints-is-admin")
	endpoints := client(pipeline.StageRole(pipeline.Endpoints), pipeline.StageRole(pipeline.Endpoints))
	if _, err := endpoints.Create(ctx, slice, []byte("slice")); err != nil {
		t.Errorf("the endpoints stage writes an EndpointSlice: %v", err)
	}
	if _, err := endpoints.Create(ctx, binding, []byte("binding")); !errors.Is(err, raftstore.ErrForbidden) {
		t.Errorf("the endpoints stage writes a ClusterRoleBinding: %v, want ErrForbidden", err)
	}
	posing := client(pipeline.StageRole(pipeline.Endpoints), pipeline.StageRole(pipeline.API))
	pctx, pcancel := context.WithTimeout(ctx, 3*time.Second) // the bus drops it: no answer comes
	defer pcancel()
	if _, err := posing.Create(pctx, binding, []byte("binding")); err == nil {
		t.Error("the endpoints stage wrote as the api stage")
	}
	admission := client(pipeline.StageRole(pipeline.Admission), pipeline.StageRole(pipeline.Admission))
	if _, err := admission.Create(ctx, objects.Pods.Key("default", "p"), []byte("pod")); !errors.Is(err, raftstore.ErrForbidden) {
		t.Errorf("the admission stage writes a pod: %v, want ErrForbidden (it writes nothing)", err)
	}
	// Reads: the scheduler reads pods but not Secrets; the api stage both.
	secret := objects.Secrets.Key("default", "token")
	if _, err := admin.Create(ctx, secret, []byte("s3cr3t")); err != nil {
		t.Fatal(err)
	}
	scheduler := client(pipeline.StageRole(pipeline.Scheduler), pipeline.StageRole(pipeline.Scheduler))
	if _, err := scheduler.Get(ctx, secret); !errors.Is(err, raftstore.ErrForbidden) {
		t.Errorf("the scheduler reads a Secret: %v, want ErrForbidden", err)
	}
	if _, _, err := scheduler.List(ctx, objects.Secrets.Prefix("")); !errors.Is(err, raftstore.ErrForbidden) {
		t.Errorf("the scheduler lists Secrets: %v, want ErrForbidden", err)
	}
	if _, err := scheduler.Watch(ctx, "/registry/", 0); !errors.Is(err, raftstore.ErrForbidden) {
		t.Errorf("the scheduler watches everything: %v, want ErrForbidden", err)
	}
	if _, _, err := scheduler.List(ctx, objects.EndpointSlices.Prefix("")); err != nil {
		t.Errorf("the scheduler lists EndpointSlices: %v", err)
	}
	api := client(pipeline.StageRole(pipeline.API), pipeline.StageRole(pipeline.API))
	if kv, err := api.Get(ctx, secret); err != nil || string(kv.Value) != "s3cr3t" {
		t.Errorf("the api stage reads a Secret: %v", err)
	}
	if _, err := admin.Get(ctx, binding); !errors.Is(err, raftstore.ErrNotFound) {
		t.Errorf("the ClusterRoleBinding after the refused writes: %v, want not found", err)
	}
	if _, err := admin.Create(ctx, binding, []byte("binding")); err != nil {
		t.Errorf("the admin writes a ClusterRoleBinding: %v", err)
	}
}

// TestStoreWriteACL: the policy itself, kind by kind; the api stage
// writes generic kinds, those registered at run time too, and custom
// resources in kube-apiserver's layout (the store's process does not
// know the CustomResourceDefinitions), nothing else the store does not
// know.
func TestStoreWriteACL(t *testing.T) {
	t.Parallel()
	runtimeKind, err := objects.Register(objects.GenericKind{Group: "acl.test.io", Version: "v1", Kind: "Widget", Resource: "widgets",
		Namespaced: true, Prefix: "/registry/acl.test.io/widgets/"})
	if err != nil {
		t.Fatal(err)
	}
	pod, node, crb := objects.Pods.Key("default", "p"), objects.Nodes.Key("", "n1"), objects.ClusterRoleBindings.Key("", "x")
	for _, c := range []struct {
		writer, key string
		want        bool
	}{
		{pipeline.StageRole(pipeline.API), crb, true},
		{pipeline.StageRole(pipeline.API), objects.Deployments.Key("default", "web"), true},
		{pipeline.StageRole(pipeline.API), objects.IPAddresses.Key("", "10.96.0.10"), true},
		{pipeline.StageRole(pipeline.API), objects.CustomResourceDefinitions.Key("", "a.b.c"), true},
		{pipeline.StageRole(pipeline.API), runtimeKind.Key("default", "w"), true},
		{pipeline.StageRole(pipeline.API), "/registry/unregistered.io/things/default/w", true},
		{pipeline.StageRole(pipeline.API), "/registry/unregistered.io/things/w", true},
		{pipeline.StageRole(pipeline.API), "/registry/unregistered.io/things/", false},
		{pipeline.StageRole(pipeline.API), "/registry/nodots/things/default/w", false},
		{pipeline.StageRole(pipeline.API), pipeline.PodCIDRPrefix + "10.244.1.0-24", false},
		{pipeline.StageRole(pipeline.API), "/registry/.io/things/w", false},
		{pipeline.StageRole(pipeline.API), "/other/a.io/things/w", false},
		{pipeline.StageRole(pipeline.Scheduler), "/registry/unregistered.io/things/default/w", false},
		{pipeline.StageRole(pipeline.Scheduler), objects.Deployments.Key("default", "web"), false},
		{pipeline.StageRole(pipeline.Endpoints), runtimeKind.Key("default", "w"), false},
		{pipeline.StageRole(pipeline.Persistence), pod, true},
		{pipeline.StageRole(pipeline.Persistence), crb, false},
		{pipeline.StageRole(pipeline.Persistence), pipeline.RequestIDPrefix + "ab12", true},
		{pipeline.StageRole(pipeline.API), pipeline.RequestIDPrefix + "ab12", false},
		{pipeline.StageRole(pipeline.Status), pipeline.RequestIDPrefix + "ab12", false},
		{pipeline.StageRole(pipeline.API), ipalloc.NodePortKey(30080), true},
		{pipeline.StageRole(pipeline.Endpoints), ipalloc.NodePortKey(30080), false},
		{pipeline.StageRole(pipeline.Endpoints), objects.Endpoints.Key("default", "web"), true},
		{pipeline.StageRole(pipeline.Scheduler), objects.Endpoints.Key("default", "web"), false},
		{pipeline.NodeRole("n1"), ipalloc.NodePortKey(30080), false},
		{pipeline.StageRole(pipeline.Scheduler), objects.NodeAllocations.Key("", "n1"), true},
		{pipeline.StageRole(pipeline.Scheduler), node, false},
		{pipeline.StageRole(pipeline.Status), node, true},
		{pipeline.StageRole(pipeline.Admission), pod, false},
		{pipeline.StageRole(pipeline.Endpoints), pod, false},
		{"stage-unknown", pod, false},
		{pipeline.NodeRole("n1"), node, true},
		{pipeline.NodeRole("n1"), objects.Nodes.Key("", "n2"), false},
		{pipeline.NodeRole("n1"), objects.Nodes.Key("", "n1-other"), false},
		{pipeline.NodeRole("n1"), pipeline.PodCIDRPrefix + "10.244.1.0-24", true},
		{pipeline.NodeRole("n1"), pod, false},
		{pipeline.NodeRole("n1"), pipeline.HostPrefix + "h1", false}, // the hosts it routes via: the admin's
		{pipeline.NodeRole("n.1"), objects.Nodes.Key("", "n.1"), true},
		{pipeline.SimNodesRole("sim"), objects.Nodes.Key("", "sim-node-0007"), true},
		{pipeline.SimNodesRole("sim"), pod, false},
		{pipeline.SimNodesRole("sim"), pipeline.PodCIDRPrefix + "10.244.1.0-24", false},
		{pipeline.SimNodesRole("sim"), objects.Events.Key("default", "e"), true},
		{pipeline.RoleStore, pod, false},
		{bus.UserRole("alice"), pod, false},
	} {
		if got := pipeline.StoreWriteACL(c.writer, c.key); got != c.want {
			t.Errorf("StoreWriteACL(%q, %q) = %v, want %v", c.writer, c.key, got, c.want)
		}
	}
}

// TestStoreReadACL: only the api stage and node agents read Secrets.
func TestStoreReadACL(t *testing.T) {
	t.Parallel()
	secret, pod := objects.Secrets.Key("default", "token"), objects.Pods.Key("default", "p")
	for _, c := range []struct {
		user, key string
		prefix    bool
		want      bool
	}{
		{pipeline.StageRole(pipeline.API), secret, false, true},
		{pipeline.StageRole(pipeline.API), "/registry/", true, true},
		{pipeline.NodeRole("n1"), secret, false, true},
		{pipeline.SimNodesRole("sim"), objects.Secrets.Prefix("default"), true, true},
		{pipeline.StageRole(pipeline.Scheduler), pod, false, true},
		{pipeline.StageRole(pipeline.Scheduler), objects.Pods.Prefix(""), true, true},
		{pipeline.StageRole(pipeline.Scheduler), secret, false, false},
		{pipeline.StageRole(pipeline.Admission), objects.Secrets.Prefix("default"), true, false},
		{pipeline.StageRole(pipeline.Endpoints), "/registry/", true, false},
		{pipeline.StageRole(pipeline.Status), "/", true, false},
		{pipeline.StageRole(pipeline.ResourceQuota), "/registry/", true, true}, // counts Secrets
		{pipeline.StageRole(pipeline.ServiceAccount), secret, false, false},
		{pipeline.RoleStore, secret, false, false},
		{pipeline.NodeRole("n1"), pipeline.HostPrefix, true, true}, // host-gw routes
	} {
		if got := pipeline.StoreReadACL(c.user, c.key, c.prefix); got != c.want {
			t.Errorf("StoreReadACL(%q, %q, prefix=%v) = %v, want %v", c.user, c.key, c.prefix, got, c.want)
		}
	}
}

// TestNodeLeaseACL: a node writes and reads its own Lease in
// kube-node-lease only (kube's node authorizer and NodeRestriction); a
// simulated cluster writes any node's.
func TestNodeLeaseACL(t *testing.T) {
	t.Parallel()
	key := func(node string) string { return objects.Leases.Key(pipeline.NodeLeaseNamespace, node) }
	n1 := pipeline.NodeRole("n1")
	switch {
	case !pipeline.StoreWriteACL(n1, key("n1")):
		t.Error("a node may not renew its Lease")
	case pipeline.StoreWriteACL(n1, key("n2")):
		t.Error("a node may renew another node's Lease")
	case pipeline.StoreWriteACL(n1, objects.Leases.Key("default", "n1")):
		t.Error("a node may write a Lease outside kube-node-lease")
	case !pipeline.StoreReadFilter(n1, key("n1"), nil, nil):
		t.Error("a node may not read its Lease")
	case pipeline.StoreReadFilter(n1, key("n2"), nil, nil):
		t.Error("a node may read another node's Lease")
	case !pipeline.StoreWriteACL(pipeline.SimNodesRole("sim"), key("sim-node-0001")):
		t.Error("a simulated cluster may not renew its nodes' Leases")
	}
}

// TestNodesReadHosts: every node reads every host's record (the
// addresses its host-gw routes go via) and writes none.
func TestNodesReadHosts(t *testing.T) {
	t.Parallel()
	n1 := pipeline.NodeRole("n1")
	for _, host := range []string{"n1", "h2"} {
		key := pipeline.HostPrefix + host
		if !pipeline.StoreReadACL(n1, key, false) || !pipeline.StoreReadFilter(n1, key, []byte(`{"name":"`+host+`"}`), nil) {
			t.Errorf("node n1 may not read %s", key)
		}
		if pipeline.StoreWriteACL(n1, key) {
			t.Errorf("node n1 may write %s", key)
		}
	}
}

// reloadUsers adds and removes a user of srv and reloads its credentials
// back to back, counting the reloads, until stop, which returns the first
// error of the reloads (they end at it).
func reloadUsers(srv *bus.Embedded) (reloads *atomic.Int64, stop func() error) {
	reloads = new(atomic.Int64)
	done, reloaded := make(chan struct{}), make(chan error, 1)
	go func() {
		defer close(reloaded)
		for {
			select {
			case <-done:
				return
			default:
			}
			for _, change := range []func(string, string) error{
				func(f, u string) error { _, err := bus.AddUser(f, u); return err },
				bus.RemoveUser,
			} {
				if err := change(srv.CredsFile(), "reloader"); err != nil {
					reloaded <- err
					return
				}
				if err := srv.ReloadCredentials(); err != nil {
					reloaded <- err
					return
				}
				reloads.Add(1)
			}
		}
	}()
	return reloads, func() error { close(done); return <-reloaded }
}
