package objects

import (
	"fmt"
	"strconv"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/raftstore"
)

// ObjectMeta's field numbers DecodeMeta reads, from the descriptor.
var metaFields = func() (f struct{ name, namespace, uid, deletion protowire.Number }) {
	d := (&corev1.ObjectMeta{}).ProtoReflect().Descriptor().Fields()
	f.name = d.ByName("name").Number()
	f.namespace = d.ByName("namespace").Number()
	f.uid = d.ByName("uid").Number()
	f.deletion = d.ByName("deletion_timestamp").Number()
	return f
}()

// DecodeMeta is Decode of the metadata's identity alone: obj (a new,
// empty object of kv's kind) gets a metadata holding only name,
// namespace, uid, deletionTimestamp and the resourceVersion of kv. Spec,
// status, labels, annotations and managed fields are skipped unparsed: a
// cache that only tracks which objects exist (bound tokens name them)
// pays a fraction of a full decode per write.
func DecodeMeta(kv *raftstore.KV, obj Object) error {
	m := obj.ProtoReflect()
	fd := m.Descriptor().Fields().ByName("metadata")
	if fd == nil || fd.Kind() != protoreflect.MessageKind {
		return fmt.Errorf("objects: decode %q: %s has no metadata", kv.Key, m.Descriptor().FullName())
	}
	md, found := &corev1.ObjectMeta{}, false
	b := kv.Value
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fmt.Errorf("objects: decode %q: %w", kv.Key, protowire.ParseError(n))
		}
		b = b[n:]
		if num == fd.Number() && typ == protowire.BytesType {
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return fmt.Errorf("objects: decode %q: %w", kv.Key, protowire.ParseError(n))
			}
			if err := decodeMetaFields(v, md); err != nil { // a repeated field merges, as proto.Unmarshal
				return fmt.Errorf("objects: decode %q: %w", kv.Key, err)
			}
			found, b = true, b[n:]
			continue
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return fmt.Errorf("objects: decode %q: %w", kv.Key, protowire.ParseError(n))
		}
		b = b[n:]
	}
	if !found {
		return fmt.Errorf("objects: decode %q: no metadata", kv.Key)
	}
	md.ResourceVersion = strconv.FormatInt(kv.ModRevision, 10)
	m.Set(fd, protoreflect.ValueOfMessage(md.ProtoReflect()))
	return nil
}

func decodeMetaFields(b []byte, md *corev1.ObjectMeta) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		if typ == protowire.BytesType && (num == metaFields.name || num == metaFields.namespace || num == metaFields.uid || num == metaFields.deletion) {
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return protowire.ParseError(n)
			}
			b = b[n:]
			switch num {
			case metaFields.name:
				md.Name = string(v)
			case metaFields.namespace:
				md.Namespace = string(v)
			case metaFields.uid:
				md.Uid = string(v)
			default:
				if md.DeletionTimestamp == nil {
					md.DeletionTimestamp = &timestamppb.Timestamp{}
				}
				if err := (proto.UnmarshalOptions{Merge: true}).Unmarshal(v, md.DeletionTimestamp); err != nil {
					return err
				}
			}
			continue
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
	}
	return nil
}
