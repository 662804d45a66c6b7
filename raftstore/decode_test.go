package raftstore

import (
	"bytes"
	"testing"
	"unsafe"

	"github.com/podflow/podflow/proto/storev1"
	"github.com/podflow/podflow/proto/vt"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// TestDecodeCommandIsUnmarshal: decodeCommand reads every entry as
// vt.Unmarshal does — the same command, or an error for the same bytes —
// taking its own path for what a Command's encoder writes and leaving
// the rest (unknown fields, other wire types, invalid UTF-8, torn data)
// to vt.Unmarshal; and a large value aliases the entry, a small one does
// not.
func TestDecodeCommandIsUnmarshal(t *testing.T) {
	pod := bytes.Repeat([]byte("p"), 3000)
	full := &storev1.Command{IdempotencyKey: "k-é", Kind: storev1.WriteKind_WRITE_KIND_TXN,
		Compares: []*storev1.Compare{{Key: "/registry/pods/a/b", ModRevision: 7}, {Key: "/x", ModRevision: -1}},
		Ops: []*storev1.Op{{Type: storev1.OpType_OP_TYPE_PUT, Key: "/registry/pods/a/b", Value: pod},
			{Type: storev1.OpType_OP_TYPE_PUT, Key: "/registry/nodes/n1", Value: []byte("node")},
			{Type: storev1.OpType_OP_TYPE_PUT, Key: "/empty", Value: []byte{}},
			{Type: storev1.OpType_OP_TYPE_DELETE, Key: "/registry/pods/a/c"}}}
	enc := func(m interface{ MarshalVT() ([]byte, error) }) []byte {
		b, err := m.MarshalVT()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	field := func(b []byte, num protowire.Number, v []byte) []byte {
		b = append([]byte(nil), b...)
		return protowire.AppendBytes(protowire.AppendTag(b, num, protowire.BytesType), v)
	}
	varint := func(b []byte, num protowire.Number, v uint64) []byte {
		b = append([]byte(nil), b...)
		return protowire.AppendVarint(protowire.AppendTag(b, num, protowire.VarintType), v)
	}
	op := enc(&storev1.Op{Type: storev1.OpType_OP_TYPE_PUT, Key: "/k", Value: []byte("v")})
	for _, tc := range []struct {
		name string
		data []byte
		fast bool // decodeCommand's own path reads it
	}{
		{"full", enc(full), true},
		{"empty", nil, true},
		{"key only", enc(&storev1.Command{IdempotencyKey: "k"}), true},
		{"an empty value written", field(nil, commandOps, field(field(nil, opKey, []byte("/k")), opValue, nil)), true},
		{"fields repeated: the last wins", varint(field(field(enc(full), commandIdempotencyKey, []byte("k2")), commandOps, varint(field(op, opValue, []byte("w")), opType, 2)), commandKind, 3), true},
		{"kind out of range", varint(nil, commandKind, 1<<40|5), true},
		{"unknown command field", varint(enc(full), 9, 1), false},
		{"unknown op field", field(enc(full), commandOps, varint(op, 9, 1)), false},
		{"unknown compare field", field(enc(full), commandCompares, varint(enc(&storev1.Compare{Key: "/c"}), 9, 1)), false},
		{"compare revision of another wire type", field(nil, commandCompares, field(nil, 2, []byte("x"))), false},
		{"compare fields repeated", field(nil, commandCompares, varint(varint(field(field(nil, 1, []byte("/a")), 1, []byte("/b")), 2, 5), 2, 1<<63)), true},
		{"kind of another wire type", field(enc(full), commandKind, []byte("x")), false},
		{"ops of another wire type", varint(enc(full), commandOps, 1), false},
		{"op key of another wire type", field(nil, commandOps, varint(nil, opKey, 1)), false},
		{"invalid UTF-8 key", field(nil, commandOps, field(nil, opKey, []byte{0xff})), false},
		{"invalid UTF-8 idempotency key", field(nil, commandIdempotencyKey, []byte{0xc3}), false},
		{"invalid UTF-8 compare key", field(nil, commandCompares, field(nil, 1, []byte{0xff})), false},
		{"torn", enc(full)[:len(enc(full))-5], false},
		{"torn op", field(nil, commandOps, op[:len(op)-1]), false},
		{"not a command", []byte{0xff, 0xff, 0xff, 0xff}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var fast storev1.Command
			if ok := decodeCommandFast(tc.data, &fast); ok != tc.fast {
				t.Errorf("own path: %v, want %v", ok, tc.fast)
			}
			var got, want storev1.Command
			gotErr, wantErr := decodeCommand(tc.data, &got), vt.Unmarshal(tc.data, &want)
			if (gotErr == nil) != (wantErr == nil) {
				t.Fatalf("decodeCommand: %v; vt.Unmarshal: %v", gotErr, wantErr)
			}
			if gotErr == nil && !proto.Equal(&got, &want) {
				t.Fatalf("decodeCommand: %v\nvt.Unmarshal: %v", &got, &want)
			}
		})
	}
	data := enc(full)
	var cmd storev1.Command
	if err := decodeCommand(data, &cmd); err != nil {
		t.Fatal(err)
	}
	in := func(v []byte) bool {
		p, lo := uintptr(unsafe.Pointer(unsafe.SliceData(v))), uintptr(unsafe.Pointer(unsafe.SliceData(data)))
		return len(v) > 0 && p >= lo && p < lo+uintptr(len(data))
	}
	if !in(cmd.Ops[0].Value) || cap(cmd.Ops[0].Value) != len(cmd.Ops[0].Value) {
		t.Error("the pod's value was copied (or may be appended to in place)")
	}
	if in(cmd.Ops[1].Value) {
		t.Error("a small value keeps the entry alive")
	}
}

// BenchmarkDecodeCommand: a follower's decode of a status write (a 3 KB
// pod, its pin) as raft hands it over.
func BenchmarkDecodeCommand(b *testing.B) {
	data, err := (&storev1.Command{IdempotencyKey: "status-default-web-7d9f8c6b5-x2x9q-3", Kind: storev1.WriteKind_WRITE_KIND_UPDATE,
		Compares: []*storev1.Compare{{Key: "/registry/pods/default/web-7d9f8c6b5-x2x9q", ModRevision: 1234567}},
		Ops:      []*storev1.Op{{Type: storev1.OpType_OP_TYPE_PUT, Key: "/registry/pods/default/web-7d9f8c6b5-x2x9q", Value: bytes.Repeat([]byte("p"), 3000)}},
	}).MarshalVT()
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name   string
		decode func([]byte, *storev1.Command) error
	}{
		{"vt.Unmarshal", func(d []byte, c *storev1.Command) error { return vt.Unmarshal(d, c) }},
		{"decodeCommand", decodeCommand},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				cmd := &storev1.Command{}
				if err := bc.decode(data, cmd); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestDecodeCommandReuses: decoding entry after entry into one command
// (the state machine's scratch) gives each entry's command, as
// vt.Unmarshal of it into a new one, and decodes into the ops and
// compares the command holds rather than new ones.
func TestDecodeCommandReuses(t *testing.T) {
	big := &storev1.Command{IdempotencyKey: "a", Kind: storev1.WriteKind_WRITE_KIND_TXN,
		Compares: []*storev1.Compare{{Key: "/c1", ModRevision: 3}, {Key: "/c2", ModRevision: -1}},
		Ops: []*storev1.Op{{Type: storev1.OpType_OP_TYPE_PUT, Key: "/p", Value: bytes.Repeat([]byte("v"), 100)},
			{Type: storev1.OpType_OP_TYPE_DELETE, Key: "/d"}}}
	small := &storev1.Command{IdempotencyKey: "b", Kind: storev1.WriteKind_WRITE_KIND_UPDATE,
		Compares: []*storev1.Compare{{Key: "/p", ModRevision: 9}},
		Ops:      []*storev1.Op{{Type: storev1.OpType_OP_TYPE_PUT, Key: "/p", Value: []byte("w")}}}
	var cmd storev1.Command
	var firstOp *storev1.Op
	for i, m := range []*storev1.Command{big, small, {IdempotencyKey: "c"}, big, small} {
		data, err := m.MarshalVT()
		if err != nil {
			t.Fatal(err)
		}
		if err := decodeCommand(data, &cmd); err != nil {
			t.Fatal(err)
		}
		var want storev1.Command
		if err := vt.Unmarshal(data, &want); err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(&cmd, &want) {
			t.Fatalf("entry %d decoded into a used command: %v\nwant %v", i, &cmd, &want)
		}
		if i == 0 {
			firstOp = cmd.Ops[0]
		} else if len(cmd.Ops) > 0 && cmd.Ops[0] != firstOp {
			t.Errorf("entry %d: a new op, not the command's", i)
		}
	}
}
