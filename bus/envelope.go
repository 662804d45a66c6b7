package bus

import (
	"crypto/rand"
	"encoding/hex"
	"strings"
	"sync"

	eventsv1 "github.com/podflow/podflow/proto/eventsv1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// NewEnvelope returns an envelope carrying payload, which must be one of
// the Envelope's payload messages (e.g. &eventsv1.PodScheduled{}).
func NewEnvelope(payload proto.Message) (*eventsv1.Envelope, error) {
	env := &eventsv1.Envelope{}
	if err := SetPayload(env, payload); err != nil {
		return nil, err
	}
	return env, nil
}

// SetPayload stores payload in env's oneof, replacing any previous one.
func SetPayload(env *eventsv1.Envelope, payload proto.Message) error {
	if env == nil || payload == nil {
		return invalidf("nil envelope or payload")
	}
	pm := payload.ProtoReflect()
	fd, ok := payloadFields()[pm.Descriptor().FullName()]
	if !ok {
		return invalidf("%s is not an Envelope payload", pm.Descriptor().FullName())
	}
	env.ProtoReflect().Set(fd, protoreflect.ValueOfMessage(pm))
	return nil
}

// payloadFields maps each payload message to its field of the
// Envelope's oneof: every Delivery.Next looks its payload up.
var payloadFields = sync.OnceValue(func() map[protoreflect.FullName]protoreflect.FieldDescriptor {
	fields := (&eventsv1.Envelope{}).ProtoReflect().Descriptor().Oneofs().ByName("payload").Fields()
	m := make(map[protoreflect.FullName]protoreflect.FieldDescriptor, fields.Len())
	for i := 0; i < fields.Len(); i++ {
		if fd := fields.Get(i); fd.Message() != nil {
			m[fd.Message().FullName()] = fd
		}
	}
	return m
})

// NewTraceparent returns a W3C traceparent with random trace and span
// ids, sampled: "00-<32 hex>-<16 hex>-01".
func NewTraceparent() string {
	var b [24]byte
	_, _ = rand.Read(b[:])
	var tp [55]byte
	copy(tp[:], "00-")
	hex.Encode(tp[3:35], b[:16])
	tp[35] = '-'
	hex.Encode(tp[36:52], b[16:])
	copy(tp[52:], "-01")
	return string(tp[:])
}

// ChildTraceparent returns a traceparent in the same trace as parent,
// with a new span id. An invalid or empty parent starts a new trace.
func ChildTraceparent(parent string) string {
	if !ValidTraceparent(parent) {
		return NewTraceparent()
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	var tp [55]byte
	copy(tp[:], parent)
	hex.Encode(tp[36:52], b[:])
	return string(tp[:])
}

// ValidTraceparent reports whether s is a version-00 W3C traceparent
// with non-zero ids.
func ValidTraceparent(s string) bool {
	// 00-<32>-<16>-<2>
	if len(s) != 55 || s[:3] != "00-" || s[35] != '-' || s[52] != '-' {
		return false
	}
	for _, f := range []string{s[3:35], s[36:52], s[53:55]} {
		if !lowerHex(f) {
			return false
		}
	}
	return strings.Trim(s[3:35], "0") != "" && strings.Trim(s[36:52], "0") != ""
}

func lowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}
