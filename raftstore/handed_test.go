package raftstore

import (
	"testing"

	"github.com/hashicorp/raft"
	"github.com/podflow/podflow/proto/storev1"
	"google.golang.org/protobuf/encoding/protowire"
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
	f.handed.hand(data, put("/a", "1", "k1"))

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

	f.handed.release(data)
	if r := applyData(data); r.GetError() == nil {
		t.Fatalf("a released slice applied the handed command: %v", r)
	}
}

// TestAppendCompares: a confined write's bytes with its pinning compares
// appended decode as the command the leader applies (its own compares,
// then the pins, in order; ops and unknown fields kept), so followers,
// which decode the entry, apply what the leader applied.
func TestAppendCompares(t *testing.T) {
	for _, tc := range []struct {
		name string
		cmd  *storev1.Command
		pins []*storev1.Compare
	}{
		{"no compares of its own", &storev1.Command{IdempotencyKey: "k1", Kind: storev1.WriteKind_WRITE_KIND_TXN,
			Ops: []*storev1.Op{{Type: storev1.OpType_OP_TYPE_PUT, Key: "/registry/pods/a/b", Value: []byte("pod")}}},
			[]*storev1.Compare{{Key: "/registry/pods/a/b", ModRevision: 7}}},
		{"own compares, pins of absent keys", &storev1.Command{IdempotencyKey: "k2", Kind: storev1.WriteKind_WRITE_KIND_UPDATE,
			Compares: []*storev1.Compare{{Key: "/x", ModRevision: -1}, {Key: "/registry/pods/a/b", ModRevision: 3}},
			Ops: []*storev1.Op{{Type: storev1.OpType_OP_TYPE_PUT, Key: "/registry/pods/a/b", Value: []byte("pod")},
				{Type: storev1.OpType_OP_TYPE_DELETE, Key: "/registry/pods/a/c"}}},
			[]*storev1.Compare{{Key: "/registry/pods/a/b", ModRevision: 3}, {Key: "/registry/pods/a/c", ModRevision: 0}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data, err := tc.cmd.MarshalVT()
			if err != nil {
				t.Fatal(err)
			}
			data = protowire.AppendTag(data, 99, protowire.VarintType) // a field this build does not know
			data = protowire.AppendVarint(data, 1)
			var cmd storev1.Command
			if err := proto.Unmarshal(data, &cmd); err != nil {
				t.Fatal(err)
			}
			out, err := appendCompares(data, tc.pins)
			if err != nil {
				t.Fatal(err)
			}
			if string(out[:len(data)]) != string(data) || len(data) > 0 && &out[0] == &data[0] {
				t.Fatal("appendCompares changed or reused the request's bytes")
			}
			cmd.Compares = append(cmd.Compares, tc.pins...)
			var got storev1.Command
			if err := proto.Unmarshal(out, &got); err != nil {
				t.Fatal(err)
			}
			if !proto.Equal(&got, &cmd) {
				t.Fatalf("decoded %v, want %v", &got, &cmd)
			}
		})
	}
}
