package api

import (
	"context"
	"runtime"
	"slices"
	"testing"
	"time"
	"unsafe"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/vt"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/objects"
)

// TestDecodePodBinding: a pod's binding decodes to its identity,
// deletionTimestamp, node and ServiceAccount, as the full decode has
// them, and nothing else; pods of one node and ServiceAccount share a
// spec, and names are shared.
func TestDecodePodBinding(t *testing.T) {
	full := &corev1.Pod{
		Metadata: &corev1.ObjectMeta{Namespace: "team", Name: "web", Uid: "uid-web", Labels: map[string]string{"app": "web"},
			DeletionTimestamp: timestamppb.New(time.Unix(1700000000, 0))},
		Spec: &corev1.PodSpec{NodeName: "n1", ServiceAccountName: "robot", Hostname: "h",
			Containers: []*corev1.Container{{Name: "c", Image: "img"}}},
		Status: &corev1.PodStatus{Phase: "Running"},
	}
	raw, err := vt.Marshal(full)
	if err != nil {
		t.Fatal(err)
	}
	dec := podBindingDecoder()
	kv := &raftstore.KV{Key: objects.Pods.Key("team", "web"), Value: raw, ModRevision: 7}
	var pods [2]*corev1.Pod
	for i := range pods {
		pods[i] = &corev1.Pod{}
		if err := dec(kv, pods[i]); err != nil {
			t.Fatal(err)
		}
	}
	p := pods[0]
	md, spec := p.GetMetadata(), p.GetSpec()
	if md.GetName() != "web" || md.GetNamespace() != "team" || md.GetUid() != "uid-web" || md.GetResourceVersion() != "7" ||
		!md.GetDeletionTimestamp().AsTime().Equal(time.Unix(1700000000, 0)) || md.GetLabels() != nil {
		t.Errorf("metadata %v: want the identity and deletionTimestamp alone", md)
	}
	if spec.GetNodeName() != "n1" || spec.GetServiceAccountName() != "robot" || spec.GetHostname() != "" || spec.GetContainers() != nil || p.GetStatus() != nil {
		t.Errorf("pod %v: want spec.nodeName and spec.serviceAccountName alone", p)
	}
	if pods[0].GetSpec() != pods[1].GetSpec() {
		t.Errorf("two pods of one node and ServiceAccount have two specs, want one")
	}
	other := &corev1.Pod{}
	full.Spec.NodeName = "n2"
	if raw, err = vt.Marshal(full); err != nil {
		t.Fatal(err)
	}
	if err := dec(&raftstore.KV{Key: kv.Key, Value: raw, ModRevision: 8}, other); err != nil {
		t.Fatal(err)
	}
	if other.GetSpec().GetNodeName() != "n2" || other.GetSpec().GetServiceAccountName() != "robot" || p.GetSpec().GetNodeName() != "n1" ||
		unsafe.StringData(other.GetSpec().GetServiceAccountName()) != unsafe.StringData(p.GetSpec().GetServiceAccountName()) {
		t.Errorf("a pod on n2: spec %v (the n1 pod's %v); want its own spec sharing the ServiceAccount's name", other.GetSpec(), p.GetSpec())
	}
	if err := dec(&raftstore.KV{Key: kv.Key, Value: []byte{0xff}}, &corev1.Pod{}); err == nil {
		t.Errorf("a malformed pod decoded")
	}
}

