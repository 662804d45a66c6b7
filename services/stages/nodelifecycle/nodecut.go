package nodelifecycle

import (
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/objects"
)

// fieldCut says which fields of a message to keep: a field it names with
// a nil cut is kept whole, one with a cut is cut in turn; the others are
// dropped.
type fieldCut map[protowire.Number]fieldCut

// cutOf builds a fieldCut from field names: "spec.taints" keeps spec's
// taints, "metadata" all of metadata.
func cutOf(m protoreflect.MessageDescriptor, paths ...[]protoreflect.Name) fieldCut {
	c := fieldCut{}
	for _, p := range paths {
		fd := m.Fields().ByName(p[0])
		if fd == nil {
			panic(fmt.Sprintf("nodelifecycle: %s has no field %q", m.FullName(), p[0]))
		}
		if len(p) == 1 {
			c[fd.Number()] = nil
			continue
		}
		sub := cutOf(fd.Message(), p[1:])
		if c[fd.Number()] == nil {
			c[fd.Number()] = fieldCut{}
		}
		for k, v := range sub {
			c[fd.Number()][k] = v
		}
	}
	return c
}

// appendCut appends to out the fields of the message b that c keeps, in
// their order; a repeated occurrence of a message cut is cut on its own,
// and merges with the others on decoding as the whole ones would.
func (c fieldCut) appendCut(out, b []byte) ([]byte, error) {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, protowire.ParseError(n)
		}
		m := protowire.ConsumeFieldValue(num, typ, b[n:])
		if m < 0 {
			return nil, protowire.ParseError(m)
		}
		field := b[:n+m]
		b = b[n+m:]
		sub, ok := c[num]
		switch {
		case !ok:
		case sub == nil || typ != protowire.BytesType:
			out = append(out, field...)
		default:
			v, _ := protowire.ConsumeBytes(field[n:])
			inner, err := sub.appendCut(nil, v)
			if err != nil {
				return nil, err
			}
			out = protowire.AppendTag(out, num, protowire.BytesType)
			out = protowire.AppendBytes(out, inner)
		}
	}
	return out, nil
}

// nodeCut is what a pass reads of a node from the informer: its name,
// uid and creationTimestamp, its taints and its conditions. Its status's
// capacity, addresses, images and node info, the bulk of a node, are
// dropped.
var nodeCut = cutOf((&corev1.Node{}).ProtoReflect().Descriptor(),
	[]protoreflect.Name{"metadata", "name"}, []protoreflect.Name{"metadata", "uid"},
	[]protoreflect.Name{"metadata", "creation_timestamp"},
	[]protoreflect.Name{"spec", "taints"}, []protoreflect.Name{"status", "conditions"})

// decodeNode is an informer decoder (informer.NewDecoding) of the nodes
// cut to nodeCut.
func decodeNode(kv *raftstore.KV, obj objects.Object) error {
	b, err := nodeCut.appendCut(nil, kv.Value)
	if err != nil {
		return fmt.Errorf("objects: decode %q: %w", kv.Key, err)
	}
	cut := *kv
	cut.Value = b
	return objects.Decode(&cut, obj)
}
