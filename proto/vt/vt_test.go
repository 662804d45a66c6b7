package vt_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	_ "github.com/podflow/podflow/proto/apiv1"
	_ "github.com/podflow/podflow/proto/corev1"
	_ "github.com/podflow/podflow/proto/eventsv1"
	_ "github.com/podflow/podflow/proto/storev1"
	"github.com/podflow/podflow/proto/vt"
	"github.com/podflow/podflow/proto/vt/vttest"
)

// podflowTypes returns every message type of podflow's proto packages.
func podflowTypes(t *testing.T) []protoreflect.MessageType {
	var out []protoreflect.MessageType
	protoregistry.GlobalTypes.RangeMessages(func(mt protoreflect.MessageType) bool {
		if strings.HasPrefix(string(mt.Descriptor().FullName()), "podflow.") {
			out = append(out, mt)
		}
		return true
	})
	if len(out) < 100 {
		t.Fatalf("found %d podflow message types, want them all registered", len(out))
	}
	return out
}

// filler sets every field (a oneof's one member, picked at random; a
// scalar left at its zero value one time in five) to random values, lists
// and maps to 0-3 entries.
var filler = vttest.Filler{
	Scalar: scalar,
	Keep: func(r *rand.Rand, _ protoreflect.Message, fd protoreflect.FieldDescriptor) bool {
		if o := fd.ContainingOneof(); o != nil && !o.IsSynthetic() && o.Fields().Get(r.IntN(o.Fields().Len())) != fd {
			return false
		}
		return fd.Message() != nil || fd.IsList() || fd.IsMap() || r.IntN(5) > 0
	},
	Entries: func(r *rand.Rand) int { return r.IntN(4) },
}

// fill sets m's fields with filler, messages to depth.
func fill(r *rand.Rand, m protoreflect.Message, depth int) { filler.Fill(r, m, depth) }

func scalar(r *rand.Rand, fd protoreflect.FieldDescriptor) protoreflect.Value {
	switch fd.Kind() {
	case protoreflect.BoolKind:
		return protoreflect.ValueOfBool(r.IntN(2) == 1)
	case protoreflect.EnumKind:
		vals := fd.Enum().Values()
		return protoreflect.ValueOfEnum(vals.Get(r.IntN(vals.Len())).Number())
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return protoreflect.ValueOfInt32(int32(r.Uint32()))
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return protoreflect.ValueOfInt64(int64(r.Uint64()))
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return protoreflect.ValueOfUint32(r.Uint32())
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return protoreflect.ValueOfUint64(r.Uint64())
	case protoreflect.FloatKind:
		return protoreflect.ValueOfFloat32(r.Float32())
	case protoreflect.DoubleKind:
		return protoreflect.ValueOfFloat64(r.NormFloat64())
	case protoreflect.StringKind:
		return protoreflect.ValueOfString([]string{"", "a", "web-0", "ünïcode ☃", strings.Repeat("x", 200)}[r.IntN(5)])
	case protoreflect.BytesKind:
		b := make([]byte, r.IntN(40))
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		return protoreflect.ValueOfBytes(b)
	}
	panic(fd.Kind().String())
}