// TestTokenCacheFollowsPods: the caches a node's token request reads
// (apiserver.TokenCache) follow the store: a pod bound later, deleted,
// and recreated with another uid on another node, its ServiceAccount and
// its Node. A deleted pod is gone from the cache; a recreated one holds
// its new uid and node, never the old pair.
func TestTokenCacheFollowsPods(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	eventually := func(what string, ok func() bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !ok() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 10s", what)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	podIs := func(uid, node, sa string) func() bool {
		return func() bool {
			p, ok := f.s.CachedPod("team", "web")
			return ok && p.GetMetadata().GetUid() == uid && p.GetSpec().GetNodeName() == node && p.GetSpec().GetServiceAccountName() == sa
		}
	}
	pod := &corev1.Pod{Metadata: &corev1.ObjectMeta{Namespace: "team", Name: "web", Uid: "uid-1"}, Spec: &corev1.PodSpec{ServiceAccountName: "builder"}}
	if _, err := f.env.Store.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	eventually("the pod, unbound", podIs("uid-1", "", "builder"))
	pod.Spec.NodeName = "n1"
	if _, err := f.env.Store.Apply(ctx, pod); err != nil {
		t.Fatal(err)
	}
	eventually("the pod, bound to n1", podIs("uid-1", "n1", "builder"))
	if _, err := f.env.Store.Delete(ctx, objects.Pods, "team", "web", 0); err != nil {
		t.Fatal(err)
	}
	eventually("the pod gone", func() bool { _, ok := f.s.CachedPod("team", "web"); return !ok })
	pod = &corev1.Pod{Metadata: &corev1.ObjectMeta{Namespace: "team", Name: "web", Uid: "uid-2"}, Spec: &corev1.PodSpec{NodeName: "n2"}}
	if _, err := f.env.Store.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	eventually("the recreated pod, on n2", podIs("uid-2", "n2", ""))

	if sa, ok := f.s.CachedServiceAccount("team", "builder"); !ok || sa.GetMetadata().GetUid() != "sa-uid" {
		t.Errorf("ServiceAccount team/builder: %v, %v", sa, ok)
	}
	if _, err := f.env.Store.Create(ctx, &corev1.Node{Metadata: &corev1.ObjectMeta{Name: "n2", Uid: "uid-n2"}}); err != nil {
		t.Fatal(err)
	}
	eventually("node n2", func() bool { n, ok := f.s.CachedNode("n2"); return ok && n.GetMetadata().GetUid() == "uid-n2" })
	if _, err := f.env.Store.Delete(ctx, objects.ServiceAccounts, "team", "builder", 0); err != nil {
		t.Fatal(err)
	}
	eventually("the ServiceAccount gone", func() bool { _, ok := f.s.CachedServiceAccount("team", "builder"); return !ok })
}

// TestWaitPods: WaitPods returns once the pod cache holds the store at
// the revision asked for — the pod written at that revision is cached
// then, with no further wait — and false when its context ends first.
func TestWaitPods(t *testing.T) {
	f := newFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i, uid := range []string{"uid-1", "uid-2", "uid-3"} {
		pod := &corev1.Pod{Metadata: &corev1.ObjectMeta{Namespace: "team", Name: "web", Uid: uid}, Spec: &corev1.PodSpec{NodeName: "n1"}}
		if i > 0 {
			if _, err := f.env.Store.Delete(ctx, objects.Pods, "team", "web", 0); err != nil {
				t.Fatal(err)
			}
		}
		rev, err := f.env.Store.Create(ctx, pod)
		if err != nil {
			t.Fatal(err)
		}
		if !f.s.WaitPods(ctx, rev) {
			t.Fatalf("revision %d: not reached: %v", rev, ctx.Err())
		}
		if p, ok := f.s.CachedPod("team", "web"); !ok || p.GetMetadata().GetUid() != uid || p.GetSpec().GetNodeName() != "n1" {
			t.Fatalf("revision %d reached: cached %v, %v; want %s on n1", rev, p, ok, uid)
		}
	}
	done, stop := context.WithCancel(ctx)
	stop()
	if f.s.WaitPods(done, 1<<40) {
		t.Errorf("a revision the store never reached was reached")
	}
}

// TestRevisionGate: wait returns once advance reaches its revision (or
// past it), not before; a wait whose context ends returns false and
// leaves no waiter behind; the gate never moves back.
func TestRevisionGate(t *testing.T) {
	var g revisionGate
	ctx := context.Background()
	if !g.wait(ctx, 0) {
		t.Fatalf("revision 0 not reached at the start")
	}
	results := make(chan int64, 3)
	for _, rev := range []int64{5, 7, 9} {
		go func() {
			if g.wait(ctx, rev) {
				results <- rev
			}
		}()
	}
	for g.waiting.Load() != 3 {
		runtime.Gosched()
	}
	g.advance(4)
	g.advance(7)
	got := []int64{<-results, <-results}
	slices.Sort(got)
	if !slices.Equal(got, []int64{5, 7}) {
		t.Errorf("released at 7: %v, want [5 7]", got)
	}
	if n := g.waiting.Load(); n != 1 {
		t.Errorf("%d waiters left at 7, want 1 (9)", n)
	}
	g.advance(3)
	if r := g.rev.Load(); r != 7 {
		t.Errorf("revision %d after advance(3) at 7: the gate moved back", r)
	}
	g.advance(12)
	if r := <-results; r != 9 {
		t.Errorf("released at 12: %d, want 9", r)
	}
	done, stop := context.WithCancel(ctx)
	stop()
	if g.wait(done, 13) {
		t.Errorf("revision 13 reached at 12")
	}
	if n := g.waiting.Load(); n != 0 || len(g.waiters) != 0 {
		t.Errorf("%d waiters (%d counted) after the waits ended, want none", len(g.waiters), n)
	}
	if !g.wait(done, 12) {
		t.Errorf("revision 12 not reached at 12")
	}
}
