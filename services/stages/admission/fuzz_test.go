package admission

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/podflow/podflow/proto/corev1"
)

// FuzzAdmitIdempotent checks, for arbitrary pods, that Admit never panics,
// never modifies its input, and that admitting its output changes nothing
// and lists no mutations. The seeds run with every `go test`.
func FuzzAdmitIdempotent(f *testing.F) {
	typicalPod, s := typical()
	seeds := []*corev1.Pod{typicalPod, pod(), {}, {Spec: &corev1.PodSpec{}}}
	for _, p := range seeds {
		b, err := proto.Marshal(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		p := &corev1.Pod{}
		if err := proto.Unmarshal(b, p); err != nil {
			t.Skip()
		}
		before := proto.Clone(p)
		first := Admit(p, s)
		if !proto.Equal(before, p) {
			t.Fatal("Admit modified its input")
		}
		second := Admit(first.Pod, s)
		if !proto.Equal(first.Pod, second.Pod) {
			t.Fatalf("Admit(Admit(p)) != Admit(p)\nfirst  %v\nsecond %v", first.Pod, second.Pod)
		}
		if len(second.Mutations) != 0 {
			t.Fatalf("second pass mutated: %q", second.Mutations)
		}
		if (first.Status == nil) != (second.Status == nil) {
			t.Fatalf("verdict changed: %v then %v", first.Status, second.Status)
		}
	})
}
