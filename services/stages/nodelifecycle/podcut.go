package nodelifecycle

import (
	"fmt"
	"sync"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/podrules"
	"github.com/podflow/podflow/proto/vt"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/objects"
)

// The field numbers podCutter reads, from the descriptors.
var podFields = func() (f struct {
	spec, status, nodeName, tolerations, conditions, condType, condStatus protowire.Number
}) {
	num := func(m protoreflect.ProtoMessage, name protoreflect.Name) protowire.Number {
		return m.ProtoReflect().Descriptor().Fields().ByName(name).Number()
	}
	f.spec, f.status = num(&corev1.Pod{}, "spec"), num(&corev1.Pod{}, "status")
	f.nodeName, f.tolerations = num(&corev1.PodSpec{}, "node_name"), num(&corev1.PodSpec{}, "tolerations")
	f.conditions = num(&corev1.PodStatus{}, "conditions")
	f.condType, f.condStatus = num(&corev1.PodCondition{}, "type"), num(&corev1.PodCondition{}, "status")
	return f
}()

// podCutter decodes of a stored pod only what the controller reads of
// the pods it caches: the metadata's identity and deletionTimestamp
// (objects.DecodeMeta), the spec's nodeName and tolerations, and the
// type and status of its Ready condition. The rest (containers, volumes,
// labels, annotations, managed fields, container statuses, the other
// conditions — most of a pod) is skipped on the wire, never decoded. A
// repeated occurrence of spec or status merges, as in a full decoding.
//
// The pods of one node with the same tolerations (the admission's
// defaults, usually) share one spec, and pods share a status per
// Ready status: a cached pod is read-only, and what is left of it is
// otherwise mostly those two messages. The shared ones are kept by the
// bytes they were decoded from, at most 2×maxShared of each.
type podCutter struct {
	mu       sync.Mutex
	specs    shared[*corev1.PodSpec]
	statuses shared[*corev1.PodStatus]
	buf      []byte // scratch: cut's results
	specBuf  []byte // scratch: cut's spec fields
	statBuf  []byte // scratch: cut's status fields
}

// maxShared bounds the specs (and statuses) a podCutter shares at once:
// beyond, the older half is dropped (a node's pods then get a spec of
// their own again, from their next write on).
const maxShared = 1 << 14

func newPodCutter() *podCutter {
	return &podCutter{specs: newShared[*corev1.PodSpec](maxShared), statuses: newShared[*corev1.PodStatus](maxShared)}
}

// decode is an informer decoder (informer.NewDecoding).
func (pc *podCutter) decode(kv *raftstore.KV, obj objects.Object) error {
	if err := objects.DecodeMeta(kv, obj); err != nil {
		return err
	}
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return fmt.Errorf("objects: decode %q: %T is not a pod", kv.Key, obj)
	}
	pc.mu.Lock()
	defer pc.mu.Unlock()
	// The kept fields of the spec, then of the status, in the order
	// stored, each prefixed with a byte saying that the message is there.
	spec, status, err := pc.cut(kv.Value)
	if err != nil {
		return fmt.Errorf("objects: decode %q: %w", kv.Key, err)
	}
	if spec != nil {
		if p.Spec, err = pc.specs.get(spec, func() (*corev1.PodSpec, error) {
			s := &corev1.PodSpec{}
			return s, vt.Unmarshal(spec[1:], s)
		}); err != nil {
			return fmt.Errorf("objects: decode %q: %w", kv.Key, err)
		}
	}
	if status != nil {
		if p.Status, err = pc.statuses.get(status, func() (*corev1.PodStatus, error) {
			s := &corev1.PodStatus{}
			return s, vt.Unmarshal(status[1:], s)
		}); err != nil {
			return fmt.Errorf("objects: decode %q: %w", kv.Key, err)
		}
	}
	return nil
}

// cut returns, from a pod's encoding b, the encoding of a PodSpec of its
// spec's nodeName and tolerations and that of a PodStatus of its Ready
// conditions' type and status, each after a byte 1; nil for a message
// the pod has not. Both are slices of pc.buf.
func (pc *podCutter) cut(b []byte) (spec, status []byte, err error) {
	specs, statuses := pc.specBuf[:0], pc.statBuf[:0] // the kept fields, before they go into buf
	hasSpec, hasStatus := false, false
	err = vt.EachBytesField(b, func(num protowire.Number, v []byte) error {
		switch num {
		case podFields.spec:
			hasSpec = true
			return vt.EachBytesField(v, func(num protowire.Number, v []byte) error {
				if num == podFields.nodeName || num == podFields.tolerations {
					specs = protowire.AppendTag(specs, num, protowire.BytesType)
					specs = protowire.AppendBytes(specs, v)
				}
				return nil
			})
		case podFields.status:
			hasStatus = true
			return vt.EachBytesField(v, func(num protowire.Number, v []byte) error {
				if num != podFields.conditions {
					return nil
				}
				var typ, st []byte
				if err := vt.EachBytesField(v, func(num protowire.Number, v []byte) error {
					switch num {
					case podFields.condType:
						typ = v
					case podFields.condStatus:
						st = v
					}
					return nil
				}); err != nil {
					return err
				}
				if string(typ) != podrules.PodReady {
					return nil
				}
				var c []byte
				c = protowire.AppendTag(c, podFields.condType, protowire.BytesType)
				c = protowire.AppendBytes(c, typ)
				if len(st) > 0 {
					c = protowire.AppendTag(c, podFields.condStatus, protowire.BytesType)
					c = protowire.AppendBytes(c, st)
				}
				statuses = protowire.AppendTag(statuses, podFields.conditions, protowire.BytesType)
				statuses = protowire.AppendBytes(statuses, c)
				return nil
			})
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	buf := pc.buf[:0]
	if hasSpec {
		buf = append(append(buf, 1), specs...)
		spec = buf
	}
	if hasStatus {
		at := len(buf)
		buf = append(append(buf, 1), statuses...)
		status = buf[at:]
		if hasSpec {
			spec = buf[:at] // buf may have moved
		}
	}
	pc.buf, pc.specBuf, pc.statBuf = buf, specs, statuses
	return spec, status, nil
}

// shared holds decoded messages by the bytes they were decoded from, at
// most 2×max: when cur is full it becomes old, and a message found in
// old moves back to cur.
type shared[T any] struct {
	cur, old map[string]T
	max      int
}

func newShared[T any](max int) shared[T] {
	return shared[T]{cur: map[string]T{}, old: map[string]T{}, max: max}
}

// get returns the message decoded from key, decoding it with dec if none
// is held.
func (s *shared[T]) get(key []byte, dec func() (T, error)) (T, error) {
	if v, ok := s.cur[string(key)]; ok {
		return v, nil
	}
	v, ok := s.old[string(key)]
	if !ok {
		var err error
		if v, err = dec(); err != nil {
			return v, err
		}
	}
	if len(s.cur) >= s.max {
		s.cur, s.old = map[string]T{}, s.cur
	}
	s.cur[string(key)] = v
	return v, nil
}
