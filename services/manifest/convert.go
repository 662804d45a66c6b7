package manifest

// The conversion core. A Kubernetes object and a podflow proto message meet
// as generic JSON trees (map[string]any with json.Number leaves):
//
//	Kubernetes JSON  --toProto-->  protojson JSON  --protojson.Unmarshal-->  proto
//	Kubernetes JSON  <--toKube--   protojson JSON  <--protojson.Marshal---   proto
//
// The walk is guided by the proto descriptor and, in parallel, by the Go
// type whose json tags name the Kubernetes fields. It renames keys (proto's
// "podIp" is Kubernetes' "podIP"), flattens IntOrString ({"intVal":80} is
// 80), turns protojson's quoted int64s back into numbers, and collects the
// Kubernetes fields the proto has no place for.

import (
	"encoding/json"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/reflect/protoreflect"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const intOrStringName protoreflect.FullName = "podflow.core.v1.IntOrString"

// shape maps one proto message's fields to the Kubernetes JSON names of the
// corresponding Go struct.
type shape struct {
	byKube   map[string]protoreflect.FieldDescriptor
	kubeName map[protoreflect.FieldNumber]string
	kubeType map[protoreflect.FieldNumber]reflect.Type // element struct type, or nil
}

// renamed lists proto fields whose Kubernetes name differs by more than
// letter case.
var renamed = map[protoreflect.FullName]string{
	"podflow.core.v1.ContainerStatus.last_termination_state": "lastState",
}

type shapeKey struct {
	msg protoreflect.FullName
	typ reflect.Type
}

var shapes sync.Map // shapeKey -> *shape

// shapeOf returns the shape of md against Go type t (nil: none known, proto
// JSON names are used).
func shapeOf(md protoreflect.MessageDescriptor, t reflect.Type) *shape {
	key := shapeKey{md.FullName(), t}
	if s, ok := shapes.Load(key); ok {
		return s.(*shape)
	}
	kube := map[string]reflect.Type{}
	if t != nil {
		jsonFields(t, kube)
	}
	s := &shape{
		byKube:   map[string]protoreflect.FieldDescriptor{},
		kubeName: map[protoreflect.FieldNumber]string{},
		kubeType: map[protoreflect.FieldNumber]reflect.Type{},
	}
	fields := md.Fields()
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		name := fd.JSONName()
		want := name
		if n, ok := renamed[fd.FullName()]; ok {
			want = n
		}
		var typ reflect.Type
		for kn, kt := range kube {
			if strings.EqualFold(kn, want) {
				name, typ = kn, elemStruct(kt)
				break
			}
		}
		s.byKube[name] = fd
		s.kubeName[fd.Number()] = name
		s.kubeType[fd.Number()] = typ
	}
	actual, _ := shapes.LoadOrStore(key, s)
	return actual.(*shape)
}

// jsonFields collects the JSON field names of struct t, descending into
// inline and embedded structs as encoding/json does.
func jsonFields(t reflect.Type, out map[string]reflect.Type) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return
	}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if name == "" && (f.Anonymous || strings.Contains(opts, "inline")) {
			jsonFields(f.Type, out)
			continue
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = f.Type
	}
}

// elemStruct strips pointers, slices and maps down to a struct type, or
// returns nil.
func elemStruct(t reflect.Type) reflect.Type {
	for {
		switch t.Kind() {
		case reflect.Pointer, reflect.Slice, reflect.Array, reflect.Map:
			t = t.Elem()
		case reflect.Struct:
			return t
		default:
			return nil
		}
	}
}

// dropped is a Kubernetes field with a value that the proto cannot hold.
type dropped struct {
	path  string
	value any
}

func joinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// toProto converts Kubernetes JSON v of message md (Go type t) to protojson
// JSON, appending fields the proto lacks (with non-empty values) to drops.
func toProto(v any, md protoreflect.MessageDescriptor, t reflect.Type, path string, drops *[]dropped) any {
	obj, ok := v.(map[string]any)
	if !ok {
		return v // null, or a wrong type protojson will report
	}
	s := shapeOf(md, t)
	out := make(map[string]any, len(obj))
	for key, val := range obj {
		fd := s.byKube[key]
		p := joinPath(path, key)
		if fd == nil {
			if !isEmpty(val) {
				*drops = append(*drops, dropped{p, val})
			}
			continue
		}
		out[fd.JSONName()] = valueToProto(val, fd, s.kubeType[fd.Number()], p, drops)
	}
	return out
}

func valueToProto(v any, fd protoreflect.FieldDescriptor, t reflect.Type, path string, drops *[]dropped) any {
	switch {
	case fd.IsMap():
		vd := fd.MapValue()
		m, ok := v.(map[string]any)
		if !ok || vd.Message() == nil {
			return v
		}
		out := make(map[string]any, len(m))
		for k, e := range m {
			out[k] = messageToProto(e, vd.Message(), t, path+"["+k+"]", drops)
		}
		return out
	case fd.IsList():
		l, ok := v.([]any)
		if !ok || fd.Message() == nil {
			return v
		}
		out := make([]any, len(l))
		for i, e := range l {
			out[i] = messageToProto(e, fd.Message(), t, path+"["+strconv.Itoa(i)+"]", drops)
		}
		return out
	case fd.Message() != nil:
		return messageToProto(v, fd.Message(), t, path, drops)
	}
	return v
}

func messageToProto(v any, md protoreflect.MessageDescriptor, t reflect.Type, path string, drops *[]dropped) any {
	switch {
	case md.FullName() == intOrStringName:
		switch x := v.(type) {
		case json.Number:
			return map[string]any{"intVal": x}
		case string:
			return map[string]any{"strVal": x}
		}
		return v
	case md.FullName().Parent() == "google.protobuf":
		return v // Timestamp: RFC 3339 on both sides
	}
	return toProto(v, md, t, path, drops)
}

var microTimeType = reflect.TypeFor[metav1.MicroTime]()

// microTime writes a Timestamp for a metav1.MicroTime field (an Event's
// eventTime, series.lastObservedTime) in the form MicroTime reads, six
// fractional digits always: protojson leaves them out for a whole second.
func microTime(v any, t reflect.Type) any {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	s, ok := v.(string)
	if t != microTimeType || !ok {
		return v
	}
	ts, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return v
	}
	return ts.UTC().Format(metav1.RFC3339Micro)
}

// isEmpty reports whether a dropped value carries no information: null, an
// empty list, or an object of empty values (Kubernetes writes "status":
// {"loadBalancer": {}} for every Service).
func isEmpty(v any) bool {
	switch x := v.(type) {
	case nil:
		return true
	case []any:
		return len(x) == 0
	case map[string]any:
		for _, e := range x {
			if !isEmpty(e) {
				return false
			}
		}
		return true
	}
	return false
}

func dropPaths(d []dropped) []string {
	out := make([]string, len(d))
	for i, x := range d {
		out[i] = x.path
	}
	sort.Strings(out)
	return out
}
