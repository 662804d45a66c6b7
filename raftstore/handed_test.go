package raftstore

import (
	"testing"

	"github.com/hashicorp/raft"
	"github.com/podflow/podflow/proto/storev1"
	"google.golang.org/protobuf/proto"
)

// TestHandedCommand: the state machine applies the leader's decode of the
// very slice it was handed, and decodes anything else: a copy of the same
// bytes, a prefix of the slice (same first byte, other length), or the
// slice once released. The handed data here is undecodable, so the outcome
// says which path was taken.
func TestHandedCommand(t *testing.T) {
	f := newFSM(100, 0, 100)
	applyData := func(data []byte) *storev1.WriteResult {
		logIndex++
		return f.Apply(&raft.Log{Index: logIndex, Type: raft.LogCommand, Data: data}).(*storev1.WriteResult)
	}
	data := []byte{0xff, 0xff, 0xff, 0xff} // not a Command
	if err := proto.Unmarshal(data, &storev1.Command{}); err == nil {
		t.Fatal("the test's data decodes")
	}
	release := f.handed.hand(data, put("/a", "1", "k1"))

	if r := applyData(append([]byte(nil), data...)); r.GetError() == nil {
		t.Fatalf("a copy of the handed bytes applied the handed command: %v", r)
	}
	if r := applyData(data[:2]); r.GetError() == nil {
		t.Fatalf("a prefix of the handed slice applied the handed command: %v", r)
	}
	if r := applyData(data); r.GetError() != nil || r.GetRevision() != 1 {
		t.Fatalf("the handed slice: %v, want the handed put at revision 1", r)
	}
	if kv, _, ok := f.getKept("/a", nil); !ok || kv == nil || string(kv.GetValue()) != "1" {
		t.Fatalf("after the handed put /a is %v", kv)
	}

	release()
	if r := applyData(data); r.GetError() == nil {
		t.Fatalf("a released slice applied the handed command: %v", r)
	}
}
