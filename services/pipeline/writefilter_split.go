package pipeline

import (
	"bytes"
	"unicode/utf8"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/vt"
	"google.golang.org/protobuf/encoding/protowire"
)

// The field numbers of Pod and PodSpec that splitPods reads.
const (
	podMetadata     protowire.Number = 1
	podSpec         protowire.Number = 2
	podStatus       protowire.Number = 3
	podSpecNodeName protowire.Number = 8
)

// podParts is an encoded pod cut at its top-level fields, for a check
// that need not decode its spec: the spec is the same, byte for byte, as
// the other pod's (but for spec.nodeName), so it is equal to it once
// decoded, and the check compares the rest. The checks run on the store
// leader for every bind and status write; the spec (containers, volumes)
// was most of what they decoded. What the cut does not decode is not
// checked to decode either: a spec written exactly as stored, and the
// stored status the status stage replaces (both were decoded by the
// writers that stored them).
type podParts struct {
	pod                         corev1.Pod // decoded by decodeParts: no spec but spec.nodeName
	meta, status, nodeName      []byte
	hasMeta, hasSpec, hasStatus bool
}

// splitPods cuts old and new for a check that allows no change to the
// spec but, with nodeName, to spec.nodeName. ok is false when the pods'
// specs differ otherwise, or either pod is encoded in a way the cut does
// not read as a decoder would (a top-level field repeated, of another
// wire type or unknown; spec.nodeName of another wire type): the check
// then decodes the pods whole.
func splitPods(old, new []byte, nodeName bool, was, is *podParts) bool {
	oldSpec, ok := cutPod(old, was)
	if !ok {
		return false
	}
	newSpec, ok := cutPod(new, is)
	if !ok || was.hasSpec != is.hasSpec {
		return false
	}
	if !nodeName {
		return bytes.Equal(oldSpec, newSpec)
	}
	was.nodeName, is.nodeName, ok = sameSpecButNodeName(oldSpec, newSpec)
	return ok
}

// cutPod records b's top-level fields in p and returns the spec's bytes.
func cutPod(b []byte, p *podParts) (spec []byte, ok bool) {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || typ != protowire.BytesType {
			return nil, false
		}
		b = b[n:]
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return nil, false
		}
		b = b[n:]
		var seen *bool
		switch num {
		case podMetadata:
			seen, p.meta = &p.hasMeta, v
		case podSpec:
			seen, spec = &p.hasSpec, v
		case podStatus:
			seen, p.status = &p.hasStatus, v
		default:
			return nil, false
		}
		if *seen {
			return nil, false // merged by a decoder: leave it to one
		}
		*seen = true
	}
	return spec, true
}

// sameSpecButNodeName reports whether the encoded specs a and b hold the
// same fields, byte for byte and in order, but for spec.nodeName, and
// returns each one's nodeName (the last, as a decoder keeps).
func sameSpecButNodeName(a, b []byte) (aNode, bNode []byte, ok bool) {
	for {
		fa, na, oka := nextSpecField(a, &aNode)
		fb, nb, okb := nextSpecField(b, &bNode)
		if !oka || !okb {
			return nil, nil, false
		}
		if na == 0 || nb == 0 {
			// A node name that is not UTF-8: the whole decode says why.
			ok := na == 0 && nb == 0 && utf8.Valid(aNode) && utf8.Valid(bNode)
			return aNode, bNode, ok
		}
		if !bytes.Equal(fa, fb) {
			return nil, nil, false
		}
		a, b = a[na:], b[nb:]
	}
}

// nextSpecField skips b's leading spec.nodeName fields, recording their
// value in node, and returns the next field (tag and value) and the bytes
// consumed up to its end (0: none left).
func nextSpecField(b []byte, node *[]byte) (field []byte, n int, ok bool) {
	off := 0
	for off < len(b) {
		num, typ, tn := protowire.ConsumeTag(b[off:])
		if tn < 0 {
			return nil, 0, false
		}
		vn := protowire.ConsumeFieldValue(num, typ, b[off+tn:])
		if vn < 0 {
			return nil, 0, false
		}
		if num != podSpecNodeName {
			return b[off : off+tn+vn], off + tn + vn, true
		}
		if typ != protowire.BytesType {
			return nil, 0, false
		}
		v, _ := protowire.ConsumeBytes(b[off+tn:])
		*node = v
		off += tn + vn
	}
	return nil, 0, true
}

