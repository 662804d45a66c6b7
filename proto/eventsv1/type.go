package eventsv1

import (
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Type names an event type: the Go name of the Envelope's payload message,
// e.g. "PodRequested". It is what subjects and Nats-Msg-Ids carry.
type Type string

// Type returns the event type of e's payload, or "" when e has none.
func (e *Envelope) Type() Type {
	if e == nil {
		return ""
	}
	m := e.ProtoReflect()
	od := m.Descriptor().Oneofs().ByName("payload")
	fd := m.WhichOneof(od)
	if fd == nil {
		return ""
	}
	return Type(fd.Message().Name())
}

// Types lists every event type an Envelope can carry, in field order.
func Types() []Type {
	od := (&Envelope{}).ProtoReflect().Descriptor().Oneofs().ByName("payload")
	fields := od.Fields()
	out := make([]Type, 0, fields.Len())
	for i := 0; i < fields.Len(); i++ {
		out = append(out, Type(fields.Get(i).Message().Name()))
	}
	return out
}

// PayloadMessage returns the payload message of e, or nil.
func (e *Envelope) PayloadMessage() protoreflect.ProtoMessage {
	m := e.ProtoReflect()
	fd := m.WhichOneof(m.Descriptor().Oneofs().ByName("payload"))
	if fd == nil {
		return nil
	}
	return m.Get(fd).Message().Interface()
}
