package nodewire_test

import (
	"bytes"
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/podflow/podflow/nodeagent"
	"github.com/podflow/podflow/nodeagent/nodeagenttest"
	"github.com/podflow/podflow/nodeagent/sim"
	"github.com/podflow/podflow/ops/processes/nodewire"
	corev1 "github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/podrules"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/raftstore/raftstoretest"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/pipeline"
	"github.com/podflow/podflow/services/stages/nodelifecycle"
)

// keyCountingKV counts the reads (Get, List) and writes of each key of a
// real store.
type keyCountingKV struct {
	objects.KV
	mu     sync.Mutex
	reads  map[string]int
	writes map[string]int
}

func newKeyCountingKV(kv objects.KV) *keyCountingKV {
	return &keyCountingKV{KV: kv, reads: map[string]int{}, writes: map[string]int{}}
}

func (c *keyCountingKV) count(m map[string]int, key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	m[key]++
}

func (c *keyCountingKV) Get(ctx context.Context, key string, opts ...raftstore.ReadOption) (*raftstore.KV, error) {
	c.count(c.reads, key)
	return c.KV.Get(ctx, key, opts...)
}

func (c *keyCountingKV) List(ctx context.Context, prefix string, opts ...raftstore.ReadOption) ([]*raftstore.KV, int64, error) {
	c.count(c.reads, prefix)
	return c.KV.List(ctx, prefix, opts...)
}

func (c *keyCountingKV) Create(ctx context.Context, key string, value []byte) (int64, error) {
	c.count(c.writes, key)
	return c.KV.Create(ctx, key, value)
}

func (c *keyCountingKV) Update(ctx context.Context, key string, value []byte, rev int64) (int64, error) {
	c.count(c.writes, key)
	return c.KV.Update(ctx, key, value, rev)
}

// take returns the reads and writes of key since the last take.
func (c *keyCountingKV) take(key string) (reads, writes int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	reads, writes = c.reads[key], c.writes[key]
	delete(c.reads, key)
	delete(c.writes, key)
	return reads, writes
}

// imagesRuntime is the sim runtime reporting the node's images
// (nodeagent.ImageLister), which a test may change.
type imagesRuntime struct {
	*sim.Runtime
	images atomic.Int32
}

func (r *imagesRuntime) NodeImages() []*corev1.ContainerImage {
	out := make([]*corev1.ContainerImage, r.images.Load())
	for i := range out {
		out[i] = &corev1.ContainerImage{Names: []string{"img" + string(rune('a'+i))}, SizeBytes: 1 << 20}
	}
	return out
}

// TestHeartbeatWritesLikeKubelet (issue 41): over a real store, an agent
// heartbeating N times with an unchanged status renews its Lease N times,
// each renewal one write and no read after the first (kubelet's lease
// controller updates the Lease it last wrote), and writes its Node only at
// registration: it reads its node (a stale read) and compares, ignoring
// the conditions' lastHeartbeatTime (kubelet's nodeStatusHasChanged). A
// condition another writer changed (the node lifecycle controller's
// Unknown) is written back at once, so is a change of the agent's own
// status (its images), and NodeStatusReportFrequency after the last write
// the status is written however unchanged. A Lease another writer updated
// is read again once, and renewed.
func TestHeartbeatWritesLikeKubelet(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	kv := newKeyCountingKV(objects.RaftKV(raftstoretest.MakeCluster(t, 1).Client(t)))
	store := objects.FromKV(kv)
	clock := nodeagenttest.NewFakeClock(time.Now())
	rcfg := sim.DefaultConfig("10.244.1.0/24")
	rcfg.Clock = clock
	srt, err := sim.New(rcfg)
	if err != nil {
		t.Fatal(err)
	}
	defer srt.Close()
	rt := &imagesRuntime{Runtime: srt}
	cfg := nodeagent.DefaultConfig(node, "10.244.1.0/24")
	cfg.Clock = clock
	pub := nodeagenttest.NewPublisher()
	a, err := nodeagent.New(cfg, rt, nodewire.NewStore(store), pub)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Stop()
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	nodeKey, leaseKey := objects.Nodes.Key("", node), objects.Leases.Key(pipeline.NodeLeaseNamespace, node)
	if _, w := kv.take(nodeKey); w != 1 {
		t.Fatalf("registration: %d node writes, want 1", w)
	}
	beat := func(n int) {
		t.Helper()
		for range n {
			clock.Advance(cfg.HeartbeatInterval)
			if err := a.Heartbeat(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	expect := func(what string, nodeWrites, leaseReads, leaseWrites int) {
		t.Helper()
		_, nw := kv.take(nodeKey)
		lr, lw := kv.take(leaseKey)
		if nw != nodeWrites || lr != leaseReads || lw != leaseWrites {
			t.Errorf("%s: %d node writes, %d Lease reads, %d Lease writes; want %d, %d, %d",
				what, nw, lr, lw, nodeWrites, leaseReads, leaseWrites)
		}
	}
	readyStatus := func() string {
		t.Helper()
		n, err := objects.Get[*corev1.Node](ctx, store, "", node)
		if err != nil {
			t.Fatal(err)
		}
		return podrules.NodeCondition(n, "Ready").GetStatus()
	}

	const n = 12
	beat(n)
	expect("12 unchanged heartbeats", 0, 1, n) // the first renewal finds no Lease and creates it

	// The node lifecycle controller marks the node Unknown (as if its
	// Lease had gone stale): the next heartbeat writes Ready back.
	if _, err := objects.Mutate(ctx, store, "", node, func(nd *corev1.Node) error {
		nodelifecycle.MarkUnknown(nd, clock.Now())
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	kv.take(nodeKey)
	beat(1)
	expect("a heartbeat after the controller's Unknown", 1, 0, 1)
	if got := readyStatus(); got != "True" {
		t.Errorf("Ready is %s after the heartbeat, want True", got)
	}

	// The agent's own status changes: written at once, then not again.
	rt.images.Store(2)
	beat(3)
	expect("3 heartbeats after an image came", 1, 0, 3)

	// Nothing changes for NodeStatusReportFrequency after the image's
	// write (2 heartbeats ago): one write at the end.
	steps := int(cfg.NodeStatusReportFrequency / cfg.HeartbeatInterval)
	beat(steps - 3)
	expect("heartbeats short of the report frequency", 0, 0, steps-3)
	beat(1)
	expect("the heartbeat at the report frequency", 1, 0, 1)

	// Another writer updates the Lease: one conflict, one read, renewed.
	lease, err := store.GetKind(ctx, objects.Leases, pipeline.NodeLeaseNamespace, node)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Update(ctx, lease); err != nil {
		t.Fatal(err)
	}
	kv.take(leaseKey)
	beat(2)
	expect("2 heartbeats after another Lease writer", 0, 1, 3)
	lease, err = store.GetKind(ctx, objects.Leases, pipeline.NodeLeaseNamespace, node)
	if err != nil {
		t.Fatal(err)
	}
	if want := clock.Now().UTC().Format("2006-01-02T15:04:05.000000Z07:00"); !bytes.Contains(lease.(*corev1.Unstructured).GetContent(), []byte(want)) {
		t.Errorf("Lease %s, want renewTime %s", lease.(*corev1.Unstructured).GetContent(), want)
	}
}
