package scheduler

import (
	"slices"
	"strconv"
	"testing"

	"github.com/podflow/podflow/services/stages/scheduler/framework"

	"google.golang.org/protobuf/proto"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/objects"
)

// TestSawAllocated: a bind goes on only when the decision saw every pod
// the node's allocation accounts for (the pod itself and finished pods
// aside).
func TestSawAllocated(t *testing.T) {
	pod := mkPod("p", "100m", "")
	seen := func(names ...string) []*framework.PodMeta {
		var out []*framework.PodMeta
		for _, n := range names {
			e, err := framework.NewPodEntry(mkPod(n, "100m", ""), "n1")
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, &e.Meta)
		}
		return out
	}
	alloc := func(names ...string) *corev1.NodeAllocation {
		a := &corev1.NodeAllocation{Metadata: &corev1.ObjectMeta{Name: "n1"}, Pods: map[string]*corev1.AllocatedPod{}}
		for _, n := range names {
			a.Pods["uid-"+n] = &corev1.AllocatedPod{Namespace: "default", Name: n}
		}
		return a
	}
	for _, tc := range []struct {
		name  string
		alloc *corev1.NodeAllocation
		seen  []*framework.PodMeta
		want  bool
	}{
		{"no allocation", nil, nil, true},
		{"empty allocation", alloc(), nil, true},
		{"every pod seen", alloc("a", "b"), seen("a", "b"), true},
		{"more seen than allocated", alloc("a"), seen("a", "b"), true},
		{"the pod itself allocated, unseen", alloc("a", "p"), seen("a"), true},
		{"a pod unseen", alloc("a", "b"), seen("a"), false},
		{"nothing seen", alloc("a"), nil, false},
		{"the pod itself does not stand in for another", alloc("a", "b"), seen("a", "p"), false},
		// A pod that finished keeps its allocation until it is deleted;
		// the cache dropped it, and no filter counts it.
		{"a finished pod unseen", alloc("a", "done"), seen("a"), true},
		{"a finished pod does not stand in for another", alloc("b", "done"), seen("a"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			terminated := func(key string) bool { return key == "uid-done" }
			if got, _ := sawAllocated(tc.alloc, tc.seen, pod, terminated); got != tc.want {
				t.Errorf("sawAllocated = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestDecisionSawAllocation: an allocation the decision's cache had reached
// (its revision at most decidedAt) is taken as seen without a look at its
// pods, one newer is looked at, and a pod it has that the decision did
// not see then refuses the bind.
func TestDecisionSawAllocation(t *testing.T) {
	pod := mkPod("p", "100m", "")
	e, err := framework.NewPodEntry(mkPod("a", "100m", ""), "n1")
	if err != nil {
		t.Fatal(err)
	}
	alloc := &corev1.NodeAllocation{Metadata: &corev1.ObjectMeta{Name: "n1"}, Pods: map[string]*corev1.AllocatedPod{
		"uid-a": {Namespace: "default", Name: "a"}, "uid-b": {Namespace: "default", Name: "b"},
	}}
	asked := 0
	terminated := func(string) bool { asked++; return false }
	req := bindRequest{pod: pod, seen: []*framework.PodMeta{&e.Meta}, decidedAt: 10}
	for _, tc := range []struct {
		allocRev int64
		want     bool
	}{{9, true}, {10, true}, {11, false}} {
		asked = 0
		if got, _ := decisionSawAllocation(alloc, tc.allocRev, req, false, terminated); got != tc.want {
			t.Errorf("allocation at %d, decided at 10: saw = %v, want %v", tc.allocRev, got, tc.want)
		}
		if tc.allocRev <= 10 && asked > 0 {
			t.Errorf("allocation at %d, decided at 10: the cache was asked %d times", tc.allocRev, asked)
		}
	}
}

// TestSawAllocatedAsksNothing: when the decision saw every pod the
// allocation accounts for, the cache is not asked which finished (a
// lock per pod on every bind).
func TestSawAllocatedAsksNothing(t *testing.T) {
	pod := mkPod("p", "100m", "")
	a := &corev1.NodeAllocation{Metadata: &corev1.ObjectMeta{Name: "n1"}, Pods: map[string]*corev1.AllocatedPod{}}
	var seen []*framework.PodMeta
	for _, n := range []string{"a", "b", "c"} {
		a.Pods["uid-"+n] = &corev1.AllocatedPod{Namespace: "default", Name: n}
		e, err := framework.NewPodEntry(mkPod(n, "100m", ""), "n1")
		if err != nil {
			t.Fatal(err)
		}
		seen = append(seen, &e.Meta)
	}
	asked := 0
	if saw, _ := sawAllocated(a, seen, pod, func(string) bool { asked++; return false }); !saw || asked != 0 {
		t.Errorf("sawAllocated asked the cache %d times", asked)
	}
}

// TestAllocationsAt: the informer's echo of a learned allocation is that
// allocation only at exactly the revision learned.
func TestAllocationsAt(t *testing.T) {
	a := allocations{overlay: map[string][]*corev1.NodeAllocation{}}
	learned := &corev1.NodeAllocation{Metadata: &corev1.ObjectMeta{Name: "n1", ResourceVersion: "5"}}
	a.learn(learned)
	for _, tc := range []struct {
		node string
		rev  int64
		want bool
	}{{"n1", 5, true}, {"n1", 4, false}, {"n1", 6, false}, {"n2", 5, false}} {
		got, ok := a.at(tc.node, tc.rev)
		if ok != tc.want || (ok && got != learned) {
			t.Errorf("at(%s, %d) = %v, %v; want the learned one: %v", tc.node, tc.rev, got, ok, tc.want)
		}
	}
}

// TestAllocationsKeepEveryLearnedRevision: binds to one node that follow
// each other faster than the informer's echo keep every revision until
// the informer has reached it, so each echo finds its own (the newest
// alone made every echo but the last decoded again, at saturation); get
// answers the newest; what the informer reached goes; at most maxLearned
// revisions stay per node.
func TestAllocationsKeepEveryLearnedRevision(t *testing.T) {
	at := func(node string, rev int64) *corev1.NodeAllocation {
		return &corev1.NodeAllocation{Metadata: &corev1.ObjectMeta{Name: node, ResourceVersion: strconv.FormatInt(rev, 10)}}
	}
	a := allocations{overlay: map[string][]*corev1.NodeAllocation{}}
	learned := map[int64]*corev1.NodeAllocation{}
	for _, rev := range []int64{5, 7, 9} {
		learned[rev] = at("n1", rev)
		a.learn(learned[rev])
	}
	a.learn(at("n1", 8)) // older than the newest: not the freshest knowledge
	a.learn(at("n2", 6))
	hit := func(rev int64) bool {
		got, ok := a.at("n1", rev)
		if ok && got != learned[rev] {
			t.Fatalf("at(n1, %d) = %v, not the allocation learned at %d", rev, got, rev)
		}
		return ok
	}
	for rev, want := range map[int64]bool{5: true, 7: true, 8: false, 9: true, 6: false} {
		if got := hit(rev); got != want {
			t.Errorf("before the echo: at(n1, %d) = %v, want %v", rev, got, want)
		}
	}
	if got, rev := a.get(at("n1", 3), "n1"); got != learned[9] || rev != 9 {
		t.Errorf("get = %v at %d, want the newest learned, at 9", got, rev)
	}
	if got, rev := a.get(at("n1", 10), "n1"); objects.Revision(got) != 10 || rev != 10 {
		t.Errorf("get with a newer informer copy = %v at %d, want the informer's, at 10", got, rev)
	}

	a.informed(at("n1", 7)) // the informer reached 7: 5 and 7 go, 9 stays
	for rev, want := range map[int64]bool{5: false, 7: false, 9: true} {
		if got := hit(rev); got != want {
			t.Errorf("after the echo of 7: at(n1, %d) = %v, want %v", rev, got, want)
		}
	}
	if _, ok := a.at("n2", 6); !ok {
		t.Error("the echo of n1 dropped what was learned of n2")
	}
	a.informed(at("n1", 9))
	if _, held := a.overlay["n1"]; held {
		t.Errorf("n1 still in the overlay after the informer reached its newest: %v", a.overlay["n1"])
	}

	for rev := int64(100); rev < 100+2*maxLearned; rev++ {
		a.learn(at("n3", rev))
	}
	if n := len(a.overlay["n3"]); n != maxLearned {
		t.Errorf("%d revisions kept for n3, want at most %d", n, maxLearned)
	}
	if _, ok := a.at("n3", 100+maxLearned-1); ok {
		t.Error("the oldest revisions beyond maxLearned are still kept")
	}
	if _, ok := a.at("n3", 100+2*maxLearned-1); !ok {
		t.Error("the newest revision of n3 is not kept")
	}
	a.forgetDeleted("n3")
	if got, rev := a.get(nil, "n3"); got != nil || rev != 0 {
		t.Errorf("get after forgetDeleted = %v at %d, want none", got, rev)
	}
}

// TestAllocationsEchoOfTheBindInFlight: the watch echo of a bind's
// allocation may come before the commit's answer (before learn). It is
// then the bind's own copy, at the echo's revision, only for the very
// bytes the bind puts; once the commit has answered it is not offered
// again; and the copy is not the object the commit goes on changing.
func TestAllocationsEchoOfTheBindInFlight(t *testing.T) {
	a := allocations{overlay: map[string][]*corev1.NodeAllocation{}, pending: map[string]pendingWrite{}}
	next := &corev1.NodeAllocation{
		Metadata: &corev1.ObjectMeta{Name: "n1", ResourceVersion: "4"},
		Pods:     map[string]*corev1.AllocatedPod{"uid-1": {Namespace: "ns", Name: "p1", MilliCpu: 100}},
	}
	value, err := objects.Encode(next)
	if err != nil {
		t.Fatal(err)
	}
	other := slices.Clone(value)
	other[len(other)-1] ^= 1

	done := a.writing(next, value)
	if _, ok := a.echo("n1", 7, other); ok {
		t.Error("an echo with other bytes was taken for the bind in flight")
	}
	if _, ok := a.echo("n2", 7, value); ok {
		t.Error("the echo of another node was taken for the bind in flight")
	}
	got, ok := a.echo("n1", 7, value)
	if !ok {
		t.Fatal("the echo of the bind in flight was not taken")
	}
	if got == next || got.GetMetadata() == next.GetMetadata() {
		t.Error("the echo is the bind's own object or metadata, which its commit changes")
	}
	if objects.Revision(got) != 7 || !proto.Equal(got.GetPods()["uid-1"], next.GetPods()["uid-1"]) || len(got.GetPods()) != 1 {
		t.Errorf("the echo = %v, want the bind's allocation at 7", got)
	}
	var decoded corev1.NodeAllocation
	if err := objects.Decode(&raftstore.KV{Key: "k", Value: value, ModRevision: 7}, &decoded); err != nil || !proto.Equal(&decoded, got) {
		t.Errorf("the echo %v is not the value's decoding %v (%v)", got, &decoded, err)
	}
	if _, ok := a.echo("n1", 7, value); ok {
		t.Error("the bind in flight was taken twice")
	}
	done()

	done = a.writing(next, value)
	done() // the commit answered first (or failed): learn's business now
	if _, ok := a.echo("n1", 8, value); ok {
		t.Error("a bind's pending copy outlived its commit")
	}
	if done := a.writing(next, nil); done == nil {
		t.Error("writing with no value returned no done")
	} else {
		done()
	}
}
