package nodelifecycle

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/podrules"
	"github.com/podflow/podflow/proto/vt"
	"github.com/podflow/podflow/proto/vt/vttest"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/objects"
)

// cutWords are the strings random pods are made of: the condition type
// a podCutter keeps among others.
var cutWords = []string{podrules.PodReady, podrules.PodScheduled, podrules.ConditionTrue, "other", "", "sim-node-1", "é"}

// podFiller fills random pods and nodes with cutWords.
var podFiller = vttest.Sparse(cutWords...)

// readPart is what the controller reads of a pod decoded whole: its
// identity and deletionTimestamp, its node and tolerations, the type and
// status of its Ready conditions.
func readPart(p *corev1.Pod) *corev1.Pod {
	md := p.GetMetadata()
	out := &corev1.Pod{Metadata: &corev1.ObjectMeta{Name: md.GetName(), Namespace: md.GetNamespace(), Uid: md.GetUid(),
		DeletionTimestamp: md.GetDeletionTimestamp(), ResourceVersion: md.GetResourceVersion()}}
	if p.Spec != nil {
		out.Spec = &corev1.PodSpec{NodeName: p.Spec.GetNodeName(), Tolerations: p.Spec.GetTolerations()}
	}
	if p.Status != nil {
		out.Status = &corev1.PodStatus{}
		for _, c := range p.Status.GetConditions() {
			if c.GetType() == podrules.PodReady {
				out.Status.Conditions = append(out.Status.Conditions, &corev1.PodCondition{Type: c.GetType(), Status: c.GetStatus()})
			}
		}
	}
	return out
}

// TestPodCutterKeepsTheReadPart: a podCutter's decode yields exactly what the
// controller reads of the pod decoded whole (readPart) — for random pods
// (every field of every message set or not), for pods stored as several
// concatenated encodings (decoding merges them: the last node name
// counts, tolerations and conditions add up), and with unknown fields;
// with one cutter for all, so that pods share their specs and statuses.
// Red if it keeps a field the controller does not read, or drops or
// changes one it reads, or shares a spec or status that differs.
func TestPodCutterKeepsTheReadPart(t *testing.T) {
	r := rand.New(rand.NewPCG(41, 2))
	readies, tolerations := 0, 0
	pc := newPodCutter()
	for i := range 3000 {
		value := storedValue(t, r, func() *corev1.Pod { return &corev1.Pod{Metadata: &corev1.ObjectMeta{}} })
		kv := &raftstore.KV{Key: fmt.Sprintf("/registry/pods/ns/p%d", i), Value: value, ModRevision: int64(i + 1)}
		var whole corev1.Pod
		if err := objects.Decode(kv, &whole); err != nil {
			t.Fatal(err)
		}
		want := readPart(&whole)
		var got corev1.Pod
		if err := pc.decode(kv, &got); err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(&got, want) {
			t.Fatalf("pod %d: the cut pod is\n%v\nwant\n%v", i, &got, want)
		}
		if podrules.PodCondition(got.GetStatus(), podrules.PodReady) != nil {
			readies++
		}
		if len(got.GetSpec().GetTolerations()) > 0 {
			tolerations++
		}
	}
	if readies < 100 || tolerations < 300 {
		t.Fatalf("only %d random pods had a Ready condition, %d tolerations: the test does not exercise the cut", readies, tolerations)
	}
	if err := pc.decode(&raftstore.KV{Key: "/registry/pods/ns/torn", Value: []byte{0x12, 0x05, 0x01}}, &corev1.Pod{}); err == nil {
		t.Error("a podCutter read torn bytes")
	}
}

// TestPodCutterShares: pods of one node with the same tolerations share
// one spec, pods with the same Ready status one status; another node, or
// other tolerations, another spec. Once a cutter shares maxShared specs
// it drops the older half, and still decodes right.
func TestPodCutterShares(t *testing.T) {
	pc := newPodCutter()
	tols := []*corev1.Toleration{tolerate(TaintNodeNotReady, 300), tolerate(TaintNodeUnreachable, 300)}
	cut := func(name, node string, tols ...*corev1.Toleration) *corev1.Pod {
		t.Helper()
		b, err := vt.Marshal(pod(name, node, tols...))
		if err != nil {
			t.Fatal(err)
		}
		var p corev1.Pod
		if err := pc.decode(&raftstore.KV{Key: "/registry/pods/default/" + name, Value: b, ModRevision: 1}, &p); err != nil {
			t.Fatal(err)
		}
		return &p
	}
	a, b := cut("a", "n1", tols...), cut("b", "n1", tols...)
	c, d := cut("c", "n2", tols...), cut("d", "n1")
	if a.Spec != b.Spec || a.Status != b.Status {
		t.Error("two pods of one node with the same tolerations and Ready status do not share their spec and status")
	}
	if a.Spec == c.Spec || a.Spec == d.Spec || a.Status != c.Status {
		t.Error("pods of other nodes or tolerations share a spec, or pods with one Ready status do not share it")
	}
	if a.GetSpec().GetNodeName() != "n1" || c.GetSpec().GetNodeName() != "n2" || len(d.GetSpec().GetTolerations()) != 0 || len(a.GetSpec().GetTolerations()) != 2 {
		t.Errorf("cut specs: %v, %v, %v", a.Spec, c.Spec, d.Spec)
	}
	for i := range 3 * maxShared {
		p := cut(fmt.Sprintf("p%d", i), fmt.Sprintf("node-%d", i), tols...)
		if p.GetSpec().GetNodeName() != fmt.Sprintf("node-%d", i) {
			t.Fatalf("pod %d on %s", i, p.GetSpec().GetNodeName())
		}
	}
	if n := len(pc.specs.cur) + len(pc.specs.old); n > 2*maxShared {
		t.Fatalf("the cutter shares %d specs, more than %d", n, 2*maxShared)
	}
}

// storedValue is a random stored value of the kind newMsg makes: one or
// two encodings of random messages concatenated (a reader merges them),
// each with metadata, and now and then an unknown field after them.
func storedValue[M proto.Message](t *testing.T, r *rand.Rand, newMsg func() M) []byte {
	t.Helper()
	var value []byte
	for range 1 + r.IntN(2) {
		m := newMsg()
		podFiller.Fill(r, m.ProtoReflect(), 6)
		b, err := vt.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		value = append(value, b...)
	}
	if r.IntN(4) == 0 {
		value = protowire.AppendTag(value, 77, protowire.BytesType)
		value = protowire.AppendBytes(value, []byte("unknown"))
	}
	return value
}
