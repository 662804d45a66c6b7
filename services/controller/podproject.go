package controller

import (
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/informer"
	"github.com/podflow/podflow/services/objects"
)

// KubePodSpecFields are the PodSpec fields KubePod reads: a pod informer
// whose pods are read only through KubePod (NewPodSpecInformer) keeps
// these.
var KubePodSpecFields = []string{"node_name"}

// NewPodSpecInformer returns a pod informer that keeps each pod's
// metadata and status whole and, of its spec, only the fields named
// (PodSpec's protobuf field names, "node_name"): the rest of the spec —
// containers, volumes, the bulk of a pod — is skipped on the wire, never
// decoded. For a controller that reads pods and never writes one from its
// cache (it mutates a fresh read), as kube's disruption and node lifecycle
// controllers read only a pod's status, node and tolerations.
func NewPodSpecInformer(st *objects.Store, h informer.Handlers[*corev1.Pod], specFields ...string) (*informer.Informer[*corev1.Pod], error) {
	dec, err := podSpecDecoder(specFields)
	if err != nil {
		return nil, err
	}
	return informer.NewDecoding(st, "", h, dec)
}

// podSpecDecoder decodes a pod whose spec holds only the fields named.
func podSpecDecoder(specFields []string) (func(*raftstore.KV, objects.Object) error, error) {
	pod := (&corev1.Pod{}).ProtoReflect().Descriptor().Fields()
	spec := pod.ByName("spec")
	keep := map[protowire.Number]bool{}
	for _, name := range specFields {
		fd := spec.Message().Fields().ByName(protoreflect.Name(name))
		if fd == nil {
			return nil, fmt.Errorf("controller: PodSpec has no field %q", name)
		}
		keep[fd.Number()] = true
	}
	return func(kv *raftstore.KV, obj objects.Object) error {
		b, err := projectSpec(kv.Value, spec.Number(), keep)
		if err != nil {
			return fmt.Errorf("objects: decode %q: %w", kv.Key, err)
		}
		cut := *kv
		cut.Value = b
		return objects.Decode(&cut, obj)
	}, nil
}

// projectSpec returns a pod's encoding b with, in its spec (field
// specNum, merged if repeated), only the fields keep names. The other
// fields are copied as they are.
func projectSpec(b []byte, specNum protowire.Number, keep map[protowire.Number]bool) ([]byte, error) {
	out := make([]byte, 0, len(b))
	var spec []byte
	hasSpec := false
	for len(b) > 0 {
		num, typ, tag, n, err := nextField(b)
		if err != nil {
			return nil, err
		}
		if num != specNum || typ != protowire.BytesType {
			out = append(out, b[:n]...)
			b = b[n:]
			continue
		}
		v, _ := protowire.ConsumeBytes(b[tag:n])
		hasSpec = true
		for len(v) > 0 {
			fnum, _, _, fn, err := nextField(v)
			if err != nil {
				return nil, err
			}
			if keep[fnum] {
				spec = append(spec, v[:fn]...)
			}
			v = v[fn:]
		}
		b = b[n:]
	}
	if hasSpec {
		out = protowire.AppendTag(out, specNum, protowire.BytesType)
		out = protowire.AppendBytes(out, spec)
	}
	return out, nil
}

// nextField reads the field that b starts with: its number, its type, the
// length of its tag and its whole length, tag included.
func nextField(b []byte) (num protowire.Number, typ protowire.Type, tag, n int, err error) {
	num, typ, tag = protowire.ConsumeTag(b)
	if tag < 0 {
		return 0, 0, 0, 0, protowire.ParseError(tag)
	}
	m := protowire.ConsumeFieldValue(num, typ, b[tag:])
	if m < 0 {
		return 0, 0, 0, 0, protowire.ParseError(m)
	}
	return num, typ, tag, tag + m, nil
}
