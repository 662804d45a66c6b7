package pipeline_test

import (
	"testing"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/vt"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/pipeline"
)

// TestGarbageCollectorConfinedToOwnerRefsAndDeletion: the garbage
// collector's store writes of an object may delete a dependent or an
// object marked for deletion, mark it deleted, drop ownerReferences and
// add or remove the orphan and foregroundDeletion finalizers; creating
// one, adding or rewriting a reference, removing another finalizer,
// deleting an object that is neither, changing anything else or undoing a
// deletion is refused. Red without the collector's case in
// StoreWriteFilter (StoreWriteACL lets it write every kind).
func TestGarbageCollectorConfinedToOwnerRefsAndDeletion(t *testing.T) {
	t.Parallel()
	gc := pipeline.StageRole(pipeline.GarbageCollector)
	refA := &corev1.OwnerReference{ApiVersion: "v1", Kind: "ConfigMap", Name: "a", Uid: "ua"}
	refB := &corev1.OwnerReference{ApiVersion: "v1", Kind: "ConfigMap", Name: "b", Uid: "ub"}
	stored := storedPod()
	stored.Metadata.OwnerReferences = []*corev1.OwnerReference{refA, refB}
	old := encodePod(t, stored)
	check := pipeline.StoreWriteFilter(gc, objects.Pods.Key("default", "web"))
	if check == nil {
		t.Fatal("no write check for the garbage collector's pod writes")
	}
	marked := vt.Clone(stored)
	marked.Metadata.DeletionTimestamp = timestamppb.Now()
	for _, tc := range []struct {
		name    string
		old     []byte
		change  func(p *corev1.Pod)
		deleted bool
		ok      bool
	}{
		{name: "delete", old: old, deleted: true, ok: true},
		{name: "delete an object that is no dependent", old: encodePod(t, storedPod()), deleted: true},
		{name: "delete an object marked for deletion", old: encodePod(t, &corev1.Pod{Metadata: &corev1.ObjectMeta{Name: "x", DeletionTimestamp: timestamppb.Now()}}), deleted: true, ok: true},
		{name: "remove the orphan finalizer", old: encodePod(t, withFinalizers(marked, "orphan", "example.com/keep")),
			change: func(p *corev1.Pod) {
				p.Metadata.DeletionTimestamp, p.Metadata.Finalizers = marked.Metadata.DeletionTimestamp, []string{"example.com/keep"}
			}, ok: true},
		{name: "remove another finalizer", old: encodePod(t, withFinalizers(marked, "orphan", "example.com/keep")),
			change: func(p *corev1.Pod) {
				p.Metadata.DeletionTimestamp, p.Metadata.Finalizers = marked.Metadata.DeletionTimestamp, []string{"orphan"}
			}},
		{name: "mark deleted in the foreground, generation bumped", old: old, change: func(p *corev1.Pod) {
			g := int64(0)
			p.Metadata.DeletionTimestamp, p.Metadata.DeletionGracePeriodSeconds = timestamppb.Now(), &g
			p.Metadata.Finalizers, p.Metadata.Generation = []string{"foregroundDeletion"}, 1
		}, ok: true},
		{name: "bump the generation without marking", old: old, change: func(p *corev1.Pod) { p.Metadata.Generation = 7 }},
		{name: "drop a reference", old: old, change: func(p *corev1.Pod) { p.Metadata.OwnerReferences = p.Metadata.OwnerReferences[1:] }, ok: true},
		{name: "mark deleted", old: old, change: func(p *corev1.Pod) {
			g := int64(30)
			p.Metadata.DeletionTimestamp, p.Metadata.DeletionGracePeriodSeconds = timestamppb.Now(), &g
		}, ok: true},
		{name: "create", change: func(*corev1.Pod) {}},
		{name: "add a reference", old: old, change: func(p *corev1.Pod) {
			p.Metadata.OwnerReferences = append(p.Metadata.OwnerReferences, &corev1.OwnerReference{Kind: "ConfigMap", Name: "c", Uid: "uc"})
		}},
		{name: "rewrite a reference", old: old, change: func(p *corev1.Pod) { p.Metadata.OwnerReferences[0].Controller = true }},
		{name: "make a reference blocking", old: old, change: func(p *corev1.Pod) { p.Metadata.OwnerReferences[0].BlockOwnerDeletion = true }},
		{name: "make a reference non-blocking", old: encodePod(t, withBlocking(stored)), change: func(p *corev1.Pod) {}, ok: true},
		{name: "change the image", old: old, change: func(p *corev1.Pod) { p.Spec.Containers[0].Image = "evil" }},
		{name: "change a label", old: old, change: func(p *corev1.Pod) { p.Metadata.Labels["app"] = "other" }},
		{name: "undo a deletion", old: encodePod(t, marked), change: func(p *corev1.Pod) { p.Metadata.DeletionTimestamp = nil }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var next []byte
			if !tc.deleted {
				p := vt.Clone(stored)
				tc.change(p)
				next = encodePod(t, p)
			}
			err := check(tc.old, next)
			if tc.ok && err != nil {
				t.Fatalf("refused: %v", err)
			}
			if !tc.ok && err == nil {
				t.Fatal("allowed")
			}
		})
	}
	for _, key := range []string{objects.ReplicaSets.Key("default", "web"), objects.ConfigMaps.Key("default", "c"),
		objects.Secrets.Key("default", "s"), objects.PersistentVolumes.Key("", "pv"), "/registry/example.com/widgets/default/w"} {
		if !pipeline.StoreWriteACL(gc, key) {
			t.Errorf("the garbage collector may not write %s", key)
		}
		if pipeline.StoreWriteFilter(gc, key) == nil {
			t.Errorf("no write check for the garbage collector's writes of %s", key)
		}
	}
	for _, key := range []string{pipeline.RequestIDPrefix + "x", pipeline.PodCIDRPrefix + "10.0.0.0/24", "/elsewhere/x"} {
		if pipeline.StoreWriteACL(gc, key) {
			t.Errorf("the garbage collector may write %s", key)
		}
	}
	// A custom resource decodes as Unstructured: a change of its content
	// is refused, dropping a reference is not.
	cr := &corev1.Unstructured{Metadata: &corev1.ObjectMeta{Namespace: "default", Name: "w", OwnerReferences: []*corev1.OwnerReference{refA}},
		ApiVersion: "example.com/v1", Kind: "Widget", Content: []byte(`{"spec":{"size":1}}`)}
	crCheck := pipeline.StoreWriteFilter(gc, "/registry/example.com/widgets/default/w")
	was, _ := objects.Encode(cr)
	evil := vt.Clone(cr)
	evil.Content = []byte(`{"spec":{"size":100}}`)
	dropped := vt.Clone(cr)
	dropped.Metadata.OwnerReferences = nil
	for _, tc := range []struct {
		name string
		next *corev1.Unstructured
		ok   bool
	}{{"change the content", evil, false}, {"drop a reference", dropped, true}} {
		b, _ := objects.Encode(tc.next)
		if err := crCheck(was, b); (err == nil) != tc.ok {
			t.Errorf("custom resource, %s: %v", tc.name, err)
		}
	}
}

func withFinalizers(p *corev1.Pod, fins ...string) *corev1.Pod {
	p = vt.Clone(p)
	p.Metadata.Finalizers = fins
	return p
}

func withBlocking(p *corev1.Pod) *corev1.Pod {
	p = vt.Clone(p)
	p.Metadata.OwnerReferences[0].BlockOwnerDeletion = true
	return p
}
