package ttlafterfinished_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"golang.org/x/sync/errgroup"
	batch "k8s.io/api/batch/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/raftstore/raftstoretest"
	"github.com/podflow/podflow/services/controller"
	"github.com/podflow/podflow/services/manifest"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/pipeline"
	"github.com/podflow/podflow/services/stage"
	"github.com/podflow/podflow/services/stage/stagetest"
	"github.com/podflow/podflow/services/stages/ttlafterfinished"
)

func createJob(ctx context.Context, t *testing.T, st *objects.Store, name string, ttl *int32, finished batch.JobConditionType, at time.Time) {
	t.Helper()
	j := &batch.Job{TypeMeta: metav1.TypeMeta{APIVersion: "batch/v1", Kind: "Job"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID(uuid.NewString()), CreationTimestamp: metav1.Now()},
		Spec: batch.JobSpec{TTLSecondsAfterFinished: ttl, Template: v1.PodTemplateSpec{Spec: v1.PodSpec{
			RestartPolicy: v1.RestartPolicyNever, Containers: []v1.Container{{Name: "c", Image: "busybox"}}}}}}
	if finished != "" {
		j.Status.Conditions = []batch.JobCondition{{Type: finished, Status: v1.ConditionTrue, LastTransitionTime: metav1.NewTime(at)}}
	}
	m, err := manifest.FromKube(j)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Create(ctx, m.(objects.Object)); err != nil {
		t.Fatal(err)
	}
}

// alive reports whether Job name is stored and not being deleted; one
// being deleted must be so in the foreground (kube's TTL controller's
// propagation), which the garbage collector then finishes.
func alive(ctx context.Context, t *testing.T, st *objects.Store, name string) bool {
	t.Helper()
	o, err := st.GetKind(ctx, objects.Jobs, "ns", name)
	if errors.Is(err, raftstore.ErrNotFound) {
		return false
	}
	if err != nil {
		t.Fatal(err)
	}
	md := o.GetMetadata()
	if md.GetDeletionTimestamp() == nil {
		return true
	}
	if !slices.Contains(md.GetFinalizers(), metav1.FinalizerDeleteDependents) {
		t.Fatalf("Job %s deleted with finalizers %v, want %q (foreground)", name, md.GetFinalizers(), metav1.FinalizerDeleteDependents)
	}
	return false
}

// TestDeletesFinishedJobsAfterTheirTTL: a Complete Job with TTL 1s and a
// Failed one whose TTL ran out long ago are deleted in the foreground; a running Job with a
// TTL, a finished one without, and one whose TTL is an hour stay.
func TestDeletesFinishedJobsAfterTheirTTL(t *testing.T) {
	ctx := t.Context()
	st := objects.New(raftstoretest.MakeCluster(t, 1).Client(t))
	now := time.Now().Truncate(time.Second) // as a condition's time is stored
	createJob(ctx, t, st, "done-ttl1", ptr.To[int32](1), batch.JobComplete, now)
	createJob(ctx, t, st, "failed-expired", ptr.To[int32](0), batch.JobFailed, now.Add(-time.Hour))
	createJob(ctx, t, st, "running", ptr.To[int32](0), "", now)
	createJob(ctx, t, st, "done-no-ttl", nil, batch.JobComplete, now.Add(-time.Hour))
	createJob(ctx, t, st, "done-ttl-hour", ptr.To[int32](3600), batch.JobComplete, now)

	cfg := ttlafterfinished.DefaultConfig("r0")
	controller.FastConfig(&cfg.Controller)
	c, err := ttlafterfinished.New(stage.Env{Pub: &stagetest.Publisher{}, Store: st, Stage: pipeline.TTLAfterFinished, Replica: "r0"}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	g, gctx := errgroup.WithContext(cctx)
	t.Cleanup(func() { cancel(); _ = g.Wait() })
	if err := c.Start(gctx, g); err != nil {
		t.Fatal(err)
	}
	if err := c.Reconcile(gctx); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for alive(ctx, t, st, "done-ttl1") || alive(ctx, t, st, "failed-expired") {
		if time.Now().After(deadline) {
			t.Fatalf("expired Jobs not deleted: done-ttl1 %v, failed-expired %v", alive(ctx, t, st, "done-ttl1"), alive(ctx, t, st, "failed-expired"))
		}
		time.Sleep(50 * time.Millisecond)
	}
	if d := time.Since(now); d < time.Second {
		t.Errorf("done-ttl1 deleted %s after it finished, before its TTL of 1s", d)
	}
	for _, name := range []string{"running", "done-no-ttl", "done-ttl-hour"} {
		if !alive(ctx, t, st, name) {
			t.Errorf("Job %s was deleted", name)
		}
	}
}
