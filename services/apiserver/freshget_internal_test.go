package apiserver

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/objects/objectstest"
)

// behindKV answers stale reads from behind, a replica that lags, and
// linearizable ones from the KV itself; it counts the latter.
type behindKV struct {
	*objectstest.KV
	behind       *objectstest.KV
	linearizable atomic.Int32
}

func (k *behindKV) Get(ctx context.Context, key string, opts ...raftstore.ReadOption) (*raftstore.KV, error) {
	if raftstore.IsStale(opts...) {
		return k.behind.Get(ctx, key)
	}
	k.linearizable.Add(1)
	return k.KV.Get(ctx, key)
}

// TestFreshGetDecidesOnTheLeaderUnlessTheCopyHoldsTheRequest: the token
// request's reads take a lagging replica's copy only when it holds what
// the request names; a pod recreated under the same name (the lagging
// copy has the old uid), a pod the lagging replica has not seen yet and
// one bound to another node there are read again from the leader, whose
// answer stands.
func TestFreshGetDecidesOnTheLeaderUnlessTheCopyHoldsTheRequest(t *testing.T) {
	ctx := context.Background()
	pod := func(name, uid, node string) *corev1.Pod {
		return &corev1.Pod{Metadata: &corev1.ObjectMeta{Namespace: "default", Name: name, Uid: uid}, Spec: &corev1.PodSpec{NodeName: node}}
	}
	kv := &behindKV{KV: objectstest.New(), behind: objectstest.New()}
	now, then := objects.FromKV(kv.KV), objects.FromKV(kv.behind)
	for _, p := range []*corev1.Pod{pod("web", "uid-web", "n1"), pod("new", "uid-new", "n1"), pod("moved", "uid-moved", "n1")} {
		if _, err := now.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []*corev1.Pod{pod("web", "uid-web", "n1"), pod("moved", "uid-moved", "")} { // "new" not there yet; "moved" not bound yet
		if _, err := then.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	s := objects.FromKV(kv)
	for _, tc := range []struct {
		name, uid    string
		wantUID      string
		wantNotFound bool
		leaderReads  int32
	}{
		{"web", "uid-web", "uid-web", false, 0},       // the copy holds it: no leader read
		{"web", "uid-old", "uid-web", false, 1},       // asked for a uid the copy lacks: the leader's answer
		{"new", "uid-new", "uid-new", false, 1},       // not on the lagging replica yet
		{"moved", "uid-moved", "uid-moved", false, 1}, // not bound to n1 there yet
		{"nobody", "uid-nobody", "", true, 1},
	} {
		kv.linearizable.Store(0)
		got, err := freshGet(ctx, s, "default", tc.name, func(p *corev1.Pod) bool {
			return p.GetMetadata().GetUid() == tc.uid && p.GetSpec().GetNodeName() == "n1"
		})
		switch {
		case tc.wantNotFound && !errors.Is(err, raftstore.ErrNotFound):
			t.Errorf("%s/%s: %v, want not found", tc.name, tc.uid, err)
		case !tc.wantNotFound && (err != nil || got.GetMetadata().GetUid() != tc.wantUID):
			t.Errorf("%s/%s: %v, %v; want uid %s", tc.name, tc.uid, got.GetMetadata(), err, tc.wantUID)
		}
		if n := kv.linearizable.Load(); n != tc.leaderReads {
			t.Errorf("%s/%s: %d linearizable reads, want %d", tc.name, tc.uid, n, tc.leaderReads)
		}
	}
}