// TestAgreesWithProto: for every podflow message type, filled at random
// 20 times, what vt.Marshal writes proto.Unmarshal reads back equal, of
// the size proto.Size gives, and what proto.Marshal writes vt.Unmarshal
// reads back equal — into a message already holding other content, which
// it replaces. Unknown fields (a newer writer's) survive vt's round trip.
func TestAgreesWithProto(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	types := podflowTypes(t)
	withVT := 0
	for _, mt := range types {
		if _, ok := mt.New().Interface().(vt.Message); ok {
			withVT++
		}
		for range 20 {
			m := mt.New()
			fill(r, m, 3)
			want := m.Interface()
			b, err := vt.Marshal(want)
			if err != nil {
				t.Fatalf("%s: vt.Marshal: %v", mt.Descriptor().FullName(), err)
			}
			got := mt.New().Interface()
			if err := proto.Unmarshal(b, got); err != nil {
				t.Fatalf("%s: proto.Unmarshal of vt.Marshal: %v", mt.Descriptor().FullName(), err)
			}
			if !proto.Equal(got, want) {
				t.Fatalf("%s: vt.Marshal then proto.Unmarshal:\n got %v\nwant %v", mt.Descriptor().FullName(), got, want)
			}
			if sz := proto.Size(want); sz != len(b) {
				t.Fatalf("%s: vt wrote %d bytes, proto.Size says %d", mt.Descriptor().FullName(), len(b), sz)
			}
			pb, err := proto.Marshal(want)
			if err != nil {
				t.Fatal(err)
			}
			old := mt.New()
			fill(r, old, 2)
			got = old.Interface()
			if err := vt.Unmarshal(pb, got); err != nil {
				t.Fatalf("%s: vt.Unmarshal of proto.Marshal: %v", mt.Descriptor().FullName(), err)
			}
			if !proto.Equal(got, want) {
				t.Fatalf("%s: proto.Marshal then vt.Unmarshal into a filled message:\n got %v\nwant %v", mt.Descriptor().FullName(), got, want)
			}
		}
	}
	if withVT != len(types) {
		t.Errorf("%d of %d message types have vtproto methods: run make proto", withVT, len(types))
	}

	unknown := []byte{0xf8, 0xff, 0xff, 0x0f, 0x2a} // field 4194303 (varint) = 42: no podflow message has it
	for _, mt := range types[:10] {
		m := mt.New()
		fill(r, m, 2)
		b, _ := proto.Marshal(m.Interface())
		got := mt.New().Interface()
		if err := vt.Unmarshal(append(b, unknown...), got); err != nil {
			t.Fatal(err)
		}
		back, err := vt.Marshal(got)
		if err != nil {
			t.Fatal(err)
		}
		again := mt.New().Interface()
		if err := proto.Unmarshal(back, again); err != nil {
			t.Fatal(err)
		}
		if u := again.ProtoReflect().GetUnknown(); string(u) != string(unknown) {
			t.Errorf("%s: unknown fields after vt's round trip %x, want %x", mt.Descriptor().FullName(), u, unknown)
		}
	}
}

// TestMarshalRefusesInvalidUTF8: a string with invalid UTF-8 anywhere — a
// field, a nested message's, a list's element, a map's key or value — is
// refused by vt.Marshal as by proto.Marshal (vt's generated code alone
// writes it).
func TestMarshalRefusesInvalidUTF8(t *testing.T) {
	const bad = "web\xff"
	pod := func(set func(m protoreflect.Message)) proto.Message {
		mt, err := protoregistry.GlobalTypes.FindMessageByName("podflow.core.v1.Pod")
		if err != nil {
			t.Fatal(err)
		}
		m := mt.New()
		fill(rand.New(rand.NewPCG(9, 10)), m, 3)
		set(m)
		return m.Interface()
	}
	field := func(m protoreflect.Message, name string) (protoreflect.Message, protoreflect.FieldDescriptor) {
		fd := m.Descriptor().Fields().ByName(protoreflect.Name(name))
		if fd == nil {
			t.Fatalf("%s has no field %s", m.Descriptor().FullName(), name)
		}
		return m, fd
	}
	for name, set := range map[string]func(protoreflect.Message){
		"metadata.name": func(p protoreflect.Message) {
			m, fd := field(p.Mutable(p.Descriptor().Fields().ByName("metadata")).Message(), "name")
			m.Set(fd, protoreflect.ValueOfString(bad))
		},
		"metadata.labels value": func(p protoreflect.Message) {
			m, fd := field(p.Mutable(p.Descriptor().Fields().ByName("metadata")).Message(), "labels")
			m.Mutable(fd).Map().Set(protoreflect.ValueOfString("app").MapKey(), protoreflect.ValueOfString(bad))
		},
		"metadata.annotations key": func(p protoreflect.Message) {
			m, fd := field(p.Mutable(p.Descriptor().Fields().ByName("metadata")).Message(), "annotations")
			m.Mutable(fd).Map().Set(protoreflect.ValueOfString(bad).MapKey(), protoreflect.ValueOfString("v"))
		},
		"spec.containers[].args[]": func(p protoreflect.Message) {
			spec := p.Mutable(p.Descriptor().Fields().ByName("spec")).Message()
			l := spec.Mutable(spec.Descriptor().Fields().ByName("containers")).List()
			c := l.AppendMutable().Message()
			c.Mutable(c.Descriptor().Fields().ByName("args")).List().Append(protoreflect.ValueOfString(bad))
		},
	} {
		m := pod(set)
		if _, err := proto.Marshal(m); err == nil {
			t.Fatalf("%s: proto.Marshal took invalid UTF-8: the case does not test it", name)
		}
		if _, err := m.(vt.Message).MarshalVT(); err != nil {
			t.Fatalf("%s: MarshalVT refuses invalid UTF-8 now (%v): the walk may go", name, err)
		}
		if _, err := vt.Marshal(m); !errors.Is(err, vt.ErrInvalidUTF8) {
			t.Errorf("%s: vt.Marshal: %v, want ErrInvalidUTF8", name, err)
		}
	}
}

