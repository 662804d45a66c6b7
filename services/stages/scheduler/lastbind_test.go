package scheduler

import (
	"testing"

	"github.com/podflow/podflow/services/stages/scheduler/cache"
	"github.com/podflow/podflow/services/stages/scheduler/framework"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/vt"
	"github.com/podflow/podflow/services/objects"
)

// TestLastBindCovers: the last bind's fact covers a record only when it
// is that very revision and the decision's view of the node was taken
// after the bind's (a higher generation) with no pod departed since;
// anything else is left to sawAllocated.
func TestLastBindCovers(t *testing.T) {
	at := func(rev string) *corev1.NodeAllocation {
		return &corev1.NodeAllocation{Metadata: &corev1.ObjectMeta{Name: "n1", ResourceVersion: rev}}
	}
	last := lastBind{rev: 7, covered: true, view: nodeView{departed: 3, generation: 10}}
	for _, tc := range []struct {
		name  string
		last  lastBind
		alloc *corev1.NodeAllocation
		view  nodeView
		want  bool
	}{
		{"a later view, nothing departed", last, at("7"), nodeView{3, 12}, true},
		{"another revision", last, at("8"), nodeView{3, 12}, false},
		{"no record", last, nil, nodeView{3, 12}, false},
		{"a pod departed since", last, at("7"), nodeView{4, 12}, false},
		{"the bind's own view (its pod not in it)", last, at("7"), nodeView{3, 10}, false},
		{"an earlier view (a decision before the bind's)", last, at("7"), nodeView{3, 9}, false},
		{"the bind did not see every pod", lastBind{rev: 7, view: last.view}, at("7"), nodeView{3, 12}, false},
		{"nothing known", lastBind{}, at(""), nodeView{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.last.covers(tc.alloc, tc.view); got != tc.want {
				t.Errorf("covers = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestLastBindGrownValue: the bytes grown from the last bind's record
// decode to the record with the pod added, as its full encoding does;
// from another record there are none.
func TestLastBindGrownValue(t *testing.T) {
	alloc := &corev1.NodeAllocation{Metadata: &corev1.ObjectMeta{Name: "n1", ResourceVersion: "7", Annotations: map[string]string{"a": "b"}}}
	for _, name := range []string{"a", "b"} {
		var err error
		if alloc, _, err = cache.MergeAllocation(alloc, "n1", mkPod(name, "100m", "64Mi", hostPort(8080+int32(len(alloc.GetPods())), "TCP", ""))); err != nil {
			t.Fatal(err)
		}
	}
	value, err := objects.Encode(alloc)
	if err != nil {
		t.Fatal(err)
	}
	alloc.Metadata.ResourceVersion = "7"
	last := lastBind{rev: 7, value: value}
	pod := mkPod("c", "250m", "1Gi", hostPort(9100, "TCP", ""))
	next, merged, err := cache.MergeAllocation(alloc, "n1", pod)
	if err != nil || !merged {
		t.Fatalf("MergeAllocation: merged %v, %v", merged, err)
	}
	grown, err := last.grownValue(alloc, next, framework.PodKey(pod))
	if err != nil || grown == nil {
		t.Fatalf("grownValue = %x, %v", grown, err)
	}
	var got corev1.NodeAllocation
	if err := vt.Unmarshal(grown, &got); err != nil {
		t.Fatal(err)
	}
	want := vt.Clone(next)
	want.Metadata.ResourceVersion = "" // not stored
	if !vt.Equal(&got, want) {
		t.Errorf("grown bytes decode to %v, want %v", &got, want)
	}
	if string(value) != string(last.value) || len(grown) <= len(value) {
		t.Error("grownValue changed the last bind's bytes")
	}
	other := vt.Clone(alloc)
	other.Metadata.ResourceVersion = "8"
	if b, err := last.grownValue(other, next, framework.PodKey(pod)); b != nil || err != nil {
		t.Errorf("grownValue from another record = %x, %v; want none", b, err)
	}
}
