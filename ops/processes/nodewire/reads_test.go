package nodewire_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/bus/bustest"
	"github.com/podflow/podflow/nodeagent"
	"github.com/podflow/podflow/nodeagent/nodeagenttest"
	"github.com/podflow/podflow/ops/processes/nodewire"
	corev1 "github.com/podflow/podflow/proto/corev1"
	eventsv1 "github.com/podflow/podflow/proto/eventsv1"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/raftstore/raftstoretest"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/pipeline"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// behindKV is a real store whose stale reads of one key are answered as a
// replica behind the leader answers them (with what the key held when
// behind was called), and whose reads are counted by kind.
type behindKV struct {
	objects.KV
	mu           sync.Mutex
	key          string
	old          *raftstore.KV
	miss         error
	stale, reads int
}

func (b *behindKV) behind(key string) {
	b.key = key
	b.old, b.miss = b.KV.Get(context.Background(), key)
}

func (b *behindKV) Get(ctx context.Context, key string, opts ...raftstore.ReadOption) (*raftstore.KV, error) {
	b.mu.Lock()
	stale := raftstore.IsStale(opts...)
	if stale {
		b.stale++
	} else {
		b.reads++
	}
	lagging := stale && key == b.key
	b.mu.Unlock()
	if lagging {
		return b.old, b.miss
	}
	return b.KV.Get(ctx, key, opts...)
}

type boundAgent struct{ bound, deleted []*corev1.Pod }

func (a *boundAgent) HandlePodBound(_ context.Context, p *corev1.Pod) error {
	a.bound = append(a.bound, p)
	return nil
}

func (a *boundAgent) HandlePodDelete(_ context.Context, p *corev1.Pod, _ time.Duration) error {
	a.deleted = append(a.deleted, p)
	return nil
}

