// Package vttest fills protobuf messages at random for property tests
// (encodings, conversions and wire-level cuts checked against a
// reference on many random messages).
package vttest

import (
	"fmt"
	"math/rand/v2"

	"google.golang.org/protobuf/reflect/protoreflect"
)

// Filler sets a message's fields at random. Each test keeps its own
// value domain (Scalar) and odds (Keep, Entries); the walk is shared.
type Filler struct {
	// Scalar returns a random value of fd's scalar kind (also map keys).
	Scalar func(r *rand.Rand, fd protoreflect.FieldDescriptor) protoreflect.Value
	// Keep reports whether fd of m is set; nil sets every field.
	Keep func(r *rand.Rand, m protoreflect.Message, fd protoreflect.FieldDescriptor) bool
	// Entries is how many elements a list or map field gets.
	Entries func(r *rand.Rand) int
	// Message, when set, may fill m itself (a well-known type whose
	// fields have rules of their own) and then returns true.
	Message func(r *rand.Rand, m protoreflect.Message) bool
}

// Fill sets m's fields: message fields to depth levels below m (at depth
// 0 they are left unset), lists and maps to Entries elements.
func (f *Filler) Fill(r *rand.Rand, m protoreflect.Message, depth int) {
	if f.Message != nil && f.Message(r, m) {
		return
	}
	fields := m.Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		if f.Keep != nil && !f.Keep(r, m, fd) {
			continue
		}
		if fd.Message() != nil && depth == 0 {
			continue
		}
		switch {
		case fd.IsList():
			l := m.Mutable(fd).List()
			for range f.Entries(r) {
				if fd.Message() != nil {
					e := l.NewElement()
					f.Fill(r, e.Message(), depth-1)
					l.Append(e)
				} else {
					l.Append(f.Scalar(r, fd))
				}
			}
		case fd.IsMap():
			mp := m.Mutable(fd).Map()
			for range f.Entries(r) {
				k := f.Scalar(r, fd.MapKey()).MapKey()
				if fd.MapValue().Message() != nil {
					v := mp.NewValue()
					f.Fill(r, v.Message(), depth-1)
					mp.Set(k, v)
				} else {
					mp.Set(k, f.Scalar(r, fd.MapValue()))
				}
			}
		case fd.Message() != nil:
			f.Fill(r, m.Mutable(fd).Message(), depth-1)
		default:
			m.Set(fd, f.Scalar(r, fd))
		}
	}
}

// Sparse returns a Filler that sets a field with probability 3/4 (one
// member of a oneof at most), gives lists and maps 0-2 entries, and takes
// strings from words: for tests of code that keeps part of a message and
// looks for some words (a condition type, an annotation key) among
// others.
func Sparse(words ...string) *Filler {
	return &Filler{
		Scalar: func(r *rand.Rand, fd protoreflect.FieldDescriptor) protoreflect.Value {
			switch fd.Kind() {
			case protoreflect.StringKind:
				return protoreflect.ValueOfString(words[r.IntN(len(words))])
			case protoreflect.BytesKind:
				return protoreflect.ValueOfBytes([]byte{byte(r.IntN(256))})
			case protoreflect.BoolKind:
				return protoreflect.ValueOfBool(r.IntN(2) == 1)
			case protoreflect.EnumKind:
				return protoreflect.ValueOfEnum(fd.Enum().Values().Get(r.IntN(fd.Enum().Values().Len())).Number())
			case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
				return protoreflect.ValueOfInt32(r.Int32N(1000) - 500)
			case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
				return protoreflect.ValueOfInt64(r.Int64N(1<<40) - 1<<39)
			case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
				return protoreflect.ValueOfUint32(r.Uint32())
			case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
				return protoreflect.ValueOfUint64(r.Uint64())
			case protoreflect.FloatKind:
				return protoreflect.ValueOfFloat32(r.Float32())
			case protoreflect.DoubleKind:
				return protoreflect.ValueOfFloat64(r.Float64())
			}
			panic(fmt.Sprintf("no random %s", fd.Kind()))
		},
		Keep: func(r *rand.Rand, m protoreflect.Message, fd protoreflect.FieldDescriptor) bool {
			if r.IntN(4) == 0 {
				return false
			}
			o := fd.ContainingOneof()
			return o == nil || o.IsSynthetic() || m.WhichOneof(o) == nil
		},
		Entries: func(r *rand.Rand) int { return r.IntN(3) },
	}
}
