package vt_test

import (
	"errors"
	"slices"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/vt"
)

// TestEachBytesField: every length-delimited field of an encoded pod, in
// order, the others stepped over; f's error stops the walk; a torn
// encoding is refused.
func TestEachBytesField(t *testing.T) {
	var b []byte
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendString(b, "one")
	b = protowire.AppendTag(b, 2, protowire.VarintType)
	b = protowire.AppendVarint(b, 300)
	b = protowire.AppendTag(b, 3, protowire.Fixed64Type)
	b = protowire.AppendFixed64(b, 7)
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendString(b, "again")
	b = protowire.AppendTag(b, 4, protowire.Fixed32Type)
	b = protowire.AppendFixed32(b, 9)
	b = protowire.AppendTag(b, 5, protowire.BytesType)
	b = protowire.AppendBytes(b, nil)
	type field struct {
		num protowire.Number
		v   string
	}
	var got []field
	if err := vt.EachBytesField(b, func(num protowire.Number, v []byte) error {
		got = append(got, field{num, string(v)})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if want := []field{{1, "one"}, {1, "again"}, {5, ""}}; !slices.Equal(got, want) {
		t.Errorf("fields %v, want %v", got, want)
	}

	stop := errors.New("stop")
	n := 0
	if err := vt.EachBytesField(b, func(protowire.Number, []byte) error { n++; return stop }); !errors.Is(err, stop) || n != 1 {
		t.Errorf("f's error: %v after %d calls, want stop after 1", err, n)
	}

	pod, err := vt.Marshal(&corev1.Pod{Metadata: &corev1.ObjectMeta{Name: "p", Namespace: "ns"}, Spec: &corev1.PodSpec{NodeName: "n"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, torn := range [][]byte{pod[:len(pod)-1], b[:len(b)-1], {0x08}, {0xff}} {
		if err := vt.EachBytesField(torn, func(protowire.Number, []byte) error { return nil }); err == nil {
			t.Errorf("EachBytesField(%x): no error", torn)
		}
	}
}
