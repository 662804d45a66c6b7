package objects

import (
	"fmt"
	"strconv"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/vt"
	"github.com/podflow/podflow/raftstore"
)

// ObjectMeta's field numbers DecodeMeta reads, from the descriptor.
var metaFields = func() (f struct{ name, namespace, uid, deletion, labels, owners protowire.Number }) {
	d := (&corev1.ObjectMeta{}).ProtoReflect().Descriptor().Fields()
	f.name = d.ByName("name").Number()
	f.namespace = d.ByName("namespace").Number()
	f.uid = d.ByName("uid").Number()
	f.deletion = d.ByName("deletion_timestamp").Number()
	f.labels = d.ByName("labels").Number()
	f.owners = d.ByName("owner_references").Number()
	return f
}()

// DecodeMeta is Decode of the metadata's identity alone: obj (a new,
// empty object of kv's kind) gets a metadata holding only name,
// namespace, uid, deletionTimestamp and the resourceVersion of kv. Spec,
// status, labels, annotations and managed fields are skipped unparsed: a
// cache that only tracks which objects exist (bound tokens name them)
// pays a fraction of a full decode per write.
func DecodeMeta(kv *raftstore.KV, obj Object) error { return decodeMeta(kv, obj, 0) }

// DecodeMetaLabels is DecodeMeta that keeps the metadata's labels too:
// for a cache that follows which objects exist and how they are labelled
// (the endpoints stage's pods, for Service selectors), at a fraction of a
// full decode per write.
func DecodeMetaLabels(kv *raftstore.KV, obj Object) error { return decodeMeta(kv, obj, metaLabels) }

// DecodeMetaOwners is DecodeMetaLabels that keeps the metadata's owner
// references too: what a controller reads of an object it does not
// control and will not adopt (its controller reference says whose it is,
// its labels which selectors match it).
func DecodeMetaOwners(kv *raftstore.KV, obj Object) error {
	return decodeMeta(kv, obj, metaLabels|metaOwners)
}

// The optional parts of the metadata decodeMeta keeps.
const (
	metaLabels = 1 << iota
	metaOwners
)

func decodeMeta(kv *raftstore.KV, obj Object, parts int) error {
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
			if err := decodeMetaFields(v, md, parts); err != nil { // a repeated field merges, as proto.Unmarshal
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

func decodeMetaFields(b []byte, md *corev1.ObjectMeta, parts int) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		if typ == protowire.BytesType && (num == metaFields.name || num == metaFields.namespace || num == metaFields.uid || num == metaFields.deletion ||
			parts&metaLabels != 0 && num == metaFields.labels || parts&metaOwners != 0 && num == metaFields.owners) {
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
			case metaFields.labels:
				k, val, err := decodeStringEntry(v)
				if err != nil {
					return err
				}
				if md.Labels == nil {
					md.Labels = map[string]string{}
				}
				md.Labels[k] = val // a repeated key: the last wins, as proto.Unmarshal
			case metaFields.owners:
				ref := &corev1.OwnerReference{}
				if err := vt.Unmarshal(v, ref); err != nil {
					return err
				}
				md.OwnerReferences = append(md.OwnerReferences, ref)
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

// decodeStringEntry parses one map<string, string> entry (key 1, value 2;
// either may be absent, meaning "").
func decodeStringEntry(b []byte) (key, val string, err error) {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return "", "", protowire.ParseError(n)
		}
		b = b[n:]
		if typ == protowire.BytesType && (num == 1 || num == 2) {
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return "", "", protowire.ParseError(n)
			}
			b = b[n:]
			if num == 1 {
				key = string(v)
			} else {
				val = string(v)
			}
			continue
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return "", "", protowire.ParseError(n)
		}
		b = b[n:]
	}
	return key, val, nil
}
