package scheduler

import (
	"sync"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/podflow/podflow/proto/podrules"
	"github.com/podflow/podflow/services/stage"
	"github.com/podflow/podflow/services/stages/scheduler/framework"
)

// pruneBoundPod copies of a stored pod's bytes b only the fields
// compactBound keeps, when the pod is bound, so that decoding the copy
// yields compactBound's pod without decoding — allocating — what it drops
// (images, env, mounts, volumes, tolerations, container statuses, managed
// fields…). Its fields are copied as they are stored, in their order:
// repeated occurrences of a message merge on decoding as they would have.
// It returns the copy appended to out and bound true for a bound pod;
// bound false for an unbound one (decoded whole) or bytes it does not
// read as it expects (a field it reads of another wire type, torn bytes:
// left to the full decoding, which judges them).
//
// The numbers are core.proto's; TestPrunedBoundPodIsCompactBound holds
// them to compactBound's.
func pruneBoundPod(out, b []byte) (pruned []byte, bound bool) {
	var p pruner
	out, ok := p.message(out, b, podLevel)
	return out, ok && p.node != ""
}

// The messages pruner reads, by their place in a pod.
const (
	podLevel = iota
	metaLevel
	specLevel
	statusLevel
	containerLevel
	conditionLevel
)

// keep: the fields kept whole, a bit per field number, by level.
var keep = [...]uint64{
	podLevel:       0, // its three fields are read
	metaLevel:      bits(1, 2, 3, 4, 6, 7, 8, 9, 11),
	specLevel:      bits(8, 14, 15, 18, 26, 46),
	statusLevel:    bits(1, 5, 9),
	containerLevel: bits(1, 6, 8, 16),
	conditionLevel: ^uint64(0), // a condition kept is kept whole
}

// within: the message fields read and pruned, by level: field number to
// the level of the message it holds.
var within = [...]map[protowire.Number]int{
	podLevel:    {1: metaLevel, 2: specLevel, 3: statusLevel},
	specLevel:   {2: containerLevel, 3: containerLevel},
	metaLevel:   {},
	statusLevel: {},
}

func bits(nums ...int) uint64 {
	var m uint64
	for _, n := range nums {
		m |= 1 << n
	}
	return m
}

const (
	metaAnnotations  = 5 // ObjectMeta.annotations, map entries filtered by key
	specNodeName     = 8 // PodSpec.node_name
	statusConditions = 2 // PodStatus.conditions, filtered by type
)

// pruner holds what pruning learned: the pod's node (the last
// spec.node_name stored, as decoding takes it).
type pruner struct {
	node string
}

// message appends to out the kept fields of the message b at level.
func (p *pruner) message(out, b []byte, level int) ([]byte, bool) {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return out, false
		}
		m := protowire.ConsumeFieldValue(num, typ, b[n:])
		if m < 0 {
			return out, false
		}
		field, tag := b[:n+m], b[:n]
		b = b[n+m:]
		var ok bool
		switch {
		case level == podLevel || level == specLevel && (num == 2 || num == 3):
			sub, isSub := within[level][num]
			if !isSub {
				out = append(out, field...) // an unknown field: compactBound leaves the pod's
				continue
			}
			if typ != protowire.BytesType {
				return out, false
			}
			v, _ := protowire.ConsumeBytes(field[n:])
			if out, ok = p.nested(out, tag, v, sub); !ok {
				return out, false
			}
			continue
		case level == metaLevel && num == metaAnnotations:
			if typ != protowire.BytesType {
				return out, false
			}
			v, _ := protowire.ConsumeBytes(field[n:])
			key, ok := lastBytes(v, 1)
			if !ok {
				return out, false
			}
			if string(key) == stage.AnnotationTraceparent || string(key) == stage.AnnotationRequestID {
				out = append(out, field...)
			}
			continue
		case level == statusLevel && num == statusConditions:
			if typ != protowire.BytesType {
				return out, false
			}
			v, _ := protowire.ConsumeBytes(field[n:])
			t, ok := lastBytes(v, 1)
			if !ok {
				return out, false
			}
			if string(t) == podrules.PodScheduled || string(t) == framework.ConditionDisruptionTarget {
				out = append(out, field...)
			}
			continue
		case level == specLevel && num == specNodeName:
			if typ != protowire.BytesType {
				return out, false
			}
			v, _ := protowire.ConsumeBytes(field[n:])
			p.node = string(v)
		}
		if num < 64 && keep[level]&(1<<num) != 0 {
			out = append(out, field...)
		}
	}
	return out, true
}

// nested appends the field tag holding the message v at level, pruned.
// The length goes before the pruned content, which is no longer than v:
// room for v's length is made first, and the content moved back when
// its own length is shorter to write.
func (p *pruner) nested(out, tag, v []byte, level int) ([]byte, bool) {
	out = append(out, tag...)
	at, room := len(out), protowire.SizeVarint(uint64(len(v)))
	for range room {
		out = append(out, 0)
	}
	out, ok := p.message(out, v, level)
	if !ok {
		return out, false
	}
	n := len(out) - at - room
	size := protowire.SizeVarint(uint64(n))
	copy(out[at+size:], out[at+room:])
	protowire.AppendVarint(out[at:at], uint64(n))
	return out[:at+size+n], true
}

// lastBytes is the last value of the string field num of the message b
// (empty if it has none), as decoding takes it; false if b does not read
// as a message or holds num of another wire type.
func lastBytes(b []byte, num protowire.Number) ([]byte, bool) {
	var last []byte
	for len(b) > 0 {
		n0, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, false
		}
		m := protowire.ConsumeFieldValue(n0, typ, b[n:])
		if m < 0 {
			return nil, false
		}
		if n0 == num {
			if typ != protowire.BytesType {
				return nil, false
			}
			last, _ = protowire.ConsumeBytes(b[n:])
		}
		b = b[n+m:]
	}
	return last, true
}

// pruneBufs recycles pruneBoundPod's copies: decoding copies what it
// keeps, so a copy is free again once decoded.
// A copy grown past maxPooledPrune (a huge pod) is left to the GC.
var pruneBufs = sync.Pool{New: func() any { b := make([]byte, 0, 4096); return &b }}

const maxPooledPrune = 64 << 10
