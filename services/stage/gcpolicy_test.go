package stage_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/objects/objectstest"
	"github.com/podflow/podflow/services/stage"
)

// TestGCFinalizers: the finalizers a DELETE leaves, as kube-apiserver's
// deletionFinalizersForGarbageCollection computes them — orphanDependents
// over propagationPolicy over the finalizers already there over the
// kind's default.
func TestGCFinalizers(t *testing.T) {
	str := func(s string) *string { return &s }
	yes, no := true, false
	for _, tc := range []struct {
		name    string
		def     stage.GCPolicy
		fins    []string
		opts    stage.DeleteOptions
		want    []string
		changed bool
	}{
		{name: "background by default", want: nil},
		{name: "orphan", opts: stage.DeleteOptions{PropagationPolicy: str("Orphan")}, want: []string{"orphan"}, changed: true},
		{name: "foreground", opts: stage.DeleteOptions{PropagationPolicy: str("Foreground")}, want: []string{"foregroundDeletion"}, changed: true},
		{name: "background", opts: stage.DeleteOptions{PropagationPolicy: str("Background")}, want: nil},
		{name: "others kept", fins: []string{"example.com/x"}, opts: stage.DeleteOptions{PropagationPolicy: str("Orphan")},
			want: []string{"example.com/x", "orphan"}, changed: true},
		{name: "orphanDependents true", opts: stage.DeleteOptions{OrphanDependents: &yes}, want: []string{"orphan"}, changed: true},
		{name: "orphanDependents wins over the policy", opts: stage.DeleteOptions{OrphanDependents: &no, PropagationPolicy: str("Foreground")}, want: nil},
		{name: "orphanDependents false removes orphan", fins: []string{"orphan"}, opts: stage.DeleteOptions{OrphanDependents: &no}, want: []string{}, changed: true},
		{name: "background removes foreground", fins: []string{"foregroundDeletion", "a/b"}, opts: stage.DeleteOptions{PropagationPolicy: str("Background")},
			want: []string{"a/b"}, changed: true},
		{name: "foreground replaces orphan", fins: []string{"orphan"}, opts: stage.DeleteOptions{PropagationPolicy: str("Foreground")},
			want: []string{"foregroundDeletion"}, changed: true},
		{name: "finalizer there decides without options", fins: []string{"foregroundDeletion"}, def: stage.GCOrphanDependents, want: []string{"foregroundDeletion"}},
		{name: "kind default orphan", def: stage.GCOrphanDependents, want: []string{"orphan"}, changed: true},
		{name: "kind default orphan, asked background", def: stage.GCOrphanDependents, opts: stage.DeleteOptions{PropagationPolicy: str("Background")}, want: nil},
		{name: "unsupported kind", def: stage.GCUnsupported, opts: stage.DeleteOptions{PropagationPolicy: str("Orphan")}, want: nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			changed, got := stage.GCFinalizers(tc.def, tc.fins, tc.opts)
			if changed != tc.changed || !slices.Equal(got, tc.want) && len(got)+len(tc.want) > 0 {
				t.Fatalf("GCFinalizers(%v, %v) = %v, %v; want %v, %v", tc.def, tc.fins, changed, got, tc.changed, tc.want)
			}
		})
	}
}

// TestDefaultGCPolicy: ReplicationController v1 and Job batch/v1 orphan
// by default, Events take no finalizers, the rest is background — as
// kube-apiserver's strategies say for those versions.
func TestDefaultGCPolicy(t *testing.T) {
	for k, want := range map[*objects.Kind]stage.GCPolicy{
		&objects.ReplicationControllers: stage.GCOrphanDependents,
		&objects.Jobs:                   stage.GCOrphanDependents,
		&objects.Events:                 stage.GCUnsupported,
		&objects.ReplicaSets:            stage.GCDeleteDependents,
		&objects.Deployments:            stage.GCDeleteDependents,
		&objects.CronJobs:               stage.GCDeleteDependents,
		&objects.ConfigMaps:             stage.GCDeleteDependents,
	} {
		if got := stage.DefaultGCPolicy(*k); got != want {
			t.Errorf("%s: %v, want %v", k.Name, got, want)
		}
	}
}

