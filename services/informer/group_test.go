package informer_test

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/raftstore/raftstoretest"
	"github.com/podflow/podflow/services/informer"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/objects/objectstest"
)

// TestGroup: one Start runs every informer of the group and returns with
// all of them synced; cancelling ends them without an error.
func TestGroup(t *testing.T) {
	st := objects.FromKV(objectstest.New())
	ctx := context.Background()
	if _, err := st.Create(ctx, &corev1.Pod{Metadata: &corev1.ObjectMeta{Namespace: "ns", Name: "p"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Create(ctx, &corev1.Node{Metadata: &corev1.ObjectMeta{Name: "n"}}); err != nil {
		t.Fatal(err)
	}
	pods, err := informer.New[*corev1.Pod](st, "", informer.Handlers[*corev1.Pod]{})
	if err != nil {
		t.Fatal(err)
	}
	nodes, err := informer.New[*corev1.Node](st, "", informer.Handlers[*corev1.Node]{})
	if err != nil {
		t.Fatal(err)
	}
	var infs informer.Group
	infs.Add(pods, nodes)
	runCtx, stop := context.WithCancel(ctx)
	eg, egCtx := errgroup.WithContext(runCtx)
	if err := infs.Start(egCtx, eg); err != nil {
		t.Fatal(err)
	}
	if _, ok := pods.Get("ns", "p"); !ok {
		t.Error("Start returned before the pod informer synced")
	}
	if _, ok := nodes.Get("", "n"); !ok {
		t.Error("Start returned before the node informer synced")
	}
	stop()
	if err := eg.Wait(); err != nil {
		t.Errorf("informers ended with %v after cancel, want nil", err)
	}

	// A group that cannot sync gives up with ctx.
	var never informer.Group
	never.Add(unsynced{})
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	eg2, _ := errgroup.WithContext(short)
	if err := never.Start(short, eg2); err == nil {
		t.Error("Start of a group that never syncs returned nil")
	}
	_ = eg2.Wait()
}

type unsynced struct{}

func (unsynced) Run(ctx context.Context) error {
	<-ctx.Done()
	return ctx.Err()
}

func (unsynced) WaitForSync(ctx context.Context) error {
	<-ctx.Done()
	return ctx.Err()
}

// TestRelistAfterCompaction: when the history a watch still needs is
// compacted (ErrGone), the informer relists and replays the difference as
// handler calls, so no change is missed.
func TestRelistAfterCompaction(t *testing.T) {
	kv := objectstest.New()
	st := objects.FromKV(kv)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pod := func(name string) *corev1.Pod {
		return &corev1.Pod{Metadata: &corev1.ObjectMeta{Namespace: "ns", Name: name}}
	}
	if _, err := st.Create(ctx, pod("a")); err != nil {
		t.Fatal(err)
	}
	var lists atomic.Int32
	kv.Hook(func(method, _ string) error {
		if method == "List" {
			lists.Add(1)
		}
		return nil
	})
	added := make(chan string, 8)
	deleted := make(chan string, 8)
	release := make(chan struct{})
	inf, err := informer.New[*corev1.Pod](st, "", informer.Handlers[*corev1.Pod]{
		OnAdd: func(p *corev1.Pod) {
			added <- p.GetMetadata().GetName()
			if p.GetMetadata().GetName() == "b" {
				<-release // fall behind
			}
		},
		OnDelete: func(p *corev1.Pod) { deleted <- p.GetMetadata().GetName() },
	})
	if err != nil {
		t.Fatal(err)
	}
	var infs informer.Group
	infs.Add(inf)
	eg, egCtx := errgroup.WithContext(ctx)
	if err := infs.Start(egCtx, eg); err != nil {
		t.Fatal(err)
	}
	if got := <-added; got != "a" {
		t.Fatalf("first add %q, want a", got)
	}
	if _, err := st.Create(ctx, pod("b")); err != nil {
		t.Fatal(err)
	}
	if got := <-added; got != "b" {
		t.Fatalf("second add %q, want b", got)
	}
	if _, err := st.Create(ctx, pod("c")); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Delete(ctx, objects.Pods, "ns", "a", 0); err != nil {
		t.Fatal(err)
	}
	kv.Compact(kv.Revision())
	close(release)
	raftstoretest.WaitFor(t, 10*time.Second, "the relist", func() bool {
		var names []string
		for _, p := range inf.List("") {
			names = append(names, p.GetMetadata().GetName())
		}
		return slices.Equal(names, []string{"b", "c"}) && inf.Revision() == kv.Revision()
	})
	if n := lists.Load(); n != 2 {
		t.Errorf("%d lists, want 2 (the start and one relist)", n)
	}
	if got := <-added; got != "c" {
		t.Errorf("third add %q, want c", got)
	}
	if got := <-deleted; got != "a" {
		t.Errorf("delete %q, want a", got)
	}
	cancel()
	if err := eg.Wait(); err != nil {
		t.Error(err)
	}
}
