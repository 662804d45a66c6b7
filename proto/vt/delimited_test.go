package vt_test

import (
	"bufio"
	"bytes"
	"errors"
	"math/rand/v2"
	"testing"

	"google.golang.org/protobuf/encoding/protodelim"
	"google.golang.org/protobuf/proto"

	"github.com/podflow/podflow/proto/storev1"
	"github.com/podflow/podflow/proto/vt"
)

// TestAppendDelimitedAgrees: a stream of every podflow message type,
// filled at random, written with AppendDelimited one after another into
// one buffer, is the stream protodelim.MarshalTo writes in size and reads
// back with protodelim.UnmarshalFrom message for message.
func TestAppendDelimitedAgrees(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	types := podflowTypes(t)
	var buf []byte
	var want []proto.Message
	var ref bytes.Buffer
	for _, mt := range types {
		for range 5 {
			m := mt.New()
			fill(r, m, 3)
			var err error
			if buf, err = vt.AppendDelimited(buf, m.Interface()); err != nil {
				t.Fatalf("%s: AppendDelimited: %v", mt.Descriptor().FullName(), err)
			}
			if _, err := protodelim.MarshalTo(&ref, m.Interface()); err != nil {
				t.Fatal(err)
			}
			want = append(want, m.Interface())
		}
	}
	if len(buf) != ref.Len() {
		t.Fatalf("AppendDelimited wrote %d bytes, protodelim %d", len(buf), ref.Len())
	}
	rd := bufio.NewReader(bytes.NewReader(buf))
	for i, w := range want {
		got := w.ProtoReflect().Type().New().Interface()
		if err := protodelim.UnmarshalFrom(rd, got); err != nil {
			t.Fatalf("message %d (%s): %v", i, w.ProtoReflect().Descriptor().FullName(), err)
		}
		if !proto.Equal(got, w) {
			t.Fatalf("message %d (%s):\n got %v\nwant %v", i, w.ProtoReflect().Descriptor().FullName(), got, w)
		}
	}
	if _, err := rd.ReadByte(); err == nil {
		t.Error("bytes left after the last message")
	}
}

// TestAppendDelimitedRefusesInvalidUTF8: a key that is not UTF-8 is
// refused, as proto.Marshal refuses it, and the buffer is handed back as
// it was.
func TestAppendDelimitedRefusesInvalidUTF8(t *testing.T) {
	before := []byte("kept")
	out, err := vt.AppendDelimited(before, &storev1.KeyValue{Key: "/registry/pods/x\xff", Value: []byte("v")})
	if !errors.Is(err, vt.ErrInvalidUTF8) {
		t.Fatalf("err = %v, want ErrInvalidUTF8", err)
	}
	if string(out) != "kept" {
		t.Errorf("buffer after a refusal = %q, want %q", out, "kept")
	}
}

// TestAppendDelimitedReusesTheBuffer: appending into a buffer with room
// allocates nothing (a snapshot writes hundreds of thousands of records
// through one buffer).
func TestAppendDelimitedReusesTheBuffer(t *testing.T) {
	kv := &storev1.KeyValue{Key: "/registry/pods/default/web", Value: bytes.Repeat([]byte{7}, 900), CreateRevision: 3, ModRevision: 9}
	buf := make([]byte, 0, 4096)
	allocs := testing.AllocsPerRun(100, func() {
		var err error
		if buf, err = vt.AppendDelimited(buf[:0], kv); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("AppendDelimited into a buffer with room: %v allocations, want 0", allocs)
	}
}
