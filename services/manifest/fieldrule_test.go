package manifest

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"
	kcorev1 "k8s.io/api/core/v1"

	pf "github.com/podflow/podflow/proto/corev1"
)

// kubeField is one field of the k8s.io/api Pod type: its path (json tags,
// "[*]" for list items and map values) and whether podflow's proto has a
// place for it.
type kubeField struct {
	path    string
	leaf    bool
	inProto bool
}

var marshaler = reflect.TypeFor[json.Marshaler]()

// podFieldsByReflection walks k8s.io/api's corev1.Pod — PodSpec,
// Container, EphemeralContainer, Volume and VolumeSource, the security
// contexts, probes, handlers, env ... — recursing into struct fields with
// their json tags as paths, alongside podflow's proto descriptor.
func podFieldsByReflection() []kubeField {
	var out []kubeField
	var walk func(t reflect.Type, md protoreflect.MessageDescriptor, path string, seen []reflect.Type)
	walk = func(t reflect.Type, md protoreflect.MessageDescriptor, path string, seen []reflect.Type) {
		if slices.Contains(seen, t) {
			panic("recursive type at " + path)
		}
		fields := map[string]reflect.Type{}
		jsonFields(t, fields)
		for name, ft := range fields {
			p := joinPath(path, name)
			var fd protoreflect.FieldDescriptor
			if md != nil {
				fd = shapeOf(md, t).byKube[name]
			}
			st := elemStruct(ft)
			leaf := st == nil || st.Implements(marshaler) || reflect.PointerTo(st).Implements(marshaler)
			out = append(out, kubeField{path: p, leaf: leaf, inProto: fd != nil})
			if leaf {
				continue
			}
			var sub protoreflect.MessageDescriptor
			switch {
			case fd == nil:
			case fd.IsMap():
				sub = fd.MapValue().Message()
			default:
				sub = fd.Message()
			}
			if k := ft.Kind(); k == reflect.Slice || k == reflect.Map {
				p += "[*]"
			}
			walk(st, sub, p, append(seen, t))
		}
	}
	walk(reflect.TypeFor[kcorev1.Pod](), (&pf.Pod{}).ProtoReflect().Descriptor(), "", nil)
	slices.SortFunc(out, func(a, b kubeField) int { return strings.Compare(a.path, b.path) })
	return out
}

// TestEveryPodFieldIsListed is the rule of issue 16: every field of a
// k8s.io/api Pod is honoured or refused, never neither and never both; an
// honoured field is one the proto holds (else it would be dropped); every
// listed path exists (no stale entries).
func TestEveryPodFieldIsListed(t *testing.T) {
	fields := podFieldsByReflection()
	if len(fields) < 1000 {
		t.Fatalf("walked %d Pod fields; the walk is broken", len(fields))
	}
	exists := map[string]bool{"apiVersion": true, "kind": true}
	for _, f := range fields {
		exists[f.path] = true
	}
	t.Run("on exactly one list", func(t *testing.T) {
		for p := range podHonoured {
			if _, ok := podRefused[p]; ok {
				t.Errorf("%s is both honoured and refused", p)
			}
		}
	})
	t.Run("no stale entries", func(t *testing.T) {
		for _, m := range []map[string]bool{keys(podHonoured), keys(podRefused)} {
			for p := range m {
				if !exists[p] {
					t.Errorf("listed %s is not a field of k8s.io/api's Pod", p)
				}
			}
		}
	})
	for _, f := range fields {
		if !f.leaf || f.path == "apiVersion" || f.path == "kind" {
			continue
		}
		r, ok := ruleFor(f.path)
		switch {
		case !ok:
			t.Errorf("%s is on neither list: honour it (with a test) or refuse it in fields.go", f.path)
		case r.honoured && !f.inProto && r.path != "status" && !strings.HasPrefix(f.path, "status."):
			t.Errorf("%s is honoured (by %s) but the proto has no place for it: it would be dropped", f.path, r.path)
		}
	}
}

func keys[V any](m map[string]V) map[string]bool {
	out := map[string]bool{}
	for k := range m {
		out[k] = true
	}
	return out
}
