package namespace_test

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/bus/bustest"
	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/eventsv1"
	"github.com/podflow/podflow/raftstore/raftstoretest"
	"github.com/podflow/podflow/services/nslifecycle"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/pipeline"
	"github.com/podflow/podflow/services/stage"
	"github.com/podflow/podflow/services/stages/namespace"
	"github.com/podflow/podflow/services/stages/status"
)

// world is a real slice of podflow: an embedded JetStream server, three
// raft store replicas and the status stage (which removes the pods their
// node reports deleted).
type world struct {
	t     *testing.T
	conn  *bus.Conn
	store *objects.Store
	log   *slog.Logger
}

func newWorld(t *testing.T) *world {
	t.Helper()
	c := raftstoretest.MakeCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), bustest.Timeout)
	defer cancel()
	cfg := bus.DefaultConfig()
	cfg.URLs, cfg.Name = []string{c.NATS.ClientURL()}, "namespace-test"
	conn, err := bus.Connect(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	topo, err := pipeline.Topology(bus.DefaultStreamsConfig())
	if err != nil {
		t.Fatal(err)
	}
	if err := bus.Provision(ctx, conn.JetStream(), topo); err != nil {
		t.Fatal(err)
	}
	w := &world{t: t, conn: conn, store: objects.New(c.Client(t)), log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	// The status stage, for the whole test.
	env := w.env(pipeline.Status, "status-1")
	st, err := status.NewStage(env, status.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	rc, err := pipeline.RunnerConfig(pipeline.Status, env.Replica)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- stage.Run(runCtx, conn, env, st, stage.Config{Runner: rc}) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("status stage: %v", err)
		}
	})
	return w
}

func (w *world) env(name, replica string) stage.Env {
	return stage.NewEnv(w.conn, w.store, name, replica, w.log)
}

// controller is one running namespace controller (an api replica's).
type controller struct {
	stop func() error
}

func (w *world) startController(replica string) *controller {
	return w.startControllerWith(replica, namespace.Config{RetryInterval: 50 * time.Millisecond})
}

