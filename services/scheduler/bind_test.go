package scheduler

import (
	"testing"

	"github.com/podflow/podflow/proto/corev1"
)

// TestSawAllocated: a bind goes on only when the decision saw every pod
// the node's allocation accounts for (the pod itself and finished pods
// aside).
func TestSawAllocated(t *testing.T) {
	pod := mkPod("p", "100m", "")
	seen := func(names ...string) []*podMeta {
		var out []*podMeta
		for _, n := range names {
			e, err := newPodEntry(mkPod(n, "100m", ""), "n1")
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, &e.meta)
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
		seen  []*podMeta
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
			if got := sawAllocated(tc.alloc, tc.seen, pod, terminated); got != tc.want {
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
	e, err := newPodEntry(mkPod("a", "100m", ""), "n1")
	if err != nil {
		t.Fatal(err)
	}
	alloc := &corev1.NodeAllocation{Metadata: &corev1.ObjectMeta{Name: "n1"}, Pods: map[string]*corev1.AllocatedPod{
		"uid-a": {Namespace: "default", Name: "a"}, "uid-b": {Namespace: "default", Name: "b"},
	}}
	asked := 0
	terminated := func(string) bool { asked++; return false }
	req := bindRequest{pod: pod, seen: []*podMeta{&e.meta}, decidedAt: 10}
	for _, tc := range []struct {
		allocRev int64
		want     bool
	}{{9, true}, {10, true}, {11, false}} {
		asked = 0
		if got := decisionSawAllocation(alloc, tc.allocRev, req, terminated); got != tc.want {
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
	var seen []*podMeta
	for _, n := range []string{"a", "b", "c"} {
		a.Pods["uid-"+n] = &corev1.AllocatedPod{Namespace: "default", Name: n}
		e, err := newPodEntry(mkPod(n, "100m", ""), "n1")
		if err != nil {
			t.Fatal(err)
		}
		seen = append(seen, &e.meta)
	}
	asked := 0
	if !sawAllocated(a, seen, pod, func(string) bool { asked++; return false }) || asked != 0 {
		t.Errorf("sawAllocated asked the cache %d times", asked)
	}
}

// TestAllocationsAt: the informer's echo of a learned allocation is that
// allocation only at exactly the revision learned.
func TestAllocationsAt(t *testing.T) {
	a := allocations{overlay: map[string]*corev1.NodeAllocation{}}
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
