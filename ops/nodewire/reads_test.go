package nodewire_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/ops/nodewire"
	corev1 "github.com/podflow/podflow/proto/corev1"
	eventsv1 "github.com/podflow/podflow/proto/eventsv1"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/raftstore/raftstoretest"
	"github.com/podflow/podflow/services/objects"
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

type boundAgent struct{ bound []*corev1.Pod }

func (a *boundAgent) HandlePodBound(_ context.Context, p *corev1.Pod) error {
	a.bound = append(a.bound, p)
	return nil
}

func (a *boundAgent) HandlePodDelete(context.Context, *corev1.Pod, time.Duration) error { return nil }

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