// metaAnnotations is ObjectMeta's annotations field number; an entry's
// key and value are its fields 1 and 2.
const (
	metaAnnotations protowire.Number = 5
	entryKey        protowire.Number = 1
	entryValue      protowire.Number = 2
)

// sameMetaBut reports whether the encoded metadata a and b hold the same
// fields, byte for byte and in order, but for annotation entries of key
// (any number, anywhere, in either): decoded, and that annotation
// deleted from both, they are equal, without decoding them (labels,
// annotations, owner references are maps and lists: most of what a
// check of a pod allocated). It is false for an encoding it does not
// read as a decoder would, and for a skipped entry that is not UTF-8,
// so the caller decodes. Like the spec in splitPods, what is written as
// stored is not checked to decode.
func sameMetaBut(a, b []byte, key string) bool {
	for {
		fa, na, oka := nextMetaField(a, key)
		fb, nb, okb := nextMetaField(b, key)
		if !oka || !okb {
			return false
		}
		if na == 0 || nb == 0 {
			return na == 0 && nb == 0
		}
		if !bytes.Equal(fa, fb) {
			return false
		}
		a, b = a[na:], b[nb:]
	}
}

// nextMetaField skips b's leading annotation entries of key and returns
// the next field (tag and value) and the bytes consumed up to its end
// (0: none left).
func nextMetaField(b []byte, key string) (field []byte, n int, ok bool) {
	off := 0
	for off < len(b) {
		num, typ, tn := protowire.ConsumeTag(b[off:])
		if tn < 0 {
			return nil, 0, false
		}
		vn := protowire.ConsumeFieldValue(num, typ, b[off+tn:])
		if vn < 0 {
			return nil, 0, false
		}
		if num != metaAnnotations || typ != protowire.BytesType {
			return b[off : off+tn+vn], off + tn + vn, true
		}
		v, _ := protowire.ConsumeBytes(b[off+tn:])
		skip, ok := annotationOf(v, key)
		if !ok {
			return nil, 0, false
		}
		if !skip {
			return b[off : off+tn+vn], off + tn + vn, true
		}
		off += tn + vn
	}
	return nil, 0, true
}

// annotationOf reports whether the encoded annotation entry e is one of
// key; ok is false when e holds a field but its key and value strings,
// or a string that is not UTF-8.
func annotationOf(e []byte, key string) (is, ok bool) {
	var k []byte
	for len(e) > 0 {
		num, typ, n := protowire.ConsumeTag(e)
		if n < 0 || typ != protowire.BytesType || (num != entryKey && num != entryValue) {
			return false, false
		}
		e = e[n:]
		v, n := protowire.ConsumeBytes(e)
		if n < 0 || !utf8.Valid(v) {
			return false, false
		}
		e = e[n:]
		if num == entryKey {
			k = v
		}
	}
	return string(k) == key, true
}

// decodeParts decodes p's metadata, its spec.nodeName and, with status,
// its status into p.pod; the spec's other fields stay unset.
func decodeParts(p *podParts, status bool) error {
	if p.hasMeta {
		p.pod.Metadata = &corev1.ObjectMeta{}
		if err := vt.Unmarshal(p.meta, p.pod.Metadata); err != nil {
			return err
		}
	}
	if p.hasSpec {
		p.pod.Spec = &corev1.PodSpec{NodeName: string(p.nodeName)}
	}
	if status && p.hasStatus {
		p.pod.Status = &corev1.PodStatus{}
		if err := vt.Unmarshal(p.status, p.pod.Status); err != nil {
			return err
		}
	}
	return nil
}