// benchMessages: a filled pod and a node allocation of 100 pods, as the
// pipeline bench's nodes hold at its end.
func benchMessages() map[string]proto.Message {
	r := rand.New(rand.NewPCG(7, 8))
	out := map[string]proto.Message{}
	pod, _ := protoregistry.GlobalTypes.FindMessageByName("podflow.core.v1.Pod")
	m := pod.New()
	fill(r, m, 4)
	out["Pod"] = m.Interface()
	alloc, _ := protoregistry.GlobalTypes.FindMessageByName("podflow.core.v1.NodeAllocation")
	ap, _ := protoregistry.GlobalTypes.FindMessageByName("podflow.core.v1.AllocatedPod")
	a := alloc.New()
	pods := a.Mutable(alloc.Descriptor().Fields().ByName("pods")).Map()
	for i := range 100 {
		v := ap.New()
		fill(r, v, 1)
		pods.Set(protoreflect.ValueOfString(fmt.Sprintf("%036d", i)).MapKey(), protoreflect.ValueOfMessage(v))
	}
	out["NodeAllocation100"] = a.Interface()
	return out
}

// BenchmarkMarshal: vt.Marshal (the UTF-8 walk included) against the
// deterministic proto.Marshal objects.Encode used before.
func BenchmarkMarshal(b *testing.B) {
	for name, m := range benchMessages() {
		b.Run(name+"/proto-deterministic", func(b *testing.B) {
			for b.Loop() {
				if _, err := (proto.MarshalOptions{Deterministic: true}).Marshal(m); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(name+"/proto", func(b *testing.B) {
			for b.Loop() {
				if _, err := proto.Marshal(m); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(name+"/vt", func(b *testing.B) {
			for b.Loop() {
				if _, err := vt.Marshal(m); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkUnmarshal: vt.Unmarshal (its check included) and vt's generated
// code alone against proto.Unmarshal.
func BenchmarkUnmarshal(b *testing.B) {
	for name, m := range benchMessages() {
		data, _ := proto.Marshal(m)
		b.Run(name+"/proto", func(b *testing.B) {
			for b.Loop() {
				if err := proto.Unmarshal(data, m.ProtoReflect().New().Interface()); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(name+"/vt", func(b *testing.B) {
			for b.Loop() {
				if err := vt.Unmarshal(data, m.ProtoReflect().New().Interface()); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(name+"/vt-generated-alone", func(b *testing.B) {
			for b.Loop() {
				if err := m.ProtoReflect().New().Interface().(interface{ UnmarshalVT([]byte) error }).UnmarshalVT(data); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestUnmarshalChecksUTF8: a string field with invalid UTF-8 is refused,
// as proto.Unmarshal refuses it (vt's generated code alone takes it).
func TestUnmarshalChecksUTF8(t *testing.T) {
	mt, err := protoregistry.GlobalTypes.FindMessageByName("podflow.core.v1.ObjectMeta")
	if err != nil {
		t.Fatal(err)
	}
	bad := []byte{0x0a, 0x02, 0xff, 0xfe} // field 1 (name), 2 bytes, not UTF-8
	if err := proto.Unmarshal(bad, mt.New().Interface()); err == nil {
		t.Fatal("proto.Unmarshal took invalid UTF-8")
	}
	if err := mt.New().Interface().(vt.Message).UnmarshalVT(bad); err != nil {
		t.Fatalf("UnmarshalVT refuses invalid UTF-8 now (%v): the case does not test check", err)
	}
	if err := vt.Unmarshal(bad, mt.New().Interface()); err == nil {
		t.Fatal("vt.Unmarshal took invalid UTF-8")
	}
}

// decodersAgree checks, for bytes b of message type mt, that vt.Unmarshal
// and proto.Unmarshal accept and refuse alike and read alike.
func decodersAgree(t testing.TB, mt protoreflect.MessageType, b []byte) {
	want := mt.New().Interface()
	perr := proto.Unmarshal(b, want)
	got := mt.New().Interface()
	verr := vt.Unmarshal(b, got)
	if (perr == nil) != (verr == nil) {
		t.Fatalf("%s: %x: proto.Unmarshal says %v, vt.Unmarshal %v", mt.Descriptor().FullName(), b, perr, verr)
	}
	if perr != nil {
		return
	}
	// Compare known fields: unknown ones are kept by proto everywhere,
	// by vt not inside well-known types (a Timestamp).
	dropUnknown(want.ProtoReflect())
	dropUnknown(got.ProtoReflect())
	if !proto.Equal(got, want) {
		t.Fatalf("%s: %x decodes differently:\nproto %v\n   vt %v", mt.Descriptor().FullName(), b, want, got)
	}
}

func dropUnknown(m protoreflect.Message) {
	if !m.IsValid() {
		return
	}
	m.SetUnknown(nil)
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsList() && fd.Message() != nil:
			for i := range v.List().Len() {
				dropUnknown(v.List().Get(i).Message())
			}
		case fd.IsMap() && fd.MapValue().Message() != nil:
			v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
				dropUnknown(mv.Message())
				return true
			})
		case !fd.IsList() && !fd.IsMap() && fd.Message() != nil:
			dropUnknown(v.Message())
		}
		return true
	})
}

// TestDecodersAgree: random encodings of every podflow message type, each
// mutated (a bit flipped, cut short, doubled, two bytes spliced in) 30
// times. Without check, vt's code reads a map entry's mistyped value
// otherwise, takes a field number out of range and invalid UTF-8.
func TestDecodersAgree(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, mt := range podflowTypes(t) {
		for range 5 {
			m := mt.New()
			fill(r, m, 3)
			b, _ := proto.Marshal(m.Interface())
			decodersAgree(t, mt, b)
			for range 30 {
				decodersAgree(t, mt, mutate(r, b))
			}
		}
	}
}

func mutate(r *rand.Rand, b []byte) []byte {
	out := append([]byte(nil), b...)
	if len(out) == 0 {
		return []byte{byte(r.Uint32())}
	}
	switch r.IntN(4) {
	case 0:
		out[r.IntN(len(out))] ^= byte(1 << r.IntN(8))
	case 1:
		out = out[:r.IntN(len(out))]
	case 2:
		out = append(out, out...) // every field twice: scalars last-wins, messages merge
	case 3:
		i := r.IntN(len(out))
		out = append(out[:i], append([]byte{byte(r.Uint32()), byte(r.Uint32())}, out[i:]...)...)
	}
	return out
}

// FuzzDecodersAgree (make fuzz) runs decodersAgree on the messages most
// often decoded from what another identity wrote: the store's command,
// which every store replica decodes, the bus envelope, the pod and the
// node allocation.
func FuzzDecodersAgree(f *testing.F) {
	var types []protoreflect.MessageType
	for _, name := range []protoreflect.FullName{"podflow.store.v1.Command", "podflow.events.v1.Envelope", "podflow.core.v1.Pod", "podflow.core.v1.NodeAllocation"} {
		mt, err := protoregistry.GlobalTypes.FindMessageByName(name)
		if err != nil {
			f.Fatal(err)
		}
		types = append(types, mt)
	}
	r := rand.New(rand.NewPCG(5, 6))
	for i, mt := range types {
		for range 4 {
			m := mt.New()
			fill(r, m, 3)
			b, _ := proto.Marshal(m.Interface())
			f.Add(uint8(i), b)
		}
	}
	f.Add(uint8(3), []byte("\xb9\xce\xaf\xd7000000000")) // a field number past MaxValidNumber
	f.Fuzz(func(t *testing.T, which uint8, b []byte) { decodersAgree(t, types[int(which)%len(types)], b) })
}

// change changes one field of m somewhere below it, at random: a scalar
// set anew or cleared, a list or map entry added or removed, or the same
// one level down. It may leave m as it was (a value set to itself).
func change(r *rand.Rand, m protoreflect.Message, depth int) {
	var set []protoreflect.FieldDescriptor
	m.Range(func(fd protoreflect.FieldDescriptor, _ protoreflect.Value) bool {
		set = append(set, fd)
		return true
	})
	fields := m.Descriptor().Fields()
	if fields.Len() == 0 {
		return
	}
	if len(set) == 0 || r.IntN(4) == 0 {
		fd := fields.Get(r.IntN(fields.Len()))
		switch {
		case fd.IsList() || fd.IsMap() || (fd.Message() != nil && depth == 0):
			m.Clear(fd)
		case fd.Message() != nil:
			fill(r, m.Mutable(fd).Message(), depth-1)
		default:
			m.Set(fd, scalar(r, fd))
		}
		return
	}
	fd := set[r.IntN(len(set))]
	switch {
	case fd.IsList():
		l := m.Mutable(fd).List()
		switch {
		case r.IntN(3) == 0:
			l.Truncate(l.Len() - 1)
		case fd.Message() != nil && depth > 0:
			change(r, l.Get(r.IntN(l.Len())).Message(), depth-1)
		case fd.Message() == nil:
			l.Set(r.IntN(l.Len()), scalar(r, fd))
		default:
			l.Truncate(0)
		}
	case fd.IsMap():
		mp := m.Mutable(fd).Map()
		var keys []protoreflect.MapKey
		mp.Range(func(k protoreflect.MapKey, _ protoreflect.Value) bool {
			keys = append(keys, k)
			return true
		})
		k := keys[r.IntN(len(keys))]
		switch {
		case r.IntN(3) == 0:
			mp.Clear(k)
		case fd.MapValue().Message() != nil && depth > 0:
			change(r, mp.Mutable(k).Message(), depth-1)
		case fd.MapValue().Message() == nil:
			mp.Set(k, scalar(r, fd.MapValue()))
		default:
			mp.Clear(k)
		}
	case fd.Message() != nil && depth > 0 && r.IntN(3) > 0:
		change(r, m.Mutable(fd).Message(), depth-1)
	default:
		m.Clear(fd)
	}
}

// TestEqualAgrees: for every podflow message type, filled at random and
// compared with a copy of itself changed once somewhere below (or not at
// all), vt.Equal says what proto.Equal says; and of nil, empty and filled
// messages alike. Messages with the same unknown fields are equal.
func TestEqualAgrees(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	unequal, n := 0, 0
	for _, mt := range podflowTypes(t) {
		name := mt.Descriptor().FullName()
		empty, nilm := mt.New().Interface(), mt.Zero().Interface()
		for _, c := range [][2]proto.Message{{empty, nilm}, {nilm, empty}, {nilm, nilm}, {empty, mt.New().Interface()}} {
			if got, want := vt.Equal(c[0], c[1]), proto.Equal(c[0], c[1]); got != want {
				t.Fatalf("%s: vt.Equal(%v, %v) = %v, proto.Equal %v", name, c[0], c[1], got, want)
			}
		}
		for range 30 {
			m := mt.New()
			fill(r, m, 3)
			a := m.Interface()
			b := proto.Clone(a)
			if r.IntN(5) > 0 {
				change(r, b.ProtoReflect(), 3)
			}
			got, want := vt.Equal(a, b), proto.Equal(a, b)
			if got != want {
				t.Fatalf("%s: vt.Equal = %v, proto.Equal = %v\n a %v\n b %v", name, got, want, a, b)
			}
			if got2 := vt.Equal(b, a); got2 != got {
				t.Fatalf("%s: vt.Equal not symmetric", name)
			}
			n++
			if !want {
				unequal++
			}
		}
		if vt.Equal(empty, mt.New().Interface()) != true {
			t.Fatalf("%s: two empty messages unequal", name)
		}
	}
	if unequal < n/2 {
		t.Errorf("only %d of %d pairs unequal: the mutations do not test much", unequal, n)
	}

	unknown := []byte{0xf8, 0xff, 0xff, 0x0f, 0x2a}
	for _, mt := range podflowTypes(t)[:10] {
		m := mt.New()
		fill(r, m, 2)
		b, _ := proto.Marshal(m.Interface())
		x, y := mt.New().Interface(), mt.New().Interface()
		if err := vt.Unmarshal(append(b, unknown...), x); err != nil {
			t.Fatal(err)
		}
		if err := vt.Unmarshal(append(b, unknown...), y); err != nil {
			t.Fatal(err)
		}
		if !vt.Equal(x, y) || vt.Equal(x, m.Interface()) != proto.Equal(x, m.Interface()) {
			t.Fatalf("%s: unknown fields compared otherwise than proto.Equal", mt.Descriptor().FullName())
		}
	}
}

// TestCloneAgrees: vt.Clone of every podflow message type, filled at
// random, is proto.Equal to the original and shares nothing with it — a
// change to the copy leaves the original's encoding as it was; the clone
// of a nil message is nil, and unknown fields are copied.
func TestCloneAgrees(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, mt := range podflowTypes(t) {
		name := mt.Descriptor().FullName()
		if c := vt.Clone(mt.Zero().Interface()); c.ProtoReflect().IsValid() {
			t.Fatalf("%s: the clone of nil is valid", name)
		}
		for range 20 {
			m := mt.New()
			fill(r, m, 3)
			a := m.Interface()
			before, _ := proto.MarshalOptions{Deterministic: true}.Marshal(a)
			c := vt.Clone(a)
			if !proto.Equal(a, c) {
				t.Fatalf("%s: clone differs:\n got %v\nwant %v", name, c, a)
			}
			for range 5 {
				change(r, c.ProtoReflect(), 3)
			}
			after, _ := proto.MarshalOptions{Deterministic: true}.Marshal(a)
			if string(before) != string(after) {
				t.Fatalf("%s: changing the clone changed the original", name)
			}
		}
	}
	m := podflowTypes(t)[0].New()
	m.SetUnknown([]byte{0xf8, 0xff, 0xff, 0x0f, 0x2a})
	if c := vt.Clone(m.Interface()); string(c.ProtoReflect().GetUnknown()) != string(m.GetUnknown()) {
		t.Fatalf("unknown fields not cloned")
	}
}
