package bus

import (
	"crypto/rand"
	"encoding/hex"
	"strings"

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
	m := env.ProtoReflect()
	pm := payload.ProtoReflect()
	od := m.Descriptor().Oneofs().ByName("payload")
	fields := od.Fields()
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		if fd.Message() != nil && fd.Message().FullName() == pm.Descriptor().FullName() {
			m.Set(fd, protoreflect.ValueOfMessage(pm))
			return nil
		}
	}
	return invalidf("%s is not an Envelope payload", pm.Descriptor().FullName())
}

// NewTraceparent returns a W3C traceparent with random trace and span
// ids, sampled: "00-<32 hex>-<16 hex>-01".
func NewTraceparent() string {
	var b [24]byte
	_, _ = rand.Read(b[:])
	return "00-" + hex.EncodeToString(b[:16]) + "-" + hex.EncodeToString(b[16:]) + "-01"
}

// ChildTraceparent returns a traceparent in the same trace as parent,
// with a new span id. An invalid or empty parent starts a new trace.
func ChildTraceparent(parent string) string {
	if !ValidTraceparent(parent) {
		return NewTraceparent()
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	return parent[:36] + hex.EncodeToString(b[:]) + parent[52:]
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
