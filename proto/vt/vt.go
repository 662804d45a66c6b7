// Package vt encodes and decodes podflow's protobuf messages with the code
// protoc-gen-go-vtproto generates beside protoc-gen-go's (the
// *_vtproto.pb.go files): straight-line size, marshal and unmarshal
// methods, without the reflection of package proto (BenchmarkMarshal,
// BenchmarkUnmarshal). A message without them (another package's) goes
// through package proto.
//
// Marshal and Unmarshal take and refuse what proto.Marshal and
// proto.Unmarshal do and read alike, whoever wrote the bytes. vt's
// generated code alone does not: it neither writes nor reads UTF-8
// checked, and it reads a malformed map entry otherwise than proto. Two
// readers of one stored object, or two store replicas of one log entry,
// must never disagree on it. So each encoding, and each input before it
// is decoded, is walked once without decoding (check): a string that is
// not UTF-8 is refused, and what vt's code might misread is left to
// proto.Unmarshal. TestDecodersAgree and FuzzDecodersAgree hold Unmarshal
// to proto.Unmarshal on random and mutated input.
//
// Equal and Clone are proto.Equal and proto.Clone through the generated
// EqualVT and CloneVT, without reflection. Equal compares unknown fields
// as bytes where proto.Equal groups them by field number first, so it may
// call unequal two messages holding the same unknown fields in another
// order — never equal two that proto.Equal does not (TestEqualAgrees).
//
// Marshal writes map entries in map order, not sorted: two encodings of
// one message may differ in bytes, never in meaning. Where bytes must be
// stable (a hash of a message) use proto.MarshalOptions{Deterministic: true}.
package vt

import (
	"errors"
	"slices"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// Message is what protoc-gen-go-vtproto adds to a message.
type Message interface {
	proto.Message
	MarshalVT() ([]byte, error)
	SizeVT() int
	UnmarshalVT([]byte) error
}

// Marshal encodes m; a string field holding invalid UTF-8 is refused
// (ErrInvalidUTF8), as proto.Marshal refuses it.
func Marshal(m proto.Message) ([]byte, error) {
	v, ok := m.(Message)
	if !ok {
		return proto.Marshal(m)
	}
	b, err := v.MarshalVT()
	if err != nil {
		return nil, err
	}
	if err := check(b, layoutOf(m.ProtoReflect().Descriptor()), 0); err != nil {
		if errors.Is(err, ErrInvalidUTF8) {
			return nil, err
		}
		return proto.Marshal(m) // not seen: vt's own output is well formed
	}
	return b, nil
}

// sizedMessage is what the marshal and size features add to a message
// beside MarshalVT: encoding into a buffer the caller owns.
type sizedMessage interface {
	SizeVT() int
	MarshalToSizedBufferVT([]byte) (int, error)
}

// AppendDelimited appends m to b as protodelim.MarshalTo writes it (its
// size as a varint, then its encoding) and returns the extended buffer,
// without allocating when b has room: for streams of many messages (a
// store snapshot). It refuses what Marshal refuses.
func AppendDelimited(b []byte, m proto.Message) ([]byte, error) {
	v, ok := m.(sizedMessage)
	if !ok {
		return appendDelimitedProto(b, m)
	}
	orig, n := len(b), v.SizeVT()
	b = protowire.AppendVarint(b, uint64(n))
	start := len(b)
	b = slices.Grow(b, n)[:start+n]
	if _, err := v.MarshalToSizedBufferVT(b[start:]); err != nil {
		return b[:orig], err
	}
	if err := check(b[start:], layoutOf(m.ProtoReflect().Descriptor()), 0); err != nil {
		if errors.Is(err, ErrInvalidUTF8) {
			return b[:orig], err
		}
		return appendDelimitedProto(b[:orig], m) // not seen: vt's own output is well formed
	}
	return b, nil
}

// appendDelimitedProto is AppendDelimited through package proto.
func appendDelimitedProto(b []byte, m proto.Message) ([]byte, error) {
	enc, err := proto.Marshal(m)
	if err != nil {
		return b, err
	}
	return append(protowire.AppendVarint(b, uint64(len(enc))), enc...), nil
}

// Unmarshal decodes b into m, replacing m's content, as proto.Unmarshal
// does: the same bytes are taken and refused, and read alike.
func Unmarshal(b []byte, m proto.Message) error {
	if v, ok := m.(Message); ok && check(b, layoutOf(m.ProtoReflect().Descriptor()), 0) == nil {
		proto.Reset(m)
		if v.UnmarshalVT(b) == nil {
			return nil
		}
	}
	return proto.Unmarshal(b, m)
}

// equalMessage and cloneMessage are what protoc-gen-go-vtproto's equal
// and clone features add to a message.
type equalMessage interface {
	EqualMessageVT(proto.Message) bool
}

type cloneMessage interface {
	CloneMessageVT() proto.Message
}

// Equal reports whether a and b are equal, as proto.Equal (see the package
// comment for unknown fields).
func Equal(a, b proto.Message) bool {
	if a == nil || b == nil {
		return proto.Equal(a, b)
	}
	e, ok := a.(equalMessage)
	if !ok || a.ProtoReflect().Type() != b.ProtoReflect().Type() {
		return proto.Equal(a, b)
	}
	return e.EqualMessageVT(b) // a typed nil is equal only to another, as in proto.Equal
}

// Clone returns a deep copy of m, as proto.CloneOf.
func Clone[M proto.Message](m M) M {
	if c, ok := any(m).(cloneMessage); ok && m.ProtoReflect().IsValid() {
		return c.CloneMessageVT().(M)
	}
	return proto.CloneOf(m)
}
