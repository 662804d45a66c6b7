package informer_test

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/raftstore/raftstoretest"
	"github.com/podflow/podflow/services/informer"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/objects/objectstest"
)

// byOwner files a pod under its namespace and first owner's uid, an
// orphan under its namespace alone (the shape of kube's pod controller
// index).
func byOwner(p *corev1.Pod) []string {
	md := p.GetMetadata()
	if refs := md.GetOwnerReferences(); len(refs) > 0 {
		return []string{md.GetNamespace() + "/" + refs[0].GetUid()}
	}
	return []string{md.GetNamespace()}
}

func sortedNames(pods []*corev1.Pod) []string {
	out := names(pods)
	slices.Sort(out)
	return out
}

// TestIndex: ByIndex follows creates, updates that move a pod from one
// value to another or keep it under its value (ByIndex giving the
// updated object), and deletes, through the list, a relist after the
// watch fell behind compaction, and the watch; an index added to a
// synced cache is built from it; a name is added once.
func TestIndex(t *testing.T) {
	kv := objectstest.New()
	st := objects.FromKV(kv)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pod := func(ns, name, owner string) *corev1.Pod {
		p := &corev1.Pod{Metadata: &corev1.ObjectMeta{Namespace: ns, Name: name}}
		if owner != "" {
			p.Metadata.OwnerReferences = []*corev1.OwnerReference{{Kind: "ReplicaSet", Name: "rs-" + owner, Uid: owner, Controller: true}}
		}
		return p
	}
	apply := func(p *corev1.Pod) {
		t.Helper()
		if _, err := st.Apply(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	del := func(ns, name string) {
		t.Helper()
		if _, err := st.Delete(ctx, objects.Pods, ns, name, 0); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []*corev1.Pod{pod("a", "p1", "u1"), pod("a", "p2", "u1"), pod("a", "o1", ""), pod("b", "o2", ""), pod("a", "q1", "u2")} {
		apply(p)
	}
	// The first watch finds its revision compacted, after changes the
	// list did not see: the informer relists.
	var watches atomic.Int32
	kv.Hook(func(method, _ string) error {
		if method == "Watch" && watches.Add(1) == 1 {
			apply(pod("a", "p3", "u1"))
			del("a", "p2")
			apply(pod("a", "o1", "u1")) // adopted
			kv.Compact(kv.Revision())
		}
		return nil
	})
	inf, err := informer.New[*corev1.Pod](st, "", informer.Handlers[*corev1.Pod]{})
	if err != nil {
		t.Fatal(err)
	}
	if err := inf.AddIndex("owner", byOwner); err != nil {
		t.Fatal(err)
	}
	if err := inf.AddIndex("owner", byOwner); !errors.Is(err, informer.ErrIndexExists) {
		t.Errorf("AddIndex twice: %v, want ErrIndexExists", err)
	}
	run(ctx, t, inf)
	if err := inf.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
	want := func(what string, w map[string][]string) {
		t.Helper()
		raftstoretest.WaitFor(t, 10*time.Second, what, func() bool {
			for v, names := range w {
				if !slices.Equal(sortedNames(inf.ByIndex("owner", v)), names) {
					return false
				}
			}
			return true
		})
	}
	want("the relist in the index", map[string][]string{
		"a/u1": {"a/o1", "a/p1", "a/p3"}, "a/u2": {"a/q1"}, "a": nil, "b": {"b/o2"},
	})
	if watches.Load() < 2 {
		t.Fatalf("%d watches: the informer did not relist", watches.Load())
	}

	apply(pod("a", "p1", "")) // released
	kept := pod("a", "p3", "u1")
	kept.Metadata.Labels = map[string]string{"v": "2"} // an update that keeps its value
	apply(kept)
	del("a", "q1")
	apply(pod("b", "p4", "u1"))
	want("the watch's changes in the index", map[string][]string{
		"a/u1": {"a/o1", "a/p3"}, "a/u2": nil, "a": {"a/p1"}, "b": {"b/o2"}, "b/u1": {"b/p4"},
	})
	for _, p := range inf.ByIndex("owner", "a/u1") {
		if p.GetMetadata().GetName() == "p3" && p.GetMetadata().GetLabels()["v"] != "2" {
			t.Errorf("ByIndex gives p3 as it was before its update: labels %v", p.GetMetadata().GetLabels())
		}
	}
	if got := inf.ByIndex("none", "a"); len(got) != 0 {
		t.Errorf("ByIndex of an unknown index = %v", names(got))
	}
	// a/u2 lost its last pod: its value is gone.
	values := inf.IndexValues("owner")
	slices.Sort(values)
	if !slices.Equal(values, []string{"a", "a/u1", "b", "b/u1"}) {
		t.Errorf("IndexValues(owner) = %v", values)
	}
	if got := inf.IndexValues("none"); len(got) != 0 {
		t.Errorf("IndexValues of an unknown index = %v", got)
	}

	// An index added to a synced cache holds what the cache holds.
	if err := inf.AddIndex("namespace", func(p *corev1.Pod) []string { return []string{p.GetMetadata().GetNamespace()} }); err != nil {
		t.Fatal(err)
	}
	if got := sortedNames(inf.ByIndex("namespace", "b")); !slices.Equal(got, []string{"b/o2", "b/p4"}) {
		t.Errorf("ByIndex(namespace, b) of an index added late = %v", got)
	}
}
