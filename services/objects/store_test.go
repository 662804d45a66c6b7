package objects_test

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/objects/objectstest"
)

var ctx = context.Background()

func pod(ns, name string) *corev1.Pod {
	return &corev1.Pod{Metadata: &corev1.ObjectMeta{Namespace: ns, Name: name}, Spec: &corev1.PodSpec{}}
}

// TestCreateGetList: a created object comes back with its resourceVersion
// from the store's revision, List gives one namespace or all, sorted.
func TestCreateGetList(t *testing.T) {
	st := objects.FromKV(objectstest.New())
	for _, p := range []*corev1.Pod{pod("b", "y"), pod("a", "z"), pod("ab", "x")} {
		rev, err := st.Create(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if objects.Revision(p) != rev {
			t.Errorf("Create set resourceVersion %q, want %d", p.GetMetadata().GetResourceVersion(), rev)
		}
	}
	if _, err := st.Create(ctx, pod("a", "z")); !errors.Is(err, raftstore.ErrAlreadyExists) {
		t.Errorf("second Create: %v, want ErrAlreadyExists", err)
	}
	got, err := objects.Get[*corev1.Pod](ctx, st, "a", "z")
	if err != nil || got.GetMetadata().GetResourceVersion() != "2" {
		t.Errorf("Get a/z = %v, %v; want resourceVersion 2", got, err)
	}
	if _, err := objects.Get[*corev1.Pod](ctx, st, "a", "missing"); !errors.Is(err, raftstore.ErrNotFound) {
		t.Errorf("Get of a missing pod: %v, want ErrNotFound", err)
	}
	tests := []struct {
		ns   string
		want []string
	}{
		{"", []string{"a/z", "ab/x", "b/y"}},
		{"a", []string{"a/z"}}, // "a" is a prefix of "ab" as a string, not as a namespace
		{"c", nil},
	}
	for _, tt := range tests {
		t.Run("namespace "+tt.ns, func(t *testing.T) {
			pods, rev, err := objects.List[*corev1.Pod](ctx, st, tt.ns)
			if err != nil || rev != 3 {
				t.Fatalf("List = revision %d, %v; want 3", rev, err)
			}
			var names []string
			for _, p := range pods {
				names = append(names, p.GetMetadata().GetNamespace()+"/"+p.GetMetadata().GetName())
			}
			if !slices.Equal(names, tt.want) {
				t.Errorf("List(%q) = %v, want %v", tt.ns, names, tt.want)
			}
		})
	}
	if _, err := st.Create(ctx, pod("", "nameless-namespace")); !errors.Is(err, objects.ErrInvalid) {
		t.Errorf("Create of a pod without a namespace: %v, want ErrInvalid", err)
	}
}

// TestUpdate: an update holds only at the revision the object was read
// at; a stale copy conflicts and changes nothing.
func TestUpdate(t *testing.T) {
	st := objects.FromKV(objectstest.New())
	p := pod("ns", "p")
	if _, err := st.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	stale := pod("ns", "p")
	objects.SetRevision(stale, objects.Revision(p))
	p.Spec.NodeName = "n1"
	if _, err := st.Update(ctx, p); err != nil {
		t.Fatal(err)
	}
	stale.Spec.NodeName = "n2"
	if _, err := st.Update(ctx, stale); !errors.Is(err, raftstore.ErrConflict) {
		t.Fatalf("Update of a stale copy: %v, want ErrConflict", err)
	}
	if _, err := st.Update(ctx, pod("ns", "p")); !errors.Is(err, objects.ErrInvalid) {
		t.Errorf("Update without a resourceVersion: %v, want ErrInvalid", err)
	}
	got, _ := objects.Get[*corev1.Pod](ctx, st, "ns", "p")
	if got.GetSpec().GetNodeName() != "n1" {
		t.Errorf("nodeName = %q, want n1 (the stale update must not land)", got.GetSpec().GetNodeName())
	}
	if _, err := st.Delete(ctx, objects.Pods, "ns", "p", objects.Revision(stale)); !errors.Is(err, raftstore.ErrConflict) {
		t.Errorf("Delete at a stale revision: %v, want ErrConflict", err)
	}
	if _, err := st.Delete(ctx, objects.Pods, "ns", "p", objects.Revision(got)); err != nil {
		t.Errorf("Delete at the current revision: %v", err)
	}
}

// TestMutateRetriesConflicts: when another writer gets in between
// Mutate's read and write, Mutate rereads and applies f to the fresh
// object, so neither change is lost.
func TestMutateRetriesConflicts(t *testing.T) {
	st := objects.FromKV(objectstest.New())
	label := func(p *corev1.Pod, k string) {
		if p.Metadata.Labels == nil {
			p.Metadata.Labels = map[string]string{}
		}
		p.Metadata.Labels[k] = "yes"
	}
	if _, err := st.Create(ctx, pod("ns", "p")); err != nil {
		t.Fatal(err)
	}
	calls := 0
	got, err := objects.Mutate(ctx, st, "ns", "p", func(p *corev1.Pod) error {
		calls++
		if calls == 1 { // a concurrent writer
			if _, err := objects.Mutate(ctx, st, "ns", "p", func(p *corev1.Pod) error {
				label(p, "other")
				return nil
			}); err != nil {
				t.Fatal(err)
			}
		}
		label(p, "mine")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if calls != 2 {
		t.Errorf("f ran %d times, want 2 (once more after the conflict)", calls)
	}
	stored, _ := objects.Get[*corev1.Pod](ctx, st, "ns", "p")
	if l := stored.GetMetadata().GetLabels(); l["mine"] != "yes" || l["other"] != "yes" {
		t.Errorf("labels = %v, want both writers' labels", l)
	}
	if got.GetMetadata().GetResourceVersion() != stored.GetMetadata().GetResourceVersion() {
		t.Errorf("Mutate returned resourceVersion %q, stored is %q", got.GetMetadata().GetResourceVersion(), stored.GetMetadata().GetResourceVersion())
	}

	rev := objects.Revision(stored)
	if _, err := objects.Mutate(ctx, st, "ns", "p", func(*corev1.Pod) error { return objects.ErrNoChange }); err != nil {
		t.Fatal(err)
	}
	if again, _ := objects.Get[*corev1.Pod](ctx, st, "ns", "p"); objects.Revision(again) != rev {
		t.Error("ErrNoChange wrote")
	}
	boom := errors.New("boom")
	if _, err := objects.Mutate(ctx, st, "ns", "p", func(*corev1.Pod) error { return boom }); !errors.Is(err, boom) {
		t.Errorf("Mutate with a failing f: %v, want f's error", err)
	}
	if _, err := objects.Mutate(ctx, st, "ns", "gone", func(*corev1.Pod) error { return nil }); !errors.Is(err, raftstore.ErrNotFound) {
		t.Errorf("Mutate of a missing pod: %v, want ErrNotFound", err)
	}
}

// TestApply: apply creates, then replaces whatever revision is stored.
func TestApply(t *testing.T) {
	st := objects.FromKV(objectstest.New())
	cm := &corev1.ConfigMap{Metadata: &corev1.ObjectMeta{Namespace: "ns", Name: "c"}, Data: map[string]string{"k": "1"}}
	if _, err := st.Apply(ctx, cm); err != nil {
		t.Fatal(err)
	}
	cm2 := &corev1.ConfigMap{Metadata: &corev1.ObjectMeta{Namespace: "ns", Name: "c"}, Data: map[string]string{"k": "2"}}
	rev, err := st.Apply(ctx, cm2)
	if err != nil || objects.Revision(cm2) != rev {
		t.Fatalf("second Apply = %d, %v (resourceVersion %q)", rev, err, cm2.GetMetadata().GetResourceVersion())
	}
	got, _ := objects.Get[*corev1.ConfigMap](ctx, st, "ns", "c")
	if got.GetData()["k"] != "2" {
		t.Errorf("data = %v, want the last apply's", got.GetData())
	}
}

// TestTxn: a typed transaction commits its puts and deletes at one
// revision when its compares hold; otherwise it writes nothing and
// ConflictOn names the object whose compare failed.
func TestTxn(t *testing.T) {
	st := objects.FromKV(objectstest.New())
	p := pod("ns", "p")
	old := pod("ns", "old")
	for _, o := range []*corev1.Pod{p, old} {
		if _, err := st.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	alloc := &corev1.NodeAllocation{Metadata: &corev1.ObjectMeta{Name: "n1"}}
	bound := pod("ns", "p")
	bound.Spec.NodeName = "n1"

	tests := []struct {
		name         string
		txn          objects.Txn
		wantConflict objects.Object // nil: commits
	}{
		{"stale pod", objects.Txn{}.Compare(p, 99).Compare(alloc, objects.Absent).Put(bound), p},
		{"allocation exists", objects.Txn{}.Unchanged(p).Compare(alloc, objects.Exists).Put(bound), alloc},
		{"holds", objects.Txn{}.Unchanged(p).Compare(alloc, objects.Absent).Put(bound).Put(alloc).Delete(old), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before, _, _ := objects.List[*corev1.Pod](ctx, st, "")
			rev, err := st.Commit(ctx, tt.txn)
			if tt.wantConflict != nil {
				if !errors.Is(err, raftstore.ErrConflict) || !objects.ConflictOn(err, tt.wantConflict) {
					t.Fatalf("Commit: %v, want a conflict on %s", err, tt.wantConflict.GetMetadata().GetName())
				}
				if after, _, _ := objects.List[*corev1.Pod](ctx, st, ""); len(after) != len(before) {
					t.Error("a conflicting transaction wrote")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if objects.Revision(bound) != rev || objects.Revision(alloc) != rev {
				t.Errorf("put objects carry %d and %d, want the commit's revision %d", objects.Revision(bound), objects.Revision(alloc), rev)
			}
			got, err := objects.Get[*corev1.Pod](ctx, st, "ns", "p")
			if err != nil || got.GetSpec().GetNodeName() != "n1" || objects.Revision(got) != rev {
				t.Errorf("pod = %v, %v; want bound to n1 at %d", got, err, rev)
			}
			if _, err := objects.Get[*corev1.NodeAllocation](ctx, st, "", "n1"); err != nil {
				t.Errorf("allocation not written: %v", err)
			}
			if _, err := objects.Get[*corev1.Pod](ctx, st, "ns", "old"); !errors.Is(err, raftstore.ErrNotFound) {
				t.Errorf("deleted pod: %v, want ErrNotFound", err)
			}
		})
	}
	var empty objects.Txn
	if !empty.Empty() || !empty.Compare(p, 1).Empty() {
		t.Error("Empty: a transaction that writes nothing is empty, compares or not")
	}
	if empty.Put(p).Empty() {
		t.Error("Empty: a transaction with a put is not empty")
	}
	if _, err := st.Commit(ctx, objects.Txn{}.Put(pod("", "no-namespace")).Put(pod("ns", "fine"))); !errors.Is(err, objects.ErrInvalid) {
		t.Errorf("Commit with an invalid object: %v, want ErrInvalid", err)
	}
	if _, err := objects.Get[*corev1.Pod](ctx, st, "ns", "fine"); !errors.Is(err, raftstore.ErrNotFound) {
		t.Error("a transaction with an invalid object wrote its other objects")
	}
}

// TestTxnIsAValue: extending a Txn leaves the one it came from as it was,
// so two transactions built from one base do not share writes.
func TestTxnIsAValue(t *testing.T) {
	st := objects.FromKV(objectstest.New())
	base := objects.Txn{}.Put(pod("ns", "a"))
	withB := base.Put(pod("ns", "b"))
	_ = base.Put(pod("ns", "c")) // must not overwrite b's slot in withB
	if _, err := st.Commit(ctx, withB); err != nil {
		t.Fatal(err)
	}
	pods, _, _ := objects.List[*corev1.Pod](ctx, st, "")
	var names []string
	for _, p := range pods {
		names = append(names, p.GetMetadata().GetName())
	}
	if !slices.Equal(names, []string{"a", "b"}) {
		t.Errorf("committed %v, want [a b]", names)
	}
}

// TestTxnValue: Txn.Value is what the commit stores for the key, as a
// read (and a watch) returns it: the last write of the key wins, a delete
// or a key not written has none.
func TestTxnValue(t *testing.T) {
	st := objects.FromKV(objectstest.New())
	a, b := pod("ns", "a"), pod("ns", "b")
	first := pod("ns", "a")
	first.Spec.NodeName = "n1"
	txn := objects.Txn{}.Put(first).Put(a).Put(b).Delete(b)
	if v := txn.Value(pod("ns", "b")); v != nil {
		t.Errorf("Value of a deleted key = %q, want nil", v)
	}
	if v := txn.Value(pod("ns", "c")); v != nil {
		t.Errorf("Value of a key not written = %q, want nil", v)
	}
	want := txn.Value(a)
	if _, err := st.Commit(ctx, txn); err != nil {
		t.Fatal(err)
	}
	kv, err := st.KV().Get(ctx, objects.Pods.Key("ns", "a"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(kv.Value, want) {
		t.Errorf("Value = %x, the store holds %x", want, kv.Value)
	}
	var got corev1.Pod
	if err := objects.Decode(kv, &got); err != nil || got.GetSpec().GetNodeName() != "" {
		t.Errorf("the stored pod is %v (%v), want the last put of the key", &got, err)
	}
}

// TestTxnPutEncoded: PutEncoded stores the bytes it is given, as a Put
// of the object stores its encoding, and sets the object's revision.
func TestTxnPutEncoded(t *testing.T) {
	st := objects.FromKV(objectstest.New())
	a := &corev1.NodeAllocation{Metadata: &corev1.ObjectMeta{Name: "n1"}, Pods: map[string]*corev1.AllocatedPod{
		"uid-a": {Namespace: "ns", Name: "a"},
	}}
	value, err := objects.Encode(a)
	if err != nil {
		t.Fatal(err)
	}
	txn := objects.Txn{}.PutEncoded(a, value)
	if v := txn.Value(a); !bytes.Equal(v, value) {
		t.Errorf("Value = %x, want the bytes given %x", v, value)
	}
	rev, err := st.Commit(ctx, txn)
	if err != nil {
		t.Fatal(err)
	}
	if objects.Revision(a) != rev {
		t.Errorf("revision of the object put = %d, want the commit's %d", objects.Revision(a), rev)
	}
	kv, err := st.KV().Get(ctx, objects.NodeAllocations.Key("", "n1"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(kv.Value, value) {
		t.Errorf("the store holds %x, want the bytes given %x", kv.Value, value)
	}
	if _, err := st.Commit(ctx, objects.Txn{}.PutEncoded(&corev1.NodeAllocation{Metadata: &corev1.ObjectMeta{}}, value)); err == nil {
		t.Error("PutEncoded of an object without a name committed")
	}
}
