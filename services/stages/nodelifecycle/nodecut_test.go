package nodelifecycle

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/objects"
)

// TestDecodeNodeIsTheReadPart: decodeNode yields exactly what a pass
// reads of a node decoded whole — its name, uid, creationTimestamp and
// resourceVersion, its taints and its conditions — for random nodes
// (every field of every message set or not), for nodes stored as several
// concatenated encodings (they merge), and with unknown fields. Red if
// the cut keeps a field a pass does not read, or drops or changes one it
// reads.
func TestDecodeNodeIsTheReadPart(t *testing.T) {
	r := rand.New(rand.NewPCG(41, 4))
	taints, conditions := 0, 0
	for i := range 3000 {
		value := storedValue(t, r, func() *corev1.Node { return &corev1.Node{Metadata: &corev1.ObjectMeta{}} })
		kv := &raftstore.KV{Key: fmt.Sprintf("/registry/minions/n%d", i), Value: value, ModRevision: int64(i + 1)}
		var whole corev1.Node
		if err := objects.Decode(kv, &whole); err != nil {
			t.Fatal(err)
		}
		md := whole.GetMetadata()
		want := &corev1.Node{Metadata: &corev1.ObjectMeta{Name: md.GetName(), Uid: md.GetUid(), CreationTimestamp: md.GetCreationTimestamp(),
			ResourceVersion: md.GetResourceVersion()}}
		if whole.Spec != nil {
			want.Spec = &corev1.NodeSpec{Taints: whole.Spec.GetTaints()}
		}
		if whole.Status != nil {
			want.Status = &corev1.NodeStatus{Conditions: whole.Status.GetConditions()}
		}
		var got corev1.Node
		if err := decodeNode(kv, &got); err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(&got, want) {
			t.Fatalf("node %d: decodeNode gives\n%v\nwant\n%v", i, &got, want)
		}
		if len(got.GetSpec().GetTaints()) > 0 {
			taints++
		}
		if len(got.GetStatus().GetConditions()) > 0 {
			conditions++
		}
	}
	if taints < 300 || conditions < 300 {
		t.Fatalf("only %d random nodes had taints, %d conditions: the test does not exercise the cut", taints, conditions)
	}
	if err := decodeNode(&raftstore.KV{Key: "/registry/minions/torn", Value: []byte{0x12, 0x05, 0x01}}, &corev1.Node{}); err == nil {
		t.Error("decodeNode read torn bytes")
	}
}
