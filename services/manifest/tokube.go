package manifest

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/structpb"
)

// The well-known types written directly; any other goes through protojson.
const (
	timestampName protoreflect.FullName = "google.protobuf.Timestamp"
	structName    protoreflect.FullName = "google.protobuf.Struct"
)

// messageToKube is m as an unstructured Kubernetes object: what toKube
// makes of m's protojson encoding, decoded with UseNumber and its numbers
// made int64 or float64 (nativeNumbers), built by walking m instead of
// writing and parsing its JSON. Bytes are base64, enums their names, a
// Timestamp RFC 3339 as protojson writes it; the fields are those
// protojson writes (the populated ones), under their Kubernetes names.
func messageToKube(m protoreflect.Message, t reflect.Type) (map[string]any, error) {
	s := shapeOf(m.Descriptor(), t)
	out := make(map[string]any, 8)
	var err error
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		var kv any
		kv, err = fieldToKube(fd, v, s.kubeType[fd.Number()])
		if err != nil {
			return false
		}
		out[s.kubeName[fd.Number()]] = kv
		return true
	})
	return out, err
}

func fieldToKube(fd protoreflect.FieldDescriptor, v protoreflect.Value, t reflect.Type) (any, error) {
	switch {
	case fd.IsMap():
		m := v.Map()
		out := make(map[string]any, m.Len())
		var err error
		m.Range(func(k protoreflect.MapKey, e protoreflect.Value) bool {
			var kv any
			kv, err = singularToKube(fd.MapValue(), e, t)
			out[k.String()] = kv
			return err == nil
		})
		return out, err
	case fd.IsList():
		l := v.List()
		out := make([]any, l.Len())
		for i := range out {
			e, err := singularToKube(fd, l.Get(i), t)
			if err != nil {
				return nil, err
			}
			out[i] = e
		}
		return out, nil
	}
	return singularToKube(fd, v, t)
}

func singularToKube(fd protoreflect.FieldDescriptor, v protoreflect.Value, t reflect.Type) (any, error) {
	switch fd.Kind() {
	case protoreflect.BoolKind:
		return v.Bool(), nil
	case protoreflect.StringKind:
		if s := v.String(); utf8.ValidString(s) {
			return s, nil
		}
		return nil, fmt.Errorf("field %s contains invalid UTF-8", fd.FullName())
	case protoreflect.BytesKind:
		return base64.StdEncoding.EncodeToString(v.Bytes()), nil
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind,
		protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return v.Int(), nil
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind,
		protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return nativeNumber(json.Number(strconv.FormatUint(v.Uint(), 10))), nil
	case protoreflect.FloatKind:
		return nativeFloat(v.Float(), 32), nil
	case protoreflect.DoubleKind:
		return nativeFloat(v.Float(), 64), nil
	case protoreflect.EnumKind:
		if ev := fd.Enum().Values().ByNumber(v.Enum()); ev != nil {
			return string(ev.Name()), nil
		}
		return int64(v.Enum()), nil
	}
	m := v.Message()
	switch md := m.Descriptor(); {
	case md.FullName() == intOrStringName:
		return intOrStringToKube(m), nil
	case md.FullName() == timestampName:
		ts, err := timestampJSON(m)
		if err != nil {
			return nil, err
		}
		return microTime(ts, t), nil
	case md.FullName() == structName:
		if st, ok := m.Interface().(*structpb.Struct); ok {
			return structToKube(st)
		}
		fallthrough // a dynamic message: as protojson writes it
	case md.FullName().Parent() == "google.protobuf":
		j, err := protojson.Marshal(m.Interface())
		if err != nil {
			return nil, err
		}
		tree, err := jsonTree(j)
		return nativeNumbers(tree), err
	}
	return messageToKube(m, t)
}

// structToKube is a google.protobuf.Struct as JSON (managedFields'
// fieldsV1), numbers as protojson writes them.
func structToKube(s *structpb.Struct) (map[string]any, error) {
	out := make(map[string]any, len(s.GetFields()))
	for k, v := range s.GetFields() {
		kv, err := structValueToKube(v)
		if err != nil {
			return nil, err
		}
		out[k] = kv
	}
	return out, nil
}

