package manifest

import (
	"reflect"
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"
)

// podflowOnly lists proto fields with no Kubernetes counterpart.
var podflowOnly = map[protoreflect.FullName]bool{}

// TestEveryProtoFieldHasKubeName walks every kind's proto alongside its Go
// shape: a proto field that finds no Kubernetes field would be written
// under its proto JSON name, which Kubernetes would reject.
func TestEveryProtoFieldHasKubeName(t *testing.T) {
	seen := map[shapeKey]bool{}
	var walk func(md protoreflect.MessageDescriptor, typ reflect.Type, path string)
	walk = func(md protoreflect.MessageDescriptor, typ reflect.Type, path string) {
		if seen[shapeKey{md.FullName(), typ}] || md.FullName() == intOrStringName || md.FullName().Parent() == "google.protobuf" {
			return
		}
		seen[shapeKey{md.FullName(), typ}] = true
		s := shapeOf(md, typ)
		fields := md.Fields()
		for i := 0; i < fields.Len(); i++ {
			fd := fields.Get(i)
			p := path + "." + s.kubeName[fd.Number()]
			kube := map[string]reflect.Type{}
			jsonFields(typ, kube)
			if _, ok := kube[s.kubeName[fd.Number()]]; !ok && !podflowOnly[fd.FullName()] {
				t.Errorf("%s (%s): no Kubernetes field in %v", p, fd.FullName(), typ)
				continue
			}
			m := fd.Message()
			if fd.IsMap() {
				m = fd.MapValue().Message()
			}
			if m != nil && s.kubeType[fd.Number()] != nil {
				walk(m, s.kubeType[fd.Number()], p)
			}
		}
	}
	for _, k := range kinds {
		walk(k.newProto().ProtoReflect().Descriptor(), k.shape, k.kind)
	}
}
