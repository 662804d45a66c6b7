package pipeline

import (
	"testing"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/podrules"
	"github.com/podflow/podflow/proto/vt"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// TestPodChecksSplitAgree: the pod checks that skip decoding a spec
// written as stored (splitPods) decide every write as decoding both pods
// whole does — the same error or none — for the writes the scheduler and
// the status stage make, for changes they may not make, and for encodings
// the cut leaves to the whole decode; and they do take the cut for a
// bind and a status report (else the store leader decodes specs again).
func TestPodChecksSplitAgree(t *testing.T) {
	enc := func(p *corev1.Pod) []byte {
		b, err := vt.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	grace := int64(30)
	zero := int64(0)
	base := &corev1.Pod{
		Metadata: &corev1.ObjectMeta{Namespace: "default", Name: "web", Uid: "u1", Labels: map[string]string{"app": "web"}},
		Spec: &corev1.PodSpec{
			Containers: []*corev1.Container{{Name: "app", Image: "podflow/http:1", Env: []*corev1.EnvVar{{Name: "A", Value: "1"}}}},
			Volumes:    []*corev1.Volume{{Name: "data"}},
		},
	}
	with := func(p *corev1.Pod, f func(*corev1.Pod)) *corev1.Pod {
		c := vt.Clone(p)
		f(c)
		return c
	}
	bound := with(base, func(p *corev1.Pod) {
		p.Spec.NodeName = "n1"
		p.Status = &corev1.PodStatus{Conditions: []*corev1.PodCondition{{Type: podrules.PodScheduled, Status: "True"}}}
	})
	running := with(bound, func(p *corev1.Pod) {
		p.Status.Phase = "Running"
		p.Metadata.Annotations = map[string]string{podrules.AnnotationStatusSeq: "3"}
	})
	terminating := with(running, func(p *corev1.Pod) {
		p.Metadata.DeletionTimestamp, p.Metadata.DeletionGracePeriodSeconds = timestamppb.Now(), &grace
	})
	// raw appends a field to an encoded pod (or spec).
	raw := func(b []byte, num protowire.Number, v []byte) []byte {
		b = append([]byte(nil), b...)
		b = protowire.AppendTag(b, num, protowire.BytesType)
		return protowire.AppendBytes(b, v)
	}
	specOf := func(p *corev1.Pod) []byte { return enc(&corev1.Pod{Spec: p.Spec}) }
	// withEntry is p with an annotation entry of the given raw fields
	// appended to its metadata.
	withEntry := func(p *corev1.Pod, fields ...[]byte) []byte {
		meta, err := vt.Marshal(p.Metadata)
		if err != nil {
			t.Fatal(err)
		}
		var e []byte
		for i := 0; i+1 < len(fields); i += 2 {
			e = raw(e, protowire.Number(fields[i][0]), fields[i+1])
		}
		return raw(enc(with(p, func(p *corev1.Pod) { p.Metadata = nil })), podMetadata, raw(meta, metaAnnotations, e))
	}
	seq := []byte(podrules.AnnotationStatusSeq)
	noSpec := func(p *corev1.Pod) []byte { return enc(&corev1.Pod{Metadata: p.Metadata, Status: p.Status}) }

	type change struct {
		name     string
		old, new []byte
		split    bool // the cut must be taken
	}
	sched := []change{
		{"bind", enc(base), enc(bound), true},
		{"bind, same node again", enc(bound), enc(bound), true},
		{"rebind", enc(bound), enc(with(bound, func(p *corev1.Pod) { p.Spec.NodeName = "n2" })), true},
		{"unbind", enc(bound), enc(with(bound, func(p *corev1.Pod) { p.Spec.NodeName = "" })), true},
		{"bind and change the image", enc(base), enc(with(bound, func(p *corev1.Pod) { p.Spec.Containers[0].Image = "evil" })), false},
		{"bind and host PID", enc(base), enc(with(bound, func(p *corev1.Pod) { p.Spec.HostPid = true })), false},
		{"bind and a label", enc(base), enc(with(bound, func(p *corev1.Pod) { p.Metadata.Labels["x"] = "y" })), true},
		{"nominate", enc(base), enc(with(base, func(p *corev1.Pod) { p.Status = &corev1.PodStatus{NominatedNodeName: "n3"} })), true},
		{"phase", enc(bound), enc(with(bound, func(p *corev1.Pod) { p.Status.Phase = "Running" })), true},
		{"mark a victim", enc(running), enc(terminating), true},
		{"change a terminating pod's labels", enc(terminating), enc(with(terminating, func(p *corev1.Pod) { p.Metadata.Labels["x"] = "y" })), true},
		{"drop the spec", enc(bound), noSpec(bound), false},
		{"bind with an invalid node name", enc(base), raw(noSpec(base), podSpec, raw(specOf(base)[2:], podSpecNodeName, []byte{0xff})), false},
		{"node name twice", enc(bound), raw(enc(base), podSpec, raw(nil, podSpecNodeName, []byte("n1"))), false},
		{"a second spec field", enc(base), raw(enc(base), podSpec, raw(nil, 7, []byte("x"))), false},
		{"an unknown top-level field", enc(base), raw(enc(bound), 9, []byte("x")), false},
		{"a node name with another wire type", enc(base), raw(noSpec(base), podSpec, protowire.AppendVarint(protowire.AppendTag(specOf(base)[2:], podSpecNodeName, protowire.VarintType), 1)), false},
		{"torn", enc(base), enc(bound)[:len(enc(bound))-3], false},
	}
	status := []change{
		{"running", enc(bound), enc(running), true},
		{"same", enc(running), enc(running), true},
		{"change the image", enc(bound), enc(with(running, func(p *corev1.Pod) { p.Spec.Containers[0].Image = "evil" })), false},
		{"unbind", enc(bound), enc(with(running, func(p *corev1.Pod) { p.Spec.NodeName = "" })), false},
		{"a label", enc(bound), enc(with(running, func(p *corev1.Pod) { p.Metadata.Labels["x"] = "y" })), true},
		{"another annotation", enc(bound), enc(with(running, func(p *corev1.Pod) { p.Metadata.Annotations["x"] = "y" })), true},
		{"grace 0 of a terminating pod", enc(terminating), enc(with(terminating, func(p *corev1.Pod) { p.Metadata.DeletionGracePeriodSeconds = &zero })), true},
		{"grace 0 of a running pod", enc(running), enc(with(running, func(p *corev1.Pod) { p.Metadata.DeletionGracePeriodSeconds = &zero })), true},
		{"a status with invalid UTF-8", enc(bound), raw(enc(with(bound, func(p *corev1.Pod) { p.Status = nil })), podStatus, raw(nil, 2, []byte{0xff})), true},
		{"a status field twice", enc(bound), raw(enc(running), podStatus, raw(nil, 2, []byte("Failed"))), false},
		{"drop the metadata", enc(bound), enc(with(running, func(p *corev1.Pod) { p.Metadata = nil })), true},
		{"the seq annotation twice", enc(running), withEntry(running, []byte{1}, seq, []byte{2}, []byte("4")), true},
		{"the seq annotation not UTF-8", enc(running), withEntry(running, []byte{1}, seq, []byte{2}, []byte{0xff}), true},
		{"the seq annotation with another field", enc(running), withEntry(running, []byte{1}, seq, []byte{3}, []byte("x")), true},
		{"an entry without a key", enc(bound), withEntry(running, []byte{2}, []byte("v")), true},
		{"the seq annotation dropped", enc(running), enc(with(running, func(p *corev1.Pod) { p.Metadata.Annotations = nil })), true},
		{"torn", enc(bound), enc(running)[:len(enc(running))-3], false},
	}
	whole := func(check func(was, is *corev1.Pod) error) func(old, new []byte) error {
		return func(old, new []byte) error {
			var was, is corev1.Pod
			if err := vt.Unmarshal(old, &was); err != nil {
				return err
			}
			if err := vt.Unmarshal(new, &is); err != nil {
				return err
			}
			return check(&was, &is)
		}
	}
	for _, tc := range []struct {
		name     string
		check    func(old, new []byte) error
		whole    func(old, new []byte) error
		nodeName bool
		changes  []change
	}{
		{"scheduler", schedulerPodWrite, whole(schedulerPodChange), true, sched},
		{"status", statusPodWrite, whole(statusPodChange), false, status},
	} {
		for _, c := range tc.changes {
			t.Run(tc.name+"/"+c.name, func(t *testing.T) {
				var was, is podParts
				if split := splitPods(c.old, c.new, tc.nodeName, &was, &is); split != c.split {
					t.Errorf("cut taken: %v, want %v", split, c.split)
				}
				got, want := tc.check(c.old, c.new), tc.whole(c.old, c.new)
				if (got == nil) != (want == nil) {
					t.Fatalf("check: %v; decoding whole: %v", got, want)
				}
				if got != nil && want != nil && !sameDecision(got.Error(), want.Error()) {
					t.Errorf("check: %v; decoding whole: %v", got, want)
				}
				t.Logf("%v", got)
			})
		}
	}
}

// sameDecision compares two refusals' texts, a decode error's prefix
// ("stored pod: ", "written pod: ") aside.
func sameDecision(a, b string) bool {
	for _, p := range []string{"stored pod: ", "written pod: "} {
		if len(a) > len(p) && a[:len(p)] == p {
			a = a[len(p):]
		}
	}
	return a == b
}
