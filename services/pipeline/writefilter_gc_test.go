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
// collector's store writes of a dependent may delete it, mark it deleted
// or drop ownerReferences; creating one, adding or rewriting a reference,
// changing anything else or undoing a deletion is refused. Red without
// the collector's case in StoreWriteFilter (StoreWriteACL lets it write
// any pod, ReplicaSet or Job).
func TestGarbageCollectorConfinedToOwnerRefsAndDeletion(t *testing.T) {
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
	if pipeline.StoreWriteFilter(gc, objects.ReplicaSets.Key("default", "web")) == nil || pipeline.StoreWriteFilter(gc, objects.Jobs.Key("default", "j")) == nil {
		t.Fatal("no write check for the garbage collector's ReplicaSet and Job writes")
	}
	for _, k := range []objects.Kind{objects.ConfigMaps, objects.Deployments, objects.Secrets} {
		if pipeline.StoreWriteACL(gc, k.Key("default", "x")) {
			t.Errorf("the garbage collector may write %s", k.Resource)
		}
	}
}
