// Package vttest fills protobuf messages at random for property tests
// (encodings, conversions and wire-level cuts checked against a
// reference on many random messages).
package vttest

import (
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