func structValueToKube(v *structpb.Value) (any, error) {
	switch x := v.GetKind().(type) {
	case *structpb.Value_NullValue:
		return nil, nil
	case *structpb.Value_BoolValue:
		return x.BoolValue, nil
	case *structpb.Value_StringValue:
		if !utf8.ValidString(x.StringValue) {
			return nil, fmt.Errorf("a google.protobuf.Value contains invalid UTF-8")
		}
		return x.StringValue, nil
	case *structpb.Value_NumberValue:
		if math.IsNaN(x.NumberValue) || math.IsInf(x.NumberValue, 0) {
			return nil, fmt.Errorf("invalid google.protobuf.Value: %v", x.NumberValue)
		}
		return nativeFloat(x.NumberValue, 64), nil
	case *structpb.Value_StructValue:
		return structToKube(x.StructValue)
	case *structpb.Value_ListValue:
		out := make([]any, len(x.ListValue.GetValues()))
		for i, e := range x.ListValue.GetValues() {
			kv, err := structValueToKube(e)
			if err != nil {
				return nil, err
			}
			out[i] = kv
		}
		return out, nil
	}
	return nil, fmt.Errorf("invalid google.protobuf.Value: no kind set") // as protojson
}

// intOrStringToKube is Kubernetes' IntOrString: the string if set, else
// the number, else Kubernetes' zero value 0.
func intOrStringToKube(m protoreflect.Message) any {
	fields := m.Descriptor().Fields()
	if fd := fields.ByJSONName("strVal"); fd != nil && m.Has(fd) {
		return m.Get(fd).String()
	}
	if fd := fields.ByJSONName("intVal"); fd != nil && m.Has(fd) {
		return m.Get(fd).Int()
	}
	return int64(0)
}

// nativeFloat is n as it reads back from protojson's JSON: an int64 when
// its spelling is an integer, else a float64, a special value a string.
func nativeFloat(n float64, bitSize int) any {
	if j, ok := floatToKube(n, bitSize).(json.Number); ok {
		return nativeNumber(j)
	}
	return floatToKube(n, bitSize)
}

// floatToKube writes n as protojson does: its special values as strings,
// the rest in the shortest form, with an exponent only for very small or
// large magnitudes.
func floatToKube(n float64, bitSize int) any {
	switch {
	case math.IsNaN(n):
		return "NaN"
	case math.IsInf(n, +1):
		return "Infinity"
	case math.IsInf(n, -1):
		return "-Infinity"
	}
	format := byte('f')
	if abs := math.Abs(n); abs != 0 {
		if bitSize == 64 && (abs < 1e-6 || abs >= 1e21) ||
			bitSize == 32 && (float32(abs) < 1e-6 || float32(abs) >= 1e21) {
			format = 'e'
		}
	}
	out := strconv.AppendFloat(nil, n, format, -1, bitSize)
	if format == 'e' { // "1e-07" → "1e-7", as protojson
		if n := len(out); n >= 4 && out[n-4] == 'e' && out[n-3] == '-' && out[n-2] == '0' {
			out[n-2] = out[n-1]
			out = out[:n-1]
		}
	}
	return json.Number(out)
}

// Timestamp bounds protojson accepts: 0001-01-01 to 9999-12-31.
const (
	minTimestampSeconds = -62135596800
	maxTimestampSeconds = 253402300799
)

// timestampJSON is a google.protobuf.Timestamp as protojson writes it:
// RFC 3339 in UTC with 0, 3, 6 or 9 fractional digits.
func timestampJSON(m protoreflect.Message) (string, error) {
	fields := m.Descriptor().Fields()
	secs := m.Get(fields.ByName("seconds")).Int()
	nanos := m.Get(fields.ByName("nanos")).Int()
	if secs < minTimestampSeconds || secs > maxTimestampSeconds || nanos < 0 || nanos > 999_999_999 {
		// protojson's own error for the value.
		_, err := protojson.Marshal(m.Interface())
		if err == nil {
			err = fmt.Errorf("invalid %s value", timestampName)
		}
		return "", err
	}
	x := time.Unix(secs, nanos).UTC().Format("2006-01-02T15:04:05.000000000")
	x = strings.TrimSuffix(x, "000")
	x = strings.TrimSuffix(x, "000")
	x = strings.TrimSuffix(x, ".000")
	return x + "Z", nil
}
