package vt

import (
	"errors"
	"fmt"
	"sync"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// ErrInvalidUTF8: a string field of the message holds invalid UTF-8, which
// proto.Marshal refuses too.
var ErrInvalidUTF8 = errors.New("vt: string field contains invalid UTF-8")

// errLeftToProto: check found what vt's generated unmarshal code might read
// otherwise than proto.Unmarshal, or what proto.Unmarshal refuses;
// Unmarshal leaves the bytes to proto.Unmarshal.
var errLeftToProto = errors.New("vt: left to proto.Unmarshal")

// field is what check needs of one field.
type field struct {
	known bool
	kind  uint8 // fieldOther, fieldString (UTF-8 checked) or fieldMessage
	list  bool  // repeated: a scalar may also come packed
	wire  protowire.Type
	sub   *layout // a message field's (a map entry is one)
	name  protoreflect.FullName
}

const (
	fieldOther uint8 = iota
	fieldString
	fieldMessage
)

// layout is a message type's fields, indexed by number; built once.
type layout struct {
	fields  []field
	isEntry bool // a map entry
}

var (
	layouts  sync.Map // protoreflect.MessageDescriptor -> *layout, complete
	layoutMu sync.Mutex
)

// layoutOf returns md's layout, building it (and those of the messages it
// holds) on first use. Layouts are published only once complete.
func layoutOf(md protoreflect.MessageDescriptor) *layout {
	if l, ok := layouts.Load(md); ok {
		return l.(*layout)
	}
	layoutMu.Lock()
	defer layoutMu.Unlock()
	building := map[protoreflect.MessageDescriptor]*layout{}
	l := buildLayout(md, building)
	for d, bl := range building {
		layouts.Store(d, bl)
	}
	return l
}

func buildLayout(md protoreflect.MessageDescriptor, building map[protoreflect.MessageDescriptor]*layout) *layout {
	if l, ok := layouts.Load(md); ok {
		return l.(*layout)
	}
	if l, ok := building[md]; ok {
		return l // a message that holds itself
	}
	fds := md.Fields()
	top := 0
	for i := range fds.Len() {
		top = max(top, int(fds.Get(i).Number()))
	}
	l := &layout{fields: make([]field, top+1), isEntry: md.IsMapEntry()}
	building[md] = l
	for i := range fds.Len() {
		fd := fds.Get(i)
		f := field{known: true, list: fd.IsList(), wire: wireOf(fd.Kind()), name: fd.FullName()}
		switch {
		case fd.Message() != nil && fd.Kind() == protoreflect.MessageKind:
			f.kind, f.sub = fieldMessage, buildLayout(fd.Message(), building)
		case fd.Kind() == protoreflect.StringKind && fd.ParentFile().Syntax() == protoreflect.Proto3:
			f.kind = fieldString
		}
		l.fields[fd.Number()] = f
	}
	return l
}

func wireOf(k protoreflect.Kind) protowire.Type {
	switch k {
	case protoreflect.BoolKind, protoreflect.EnumKind, protoreflect.Int32Kind, protoreflect.Sint32Kind,
		protoreflect.Uint32Kind, protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Uint64Kind:
		return protowire.VarintType
	case protoreflect.Fixed32Kind, protoreflect.Sfixed32Kind, protoreflect.FloatKind:
		return protowire.Fixed32Type
	case protoreflect.Fixed64Kind, protoreflect.Sfixed64Kind, protoreflect.DoubleKind:
		return protowire.Fixed64Type
	case protoreflect.GroupKind:
		return protowire.StartGroupType
	}
	return protowire.BytesType // string, bytes, message
}

// check walks b as a message of layout l without decoding it. It returns
// ErrInvalidUTF8 for a string field, at any depth, that is not UTF-8 (what
// proto checks and vt's generated code does not), and errLeftToProto for:
// a torn tag, length or value, or a field number out of range (proto
// refuses them too); a known field of another wire type (an unknown field
// to proto, an error to vt); a map entry holding anything but its key and
// value of their wire types (vt reads those unchecked, and past the
// entry). Whatever check passes, vt's generated code and proto.Unmarshal
// read alike (TestDecodersAgree, FuzzDecodersAgree).
func check(b []byte, l *layout, depth int) error {
	if depth > 100 {
		return errLeftToProto
	}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || num > protowire.MaxValidNumber {
			return errLeftToProto
		}
		b = b[n:]
		var f field
		if int(num) < len(l.fields) {
			f = l.fields[num]
		}
		if !f.known || (typ != f.wire && !(f.list && typ == protowire.BytesType)) {
			if l.isEntry || f.known {
				return errLeftToProto
			}
			if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
				return errLeftToProto
			}
			b = b[n:]
			continue
		}
		if typ != protowire.BytesType {
			if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
				return errLeftToProto
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return errLeftToProto
		}
		b = b[n:]
		switch {
		case f.kind == fieldMessage:
			if err := check(v, f.sub, depth+1); err != nil {
				return err
			}
		case f.kind == fieldString:
			if !utf8.Valid(v) {
				return fmt.Errorf("%w: %s", ErrInvalidUTF8, f.name)
			}
		case f.wire != protowire.BytesType && !packed(v, f.wire):
			return errLeftToProto
		}
	}
	return nil
}

// packed reports whether v is a whole number of values of wire type w.
func packed(v []byte, w protowire.Type) bool {
	for len(v) > 0 {
		var n int
		switch w {
		case protowire.VarintType:
			_, n = protowire.ConsumeVarint(v)
		case protowire.Fixed32Type:
			_, n = protowire.ConsumeFixed32(v)
		case protowire.Fixed64Type:
			_, n = protowire.ConsumeFixed64(v)
		default:
			return false
		}
		if n < 0 {
			return false
		}
		v = v[n:]
	}
	return true
}