// TestScheduledReadsStaleFirst: a PodScheduled of a fresh bind is decided
// on a stale read when that copy shows the bind (uid, node, the bind's
// revision or later); a copy from a replica behind the create or the bind,
// one older than the event's revision, and a PodScheduled without a
// revision (a bound pod announced again) are read, and decided, on a
// linearizable read. Each way the node gets the bound pod once.
func TestScheduledReadsStaleFirst(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cluster := raftstoretest.MakeCluster(t, 1)
	real := objects.New(cluster.Client(t))

	for i, tt := range []struct {
		name      string
		behind    string // "create", "bind" or "" (the replica is up to date)
		revAhead  int64  // the event's revision ahead of the stored bind
		noRev     bool
		wantReads int // linearizable
		wantStale int
	}{
		{name: "fresh copy", wantReads: 0, wantStale: 1},
		{name: "replica behind the create", behind: "create", wantReads: 1, wantStale: 1},
		{name: "replica behind the bind", behind: "bind", wantReads: 1, wantStale: 1},
		{name: "copy older than the event's revision", revAhead: 5, wantReads: 1, wantStale: 1},
		{name: "announced again, no revision", noRev: true, wantReads: 1, wantStale: 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			kv := &behindKV{KV: real.KV()}
			store := objects.FromKV(kv)
			name := fmt.Sprintf("p-%d", i)
			pod := &corev1.Pod{Metadata: &corev1.ObjectMeta{Namespace: "default", Name: name, Uid: "uid-" + name}, Spec: &corev1.PodSpec{}}
			key, err := objects.KeyOf(pod)
			if err != nil {
				t.Fatal(err)
			}
			if tt.behind == "create" {
				kv.behind(key)
			}
			if _, err := store.Create(ctx, pod); err != nil {
				t.Fatal(err)
			}
			if tt.behind == "bind" {
				kv.behind(key)
			}
			bound, err := objects.Mutate(ctx, store, "default", name, func(p *corev1.Pod) error {
				p.Spec.NodeName = node
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			rev := objects.Revision(bound) + tt.revAhead
			if tt.noRev {
				rev = 0
			}
			kv.stale, kv.reads = 0, 0
			a := &boundAgent{}
			env := &eventsv1.Envelope{PodUid: "uid-" + name, Namespace: "default", PodName: name, NodeName: node,
				Payload: &eventsv1.Envelope_PodScheduled{PodScheduled: &eventsv1.PodScheduled{NodeName: node, Revision: rev}}}
			if err := nodewire.Handler(store, a, time.Second)(ctx, &bus.Delivery{Envelope: env}); err != nil {
				t.Fatal(err)
			}
			if len(a.bound) != 1 || a.bound[0].GetSpec().GetNodeName() != node {
				t.Fatalf("HandlePodBound got %v, want the pod bound to %s once", a.bound, node)
			}
			if kv.reads != tt.wantReads || kv.stale != tt.wantStale {
				t.Errorf("reads: %d linearizable, %d stale; want %d, %d", kv.reads, kv.stale, tt.wantReads, tt.wantStale)
			}
		})
	}
}

// TestScheduledAfterDeleteNotStarted: the node carried out a pod's
// deletion; minutes later (past two resyncs, with a reconcile between) a
// PodScheduled of the pod is redelivered and its stale read comes from a
// replica that still has the pod bound and undeleted. The agent's
// tombstone refuses it: nothing starts. A stale copy with a
// deletionTimestamp is handed to HandlePodDelete, not HandlePodBound.
func TestScheduledAfterDeleteNotStarted(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	srv := bustest.Server(t)
	conn := bustest.Connect(t, srv, node)
	bustest.Provision(t, conn, pipeline.NodeAgentRunnerConfig(node).ConsumerSpec())
	cluster := raftstoretest.MakeCluster(t, 1)
	real := objects.New(cluster.Client(t))
	kv := &behindKV{KV: real.KV()}
	store := objects.FromKV(kv)

	clock := nodeagenttest.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	cfg := nodeagent.DefaultConfig(node, "10.244.1.0/24")
	cfg.Clock = clock
	agent, _ := startSimAgent(ctx, t, cfg, store, conn)
	h := nodewire.Handler(store, agent, time.Second)

	pod := &corev1.Pod{Metadata: &corev1.ObjectMeta{Namespace: "default", Name: "gone", Uid: "uid-gone"},
		Spec: &corev1.PodSpec{NodeName: node, Containers: []*corev1.Container{{Name: "app", Image: "nginx:1.27"}}}}
	created, err := store.Create(ctx, pod)
	if err != nil {
		t.Fatal(err)
	}
	key, err := objects.KeyOf(pod)
	if err != nil {
		t.Fatal(err)
	}
	kv.behind(key) // this replica stays at the bind
	scheduled := &eventsv1.Envelope{PodUid: "uid-gone", Namespace: "default", PodName: "gone", NodeName: node,
		Payload: &eventsv1.Envelope_PodScheduled{PodScheduled: &eventsv1.PodScheduled{NodeName: node, Revision: created}}}

	// The delete, carried out by the node, and the pod gone from the store.
	if _, err := objects.Mutate(ctx, store, "default", "gone", func(p *corev1.Pod) error {
		p.Metadata.DeletionTimestamp = timestamppb.Now()
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	del := &eventsv1.Envelope{PodUid: "uid-gone", Namespace: "default", PodName: "gone", NodeName: node,
		Payload: &eventsv1.Envelope_PodDeleteRequested{PodDeleteRequested: &eventsv1.PodDeleteRequested{GracePeriodSeconds: proto.Int64(0)}}}
	if err := h(ctx, &bus.Delivery{Envelope: del}); err != nil {
		t.Fatal(err)
	}
	bustest.Eventually(t, "PodDeleted in the stream", func() bool {
		return count(streamEvents(ctx, t, conn.JetStream(), "uid-gone"), "PodDeleted") == 1
	})
	if _, err := store.Delete(ctx, objects.Pods, "default", "gone", 0); err != nil {
		t.Fatal(err)
	}
	clock.Advance(5 * time.Minute) // past two resyncs
	if err := agent.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}

	// The redelivered PodScheduled, decided on the lagging replica's copy.
	kv.stale = 0
	if err := h(ctx, &bus.Delivery{Envelope: scheduled}); err != nil {
		t.Fatal(err)
	}
	if kv.stale != 1 {
		t.Fatalf("%d stale reads, want the one of the lagging replica", kv.stale)
	}
	if n := agent.RunningPods(); n != 0 {
		t.Fatalf("%d pods started after their deletion was carried out", n)
	}

	// A stale copy showing the deletion is a delete.
	deleting := &corev1.Pod{Metadata: &corev1.ObjectMeta{Namespace: "default", Name: "deleting", Uid: "uid-deleting", DeletionTimestamp: timestamppb.Now()},
		Spec: &corev1.PodSpec{NodeName: node}}
	c, err := store.Create(ctx, deleting)
	if err != nil {
		t.Fatal(err)
	}
	rec := &boundAgent{}
	ev := &eventsv1.Envelope{PodUid: "uid-deleting", Namespace: "default", PodName: "deleting", NodeName: node,
		Payload: &eventsv1.Envelope_PodScheduled{PodScheduled: &eventsv1.PodScheduled{NodeName: node, Revision: c}}}
	if err := nodewire.Handler(store, rec, time.Second)(ctx, &bus.Delivery{Envelope: ev}); err != nil {
		t.Fatal(err)
	}
	if len(rec.bound) != 0 || len(rec.deleted) != 1 {
		t.Fatalf("a copy with a deletionTimestamp: %d binds, %d deletes; want 0, 1", len(rec.bound), len(rec.deleted))
	}
}

// TestScheduledTakesTheBindsCopy: on its first delivery, a PodScheduled
// that carries the pod as the bind wrote it — the event's namespace, name
// and uid, bound to the event's node, at exactly the bind's revision — is
// decided on that copy, with no read. A redelivery, and a copy that is not
// that (another uid, name, namespace or node, an older or a newer
// revision), are decided on the store's copy as before.
func TestScheduledTakesTheBindsCopy(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cluster := raftstoretest.MakeCluster(t, 1)
	real := objects.New(cluster.Client(t))

	for i, tt := range []struct {
		name      string
		delivered uint64
		mangle    func(p *corev1.Pod, rev int64)
		wantCopy  bool
	}{
		{name: "the bind's copy", delivered: 1, wantCopy: true},
		{name: "redelivered", delivered: 2},
		{name: "another uid", delivered: 1, mangle: func(p *corev1.Pod, _ int64) { p.Metadata.Uid = "uid-other" }},
		{name: "another name", delivered: 1, mangle: func(p *corev1.Pod, _ int64) { p.Metadata.Name = "other" }},
		{name: "another namespace", delivered: 1, mangle: func(p *corev1.Pod, _ int64) { p.Metadata.Namespace = "kube-system" }},
		{name: "another node", delivered: 1, mangle: func(p *corev1.Pod, _ int64) { p.Spec.NodeName = "node-b" }},
		{name: "older than the bind", delivered: 1, mangle: func(p *corev1.Pod, rev int64) { objects.SetRevision(p, rev-1) }},
		{name: "newer than the bind", delivered: 1, mangle: func(p *corev1.Pod, rev int64) { objects.SetRevision(p, rev+1) }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			kv := &behindKV{KV: real.KV()}
			store := objects.FromKV(kv)
			name := fmt.Sprintf("c-%d", i)
			pod := &corev1.Pod{Metadata: &corev1.ObjectMeta{Namespace: "default", Name: name, Uid: "uid-" + name}, Spec: &corev1.PodSpec{}}
			if _, err := store.Create(ctx, pod); err != nil {
				t.Fatal(err)
			}
			bound, err := objects.Mutate(ctx, store, "default", name, func(p *corev1.Pod) error {
				p.Spec.NodeName = node
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			rev := objects.Revision(bound)
			carried := proto.CloneOf(bound)
			carried.Metadata.Labels = map[string]string{"copy": "event"}
			if tt.mangle != nil {
				tt.mangle(carried, rev)
			}
			kv.stale, kv.reads = 0, 0
			a := &boundAgent{}
			env := &eventsv1.Envelope{PodUid: "uid-" + name, Namespace: "default", PodName: name, NodeName: node,
				Payload: &eventsv1.Envelope_PodScheduled{PodScheduled: &eventsv1.PodScheduled{NodeName: node, Revision: rev, Pod: carried}}}
			if err := nodewire.Handler(store, a, time.Second)(ctx, &bus.Delivery{Envelope: env, NumDelivered: tt.delivered}); err != nil {
				t.Fatal(err)
			}
			if len(a.bound) != 1 {
				t.Fatalf("HandlePodBound got %d pods, want 1", len(a.bound))
			}
			got := a.bound[0]
			if gotCopy := got.GetMetadata().GetLabels()["copy"] == "event"; gotCopy != tt.wantCopy {
				t.Fatalf("handed the event's copy: %v, want %v (got %v)", gotCopy, tt.wantCopy, got.GetMetadata())
			}
			if got.GetMetadata().GetUid() != "uid-"+name || got.GetSpec().GetNodeName() != node || objects.Revision(got) != rev {
				t.Fatalf("handed %v on %q at %d, want uid-%s on %s at %d", got.GetMetadata().GetUid(), got.GetSpec().GetNodeName(), objects.Revision(got), name, node, rev)
			}
			wantStale := 1
			if tt.wantCopy {
				wantStale = 0
			}
			if kv.reads != 0 || kv.stale != wantStale {
				t.Errorf("reads: %d linearizable, %d stale; want 0, %d", kv.reads, kv.stale, wantStale)
			}
		})
	}
}
