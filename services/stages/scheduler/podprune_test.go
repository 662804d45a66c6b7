package scheduler

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/podrules"
	"github.com/podflow/podflow/proto/vt"
	"github.com/podflow/podflow/proto/vt/vttest"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/stage"
	"github.com/podflow/podflow/services/stages/scheduler/framework"
)

// pruneWords are the strings random pods are made of: the condition
// types and annotation keys the pruning filters on among others, so that
// every filter keeps and drops.
var pruneWords = []string{podrules.PodScheduled, framework.ConditionDisruptionTarget, podrules.PodReady,
	stage.AnnotationTraceparent, stage.AnnotationRequestID, "other", "", "sim-node-1", "é"}

// podFiller fills random pods with pruneWords.
var podFiller = vttest.Sparse(pruneWords...)

// randomFill sets m's fields with podFiller, messages to depth.
func randomFill(r *rand.Rand, m protoreflect.Message, depth int) { podFiller.Fill(r, m, depth) }

// decodeCompact is what decodeInformedPod did before pruning: decode
// the whole pod, then compact it when bound.
func decodeCompact(t *testing.T, kv *raftstore.KV) *corev1.Pod {
	t.Helper()
	var p corev1.Pod
	if err := objects.Decode(kv, &p); err != nil {
		t.Fatal(err)
	}
	if p.GetSpec().GetNodeName() != "" {
		compactBound(&p)
	}
	return &p
}

// TestPrunedBoundPodIsCompactBound: decodeInformedPod, which decodes only
// what pruneBoundPod keeps of a bound pod's bytes, yields exactly the pod
// that decoding it whole and compacting it did (compactBound) — for
// random pods (every field of every message the scheduler keeps or drops,
// the filtered conditions and annotations among others), for pods stored
// as several concatenated encodings (decoding merges them: the last
// node name counts), with unknown fields, and for unbound ones, which
// stay whole. Bytes pruning cannot read are decoded as before: whole,
// then compacted. Red if pruning keeps a field compactBound drops or
// drops one it keeps.
func TestPrunedBoundPodIsCompactBound(t *testing.T) {
	r := rand.New(rand.NewPCG(41, 7))
	pruned := 0
	for i := range 3000 {
		var value []byte
		for range 1 + r.IntN(2) { // two encodings concatenated merge
			p := &corev1.Pod{}
			randomFill(r, p.ProtoReflect(), 6)
			if p.Metadata == nil {
				p.Metadata = &corev1.ObjectMeta{}
			}
			if r.IntN(5) == 0 && p.Spec != nil {
				p.Spec.NodeName = "" // an unbound pod, or one unbound last
			}
			b, err := vt.Marshal(p)
			if err != nil {
				t.Fatal(err)
			}
			value = append(value, b...)
		}
		if r.IntN(4) == 0 { // an unknown field of the pod
			value = protowire.AppendTag(value, 77, protowire.BytesType)
			value = protowire.AppendBytes(value, []byte("unknown"))
		}
		kv := &raftstore.KV{Key: fmt.Sprintf("/pods/ns/p%d", i), Value: value, ModRevision: int64(i + 1)}
		want := decodeCompact(t, kv)
		var got corev1.Pod
		if err := decodeInformedPod(kv, &got); err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(&got, want) {
			t.Fatalf("pod %d: pruned decoding differs from compactBound's:\n got %v\nwant %v", i, &got, want)
		}
		if _, bound := pruneBoundPod(nil, value); bound {
			pruned++
		}
	}
	if pruned < 1000 {
		t.Fatalf("only %d of 3000 random pods were pruned: the test does not exercise pruning", pruned)
	}

	// The bench's pod, bound: pruned, and as compactBound leaves it.
	bound := storedPod(t, informedPod(3, "sim-node-0003"), 12)
	if _, ok := pruneBoundPod(nil, bound.Value); !ok {
		t.Fatal("a bound pod was not pruned")
	}
	var got corev1.Pod
	if err := decodeInformedPod(bound, &got); err != nil {
		t.Fatal(err)
	}
	if want := decodeCompact(t, bound); !proto.Equal(&got, want) {
		t.Errorf("bench pod: got %v\nwant %v", &got, want)
	}

	// Torn bytes are left to the full decoding, which refuses them.
	torn := &raftstore.KV{Key: "/pods/ns/torn", Value: bound.Value[:len(bound.Value)-3], ModRevision: 13}
	if _, ok := pruneBoundPod(nil, torn.Value); ok {
		t.Error("torn bytes were pruned")
	}
	if err := decodeInformedPod(torn, &corev1.Pod{}); err == nil {
		t.Error("torn bytes decoded")
	}
}

// BenchmarkInformedPodDecode: the CPU and allocations of the pod
// informer's decoding of a bound pod's write (the bench's pod: traced,
// admitted, Running), whole and compacted as before, and pruned.
func BenchmarkInformedPodDecode(b *testing.B) {
	kv := storedPod(b, informedPod(1, "sim-node-0001"), 9)
	for _, bb := range []struct {
		name string
		dec  func(*raftstore.KV, objects.Object) error
	}{
		{"compact", func(kv *raftstore.KV, o objects.Object) error {
			if err := objects.Decode(kv, o); err != nil {
				return err
			}
			compactBound(o.(*corev1.Pod))
			return nil
		}},
		{"pruned", decodeInformedPod},
	} {
		b.Run(bb.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := bb.dec(kv, &corev1.Pod{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