// TestDeleteObjectWithPolicy: a DELETE with propagationPolicy Orphan or
// Foreground only marks the object (deletionTimestamp, the finalizer, the
// generation bumped); Background deletes it; a second DELETE of the
// marked object may switch the finalizer and keeps the timestamp.
func TestDeleteObjectWithPolicy(t *testing.T) {
	ctx := context.Background()
	st := objects.FromKV(objectstest.New())
	rs := objects.ReplicaSets.New()
	rsm := objects.Meta(rs)
	rsm.Namespace, rsm.Name, rsm.Generation = "default", "web", 3
	if _, err := st.Create(ctx, rs); err != nil {
		t.Fatal(err)
	}
	orphan, fg, bg := "Orphan", "Foreground", "Background"
	out, gone, err := stage.DeleteObjectWith(ctx, st, objects.ReplicaSets, rs, &stage.DeleteOptions{PropagationPolicy: &orphan})
	if err != nil || gone {
		t.Fatalf("orphan: gone %v, %v", gone, err)
	}
	md := out.GetMetadata()
	if md.GetDeletionTimestamp() == nil || !slices.Equal(md.GetFinalizers(), []string{"orphan"}) || md.GetGeneration() != 4 || md.GetDeletionGracePeriodSeconds() != 0 {
		t.Fatalf("orphan: marked %v", md)
	}
	ts := md.GetDeletionTimestamp().AsTime()
	stored, err := st.GetKind(ctx, objects.ReplicaSets, "default", "web")
	if err != nil {
		t.Fatal(err)
	}
	out, gone, err = stage.DeleteObjectWith(ctx, st, objects.ReplicaSets, stored, &stage.DeleteOptions{PropagationPolicy: &fg})
	if err != nil || gone {
		t.Fatalf("foreground: gone %v, %v", gone, err)
	}
	if md := out.GetMetadata(); !slices.Equal(md.GetFinalizers(), []string{"foregroundDeletion"}) || !md.GetDeletionTimestamp().AsTime().Equal(ts) || md.GetGeneration() != 4 {
		t.Fatalf("foreground after orphan: %v", md)
	}
	stored, _ = st.GetKind(ctx, objects.ReplicaSets, "default", "web")
	if _, gone, err = stage.DeleteObjectWith(ctx, st, objects.ReplicaSets, stored, &stage.DeleteOptions{PropagationPolicy: &bg}); err != nil || !gone {
		t.Fatalf("background: gone %v, %v", gone, err)
	}
	if _, err := st.GetKind(ctx, objects.ReplicaSets, "default", "web"); err == nil || !isNotFound(err) {
		t.Fatalf("after background: %v", err)
	}
	// A kind whose default is orphan is only marked by a DELETE naming no policy.
	rc := objects.ReplicationControllers.New()
	objects.Meta(rc).Namespace, objects.Meta(rc).Name = "default", "legacy"
	if _, err := st.Create(ctx, rc); err != nil {
		t.Fatal(err)
	}
	if out, gone, err := stage.DeleteObjectWith(ctx, st, objects.ReplicationControllers, rc, &stage.DeleteOptions{}); err != nil || gone ||
		!slices.Equal(out.GetMetadata().GetFinalizers(), []string{"orphan"}) {
		t.Fatalf("rc default: %v %v %v", out, gone, err)
	}
	// DeleteObject (no options) leaves finalizers as they are.
	cm := &corev1.ConfigMap{Metadata: &corev1.ObjectMeta{Namespace: "default", Name: "c"}}
	if _, err := st.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	if _, gone, err := stage.DeleteObject(ctx, st, objects.ConfigMaps, cm); err != nil || !gone {
		t.Fatalf("configmap: %v %v", gone, err)
	}
}

func isNotFound(err error) bool { return errors.Is(err, raftstore.ErrNotFound) }
