package nodeagent_test

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/podflow/podflow/nodeagent"
	corev1 "github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/vt/vttest"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// nodeStatusChangedByClones is NodeStatusChanged as first written: clone
// both statuses, drop what is not compared, EqualVT. The reference the
// allocation-free one is checked against.
func nodeStatusChangedByClones(old, next *corev1.NodeStatus) bool {
	if old == nil || next == nil {
		return old != next
	}
	if len(old.Conditions) != len(next.Conditions) {
		return true
	}
	byType := func(cs []*corev1.NodeCondition) []*corev1.NodeCondition {
		out := make([]*corev1.NodeCondition, len(cs))
		for i, c := range cs {
			out[i] = c.CloneVT()
			out[i].LastHeartbeatTime = nil
		}
		slices.SortStableFunc(out, func(x, y *corev1.NodeCondition) int { return strings.Compare(x.GetType(), y.GetType()) })
		return out
	}
	oc, nc := byType(old.Conditions), byType(next.Conditions)
	for i := range oc {
		if !oc[i].EqualVT(nc[i]) {
			return true
		}
	}
	o, n := old.CloneVT(), next.CloneVT()
	o.Conditions, n.Conditions = nil, nil
	return !o.EqualVT(n)
}

// tinyScalars draws every scalar from two values, so that random statuses
// often agree field by field.
func tinyScalars(r *rand.Rand, fd protoreflect.FieldDescriptor) protoreflect.Value {
	switch fd.Kind() {
	case protoreflect.StringKind:
		return protoreflect.ValueOfString([]string{"a", "b"}[r.IntN(2)])
	case protoreflect.Int32Kind:
		return protoreflect.ValueOfInt32(int32(1 + r.IntN(2)))
	case protoreflect.Int64Kind:
		return protoreflect.ValueOfInt64(int64(1 + r.IntN(2)))
	case protoreflect.BoolKind:
		return protoreflect.ValueOfBool(true)
	}
	panic("tinyScalars: no value for " + fd.Kind().String())
}

// TestNodeStatusChangedAgreesWithClones checks NodeStatusChanged against
// the clone-and-compare reference on random pairs: a status and a copy
// with its conditions reordered, their heartbeat times moved and some
// fields drawn again.
func TestNodeStatusChangedAgreesWithClones(t *testing.T) {
	r := rand.New(rand.NewPCG(41, 2))
	f := vttest.Filler{
		Scalar:  tinyScalars,
		Keep:    func(r *rand.Rand, _ protoreflect.Message, _ protoreflect.FieldDescriptor) bool { return r.IntN(3) > 0 },
		Entries: func(r *rand.Rand) int { return r.IntN(3) },
	}
	var changed, same int
	for i := range 20000 {
		old := &corev1.NodeStatus{}
		f.Fill(r, old.ProtoReflect(), 3)
		next := old.CloneVT()
		if r.IntN(2) == 0 {
			r.Shuffle(len(next.Conditions), func(i, j int) { next.Conditions[i], next.Conditions[j] = next.Conditions[j], next.Conditions[i] })
		}
		for _, c := range next.Conditions {
			if c != nil && r.IntN(2) == 0 {
				c.LastHeartbeatTime = nil
				if r.IntN(2) == 0 {
					f.Fill(r, c.ProtoReflect().Mutable(c.ProtoReflect().Descriptor().Fields().ByName("last_heartbeat_time")).Message(), 1)
				}
			}
		}
		if r.IntN(2) == 0 { // draw one field again, at the top or in a condition
			m := next.ProtoReflect()
			if len(next.Conditions) > 0 && r.IntN(2) == 0 {
				m = next.Conditions[r.IntN(len(next.Conditions))].ProtoReflect()
			}
			fd := m.Descriptor().Fields().Get(r.IntN(m.Descriptor().Fields().Len()))
			m.Clear(fd)
			one := vttest.Filler{Scalar: tinyScalars, Entries: f.Entries,
				Keep: func(r *rand.Rand, mm protoreflect.Message, g protoreflect.FieldDescriptor) bool {
					return mm.Descriptor() != m.Descriptor() || g == fd
				}}
			one.Fill(r, m, 3)
		}
		got, want := nodeagent.NodeStatusChanged(old, next), nodeStatusChangedByClones(old, next)
		if got != want {
			t.Fatalf("pair %d: NodeStatusChanged = %v, the reference says %v\nold:  %v\nnext: %v", i, got, want, old, next)
		}
		if want {
			changed++
		} else {
			same++
		}
	}
	if changed < 1000 || same < 1000 {
		t.Fatalf("the pairs do not cover both answers: %d changed, %d same", changed, same)
	}
}

// TestNodeStatusChangedSeesEveryField sets each NodeStatus field but the
// conditions in turn: each is a change. It fails when NodeStatus gains a
// field NodeStatusChanged does not compare.
func TestNodeStatusChangedSeesEveryField(t *testing.T) {
	r := rand.New(rand.NewPCG(41, 3))
	fields := (&corev1.NodeStatus{}).ProtoReflect().Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		if fd.Name() == "conditions" {
			continue
		}
		t.Run(string(fd.Name()), func(t *testing.T) {
			next := &corev1.NodeStatus{}
			f := vttest.Filler{Scalar: tinyScalars, Entries: func(*rand.Rand) int { return 1 },
				Keep: func(_ *rand.Rand, m protoreflect.Message, g protoreflect.FieldDescriptor) bool {
					return m.Descriptor() != fields.Get(0).ContainingMessage() || g == fd
				}}
			f.Fill(r, next.ProtoReflect(), 3)
			if !next.ProtoReflect().Has(fd) {
				t.Fatalf("the filler left %s unset", fd.Name())
			}
			if !nodeagent.NodeStatusChanged(&corev1.NodeStatus{}, next) {
				t.Fatalf("setting %s is no change: %v", fd.Name(), next)
			}
		})
	}
}