func (w *world) startControllerWith(replica string, cfg namespace.Config) *controller {
	w.t.Helper()
	c, err := namespace.New(w.env(pipeline.API, replica), cfg)
	if err != nil {
		w.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	g, gctx := errgroup.WithContext(ctx)
	if err := c.Start(gctx, g); err != nil {
		cancel()
		w.t.Fatal(err)
	}
	stopped := false
	stop := func() error {
		if stopped {
			return nil
		}
		stopped = true
		cancel()
		return g.Wait()
	}
	w.t.Cleanup(func() { _ = stop() })
	return &controller{stop: stop}
}

// nodeFinishes stands in for node n's agent: every pod bound to n that
// is being deleted is reported deleted (PodDeleted on the node's
// subject), as the agent does once its containers are stopped; the status
// stage then removes it.
func (w *world) nodeFinishes(ctx context.Context, node, ns string) {
	w.t.Helper()
	pods, _, err := objects.List[*corev1.Pod](ctx, w.store, ns)
	if err != nil {
		w.t.Fatal(err)
	}
	pub := stage.NewPublisher(w.conn)
	for _, p := range pods {
		md := p.GetMetadata()
		if p.GetSpec().GetNodeName() != node || md.GetDeletionTimestamp() == nil {
			continue
		}
		err := pub.Publish(ctx, &eventsv1.Envelope{
			PodUid: md.GetUid(), Namespace: md.GetNamespace(), PodName: md.GetName(), NodeName: node,
			Time: timestamppb.Now(), Stage: "node", Replica: node, Attempt: 1, Generation: md.GetGeneration(),
			Payload: &eventsv1.Envelope_PodDeleted{PodDeleted: &eventsv1.PodDeleted{}},
		})
		if err != nil {
			w.t.Fatal(err)
		}
	}
}

// count is how many objects of every content kind ns holds, by resource.
func (w *world) count(ctx context.Context, ns string) map[string]int {
	w.t.Helper()
	out := map[string]int{}
	for _, k := range namespace.Content() {
		kvs, _, err := w.store.KV().List(ctx, k.Prefix(ns))
		if err != nil {
			w.t.Fatal(err)
		}
		if len(kvs) > 0 {
			out[k.Resource] = len(kvs)
		}
	}
	return out
}

func condition(ns *corev1.Namespace, typ string) *corev1.NamespaceCondition {
	for _, c := range ns.GetStatus().GetConditions() {
		if c.GetType() == typ {
			return c
		}
	}
	return nil
}

// TestControllerRestart: the namespace controller, run by two replicas at
// once, deletes the pods of a namespace holding one object of every
// namespaced kind of the registry, and leaves the rest while a pod bound
// to a node is being stopped (OrderedNamespaceDeletion); killed while it
// waits, the namespace stays Terminating with its finalizer; a controller
// started afterwards (a restart: nothing is queued but what the store
// says) finishes it once the node has stopped the pod.
func TestControllerRestart(t *testing.T) {
	w := newWorld(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const ns = "team"
	nsObj := &corev1.Namespace{Metadata: &corev1.ObjectMeta{Name: ns, Uid: "ns-team"}}
	nslifecycle.PrepareForCreate(nsObj)
	if _, err := w.store.Create(ctx, nsObj); err != nil {
		t.Fatal(err)
	}
	kinds := namespace.Content()
	for _, k := range kinds {
		obj := k.New()
		md := objects.Meta(obj)
		md.Namespace, md.Name, md.Uid = ns, "x", "uid-"+k.Resource
		if _, err := w.store.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	bound := &corev1.Pod{Metadata: &corev1.ObjectMeta{Namespace: ns, Name: "bound", Uid: "uid-bound"}, Spec: &corev1.PodSpec{NodeName: "n1"}}
	if _, err := w.store.Create(ctx, bound); err != nil {
		t.Fatal(err)
	}
	if n := len(w.count(ctx, ns)); n != len(kinds) || n < 10 {
		t.Fatalf("content of %d kinds, want one of each of the %d namespaced kinds", n, len(kinds))
	}

	a1, a2 := w.startController("api-1"), w.startController("api-2")
	if st, _ := nslifecycle.Delete(ctx, w.store, ns); st.GetCode() != 200 {
		t.Fatalf("delete: %v", st)
	}
	bustest.Eventually(t, "the pods deleted first: the unbound one gone, the bound one terminating, the conditions saying why the namespace stays", func() bool {
		if left := w.count(ctx, ns); len(left) != len(kinds) || left["pods"] != 1 {
			return false
		}
		pod, err := objects.Get[*corev1.Pod](ctx, w.store, ns, "bound")
		if err != nil || pod.GetMetadata().GetDeletionTimestamp() == nil {
			return false
		}
		got, err := nslifecycle.Get(ctx, w.store, ns)
		c := condition(got, namespace.ConditionContentRemaining)
		return err == nil && c.GetStatus() == "True" && c.GetMessage() == "Some resources are remaining: pods. has 1 resource instances"
	})
	time.Sleep(300 * time.Millisecond) // passes of both controllers
	if left := w.count(ctx, ns); len(left) != len(kinds) {
		t.Fatalf("content deleted while a pod remains: %v", left)
	}
	if err := a1.stop(); err != nil {
		t.Fatal(err)
	}
	if err := a2.stop(); err != nil {
		t.Fatal(err)
	}

	// Killed while the node is stopping the pod.
	got, err := nslifecycle.Get(ctx, w.store, ns)
	if err != nil || got == nil {
		t.Fatalf("namespace after the controllers stopped: %v %v", got, err)
	}
	if got.GetStatus().GetPhase() != nslifecycle.PhaseTerminating || strings.Join(got.GetSpec().GetFinalizers(), ",") != nslifecycle.FinalizerKubernetes {
		t.Fatalf("namespace %v: want Terminating with the kubernetes finalizer", got)
	}
	if c := condition(got, namespace.ConditionContentFailure); c.GetStatus() != "False" || c.GetReason() != "ContentDeleted" {
		t.Errorf("%s: %v", namespace.ConditionContentFailure, c)
	}
	w.nodeFinishes(ctx, "n1", ns)
	bustest.Eventually(t, "the status stage removing the pod its node finished", func() bool { return w.count(ctx, ns)["pods"] == 0 })
	if got, err := nslifecycle.Get(ctx, w.store, ns); err != nil || got == nil {
		t.Fatalf("namespace removed with no controller running: %v %v", got, err)
	}

	w.startController("api-1") // restarted
	bustest.Eventually(t, "the restarted controller emptying and removing the namespace", func() bool {
		got, err := nslifecycle.Get(ctx, w.store, ns)
		return err == nil && got == nil && len(w.count(ctx, ns)) == 0
	})
}

// TestControllerDeletesPodsFirst: Kubernetes' OrderedNamespaceDeletion
// (the conformance test "namespace deletion should delete pod first"): a
// pod held by a finalizer is marked deleted and holds the namespace's
// ConfigMap with it; once its finalizer is removed the pod goes, then the
// ConfigMap, then the namespace.
func TestControllerDeletesPodsFirst(t *testing.T) {
	w := newWorld(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const ns = "ordered"
	nsObj := &corev1.Namespace{Metadata: &corev1.ObjectMeta{Name: ns, Uid: "ns-ordered"}}
	nslifecycle.PrepareForCreate(nsObj)
	if _, err := w.store.Create(ctx, nsObj); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{Metadata: &corev1.ObjectMeta{Namespace: ns, Name: "held", Uid: "uid-held", Finalizers: []string{"e2e.example.com/finalizer"}},
		Spec: &corev1.PodSpec{}}
	cm := &corev1.ConfigMap{Metadata: &corev1.ObjectMeta{Namespace: ns, Name: "cfg", Uid: "uid-cfg"}}
	for _, o := range []objects.Object{pod, cm} {
		if _, err := w.store.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	w.startController("api-1")
	if st, _ := nslifecycle.Delete(ctx, w.store, ns); st.GetCode() != 200 {
		t.Fatalf("delete: %v", st)
	}
	bustest.Eventually(t, "the pod marked deleted, held by its finalizer", func() bool {
		got, err := nslifecycle.Get(ctx, w.store, ns)
		c := condition(got, namespace.ConditionFinalizersRemaining)
		p, perr := objects.Get[*corev1.Pod](ctx, w.store, ns, "held")
		return err == nil && perr == nil && p.GetMetadata().GetDeletionTimestamp() != nil && c.GetStatus() == "True" &&
			c.GetMessage() == "Some content in the namespace has finalizers remaining: e2e.example.com/finalizer in 1 resource instances"
	})
	time.Sleep(300 * time.Millisecond) // passes of the controller
	if left := w.count(ctx, ns); left["configmaps"] != 1 || left["pods"] != 1 {
		t.Fatalf("content while the pod is held: %v, want the pod and the ConfigMap", left)
	}
	if _, err := objects.Mutate(ctx, w.store, ns, "held", func(p *corev1.Pod) error {
		p.Metadata.Finalizers = nil
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	bustest.Eventually(t, "the pod, the ConfigMap and the namespace removed", func() bool {
		got, err := nslifecycle.Get(ctx, w.store, ns)
		return err == nil && got == nil && len(w.count(ctx, ns)) == 0
	})
}

// TestControllerFinishesFinalizedNamespace: a controller that crashed
// after removing the finalizer, before removing the namespace, left it
// marked and finalized; the next controller removes it.
func TestControllerFinishesFinalizedNamespace(t *testing.T) {
	w := newWorld(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ns := &corev1.Namespace{
		Metadata: &corev1.ObjectMeta{Name: "half", Uid: "ns-half", DeletionTimestamp: timestamppb.Now()},
		Spec:     &corev1.NamespaceSpec{}, Status: &corev1.NamespaceStatus{Phase: nslifecycle.PhaseTerminating},
	}
	if _, err := w.store.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	w.startController("api-1")
	bustest.Eventually(t, "the finalized namespace removed", func() bool {
		got, err := nslifecycle.Get(ctx, w.store, "half")
		return err == nil && got == nil
	})
}

// TestControllerLeavesContentDuringGrace: as kube-controller-manager's
// namespaceDeletionGracePeriod, a namespace just deleted is Terminating
// while its content stays for DeletionGrace, so that the client that
// deleted it (kubectl delete -k: the namespace, then what is in it)
// deletes its objects itself rather than finding them gone.
func TestControllerLeavesContentDuringGrace(t *testing.T) {
	w := newWorld(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const ns = "kz"
	nsObj := &corev1.Namespace{Metadata: &corev1.ObjectMeta{Name: ns, Uid: "ns-kz"}}
	nslifecycle.PrepareForCreate(nsObj)
	if _, err := w.store.Create(ctx, nsObj); err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{Metadata: &corev1.ObjectMeta{Namespace: ns, Name: "cfg", Uid: "uid-cfg"}}
	if _, err := w.store.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	w.startControllerWith("api-1", namespace.Config{RetryInterval: 50 * time.Millisecond, DeletionGrace: time.Hour})
	if st, _ := nslifecycle.Delete(ctx, w.store, ns); st.GetCode() != 200 {
		t.Fatalf("delete: %v", st)
	}
	bustest.Eventually(t, "the namespace Terminating", func() bool {
		got, err := nslifecycle.Get(ctx, w.store, ns)
		return err == nil && got.GetStatus().GetPhase() == nslifecycle.PhaseTerminating
	})
	time.Sleep(500 * time.Millisecond) // ten passes of the controller
	if left := w.count(ctx, ns); left["configmaps"] != 1 {
		t.Fatalf("content deleted within the grace: %v", left)
	}
}
