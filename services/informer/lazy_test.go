package informer_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/raftstore/raftstoretest"
	"github.com/podflow/podflow/services/informer"
	"github.com/podflow/podflow/services/objects"
)

// TestLazyRunsOnlyWhileWanted: against a real store, a pod informer
// wanted only while a Service exists holds no watch while there is none
// (the store's watch count and the Lazy's state say so); once a Service
// appears, WaitForSync returns only with the pods written before listed;
// once the last Service has been gone for the idle time, the informer is
// stopped and emptied; and it starts again, from a fresh list, with the
// next Service.
func TestLazyRunsOnlyWhileWanted(t *testing.T) {
	cl := raftstoretest.MakeCluster(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	st := objects.New(cl.Client(t))
	watches := func() uint64 { return cl.Node(0).Stats().WatchRequests }
	var lazy *informer.Lazy
	poke := func(*corev1.Service) { lazy.Poke() }
	svcs, err := informer.New[*corev1.Service](st, "", informer.Handlers[*corev1.Service]{OnAdd: poke, OnDelete: poke})
	if err != nil {
		t.Fatal(err)
	}
	pods, err := informer.New[*corev1.Pod](st, "", informer.Handlers[*corev1.Pod]{})
	if err != nil {
		t.Fatal(err)
	}
	const idle = 50 * time.Millisecond
	if lazy, err = informer.NewLazy(pods, func() bool { return svcs.Len() > 0 }, idle, svcs); err != nil {
		t.Fatal(err)
	}
	pod := func(name string) {
		t.Helper()
		if _, err := st.Create(ctx, &corev1.Pod{Metadata: &corev1.ObjectMeta{Namespace: "a", Name: name}}); err != nil {
			t.Fatal(err)
		}
	}
	pod("p1")
	pod("p2")

	runCtx, stop := context.WithCancel(ctx)
	var g errgroup.Group
	t.Cleanup(func() {
		stop()
		if err := g.Wait(); err != nil {
			t.Error(err)
		}
	})
	var infs informer.Group
	infs.Add(svcs, lazy)
	if err := infs.Start(runCtx, &g); err != nil {
		t.Fatal(err)
	}
	if lazy.Running() || lazy.Starts() != 0 || pods.Len() != 0 {
		t.Fatalf("with no Service: running %v, started %d times, %d pods cached", lazy.Running(), lazy.Starts(), pods.Len())
	}
	// A Service written once the Services' list is in is seen through
	// their watch, whose handler pokes the Lazy: its Run starts the
	// informer, with no WaitForSync asking. The cache holds the Service
	// before the handler runs, and the poke is served by Run's loop, so
	// the start follows the Service's arrival rather than coinciding.
	svc := &corev1.Service{Metadata: &corev1.ObjectMeta{Namespace: "b", Name: "s"}}
	if _, err := st.Create(ctx, &corev1.Service{Metadata: &corev1.ObjectMeta{Namespace: "z", Name: "probe"}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the probe Service seen", func() bool { return svcs.Len() == 1 })
	waitFor(t, "the pod informer started by the poke", func() bool { return lazy.Starts() > 0 })
	if lazy.Starts() != 1 {
		t.Fatalf("with a Service the pod informer started %d times, want 1", lazy.Starts())
	}
	if err := lazy.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
	if got := names(pods.List("")); !slices.Equal(got, []string{"a/p1", "a/p2"}) {
		t.Fatalf("pods once synced = %v", got)
	}
	pod("p0") // seen: the pods' watch runs
	waitFor(t, "p0 seen", func() bool { _, ok := pods.Get("a", "p0"); return ok })
	if _, err := st.Delete(ctx, objects.Services, "z", "probe", 0); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the pod informer stopped and emptied", func() bool { return !lazy.Running() && pods.Len() == 0 })
	if w := watches(); w != 2 {
		t.Errorf("%d watches started, want 2 (the Services', the pods' once)", w)
	}

	// No Service: pods written now are watched by no one.
	base := watches()
	pod("p3")
	if err := lazy.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
	if lazy.Running() || pods.Len() != 0 || watches() != base {
		t.Fatalf("with no Service: running %v, %d pods cached, %d watches started", lazy.Running(), pods.Len(), watches()-base)
	}

	// A Service appears: a sync that waits for the Lazy sees every pod.
	if _, err := st.Create(ctx, svc); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the Service seen", func() bool { return svcs.Len() == 1 })
	if err := lazy.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
	if got := names(pods.List("")); !slices.Equal(got, []string{"a/p0", "a/p1", "a/p2", "a/p3"}) {
		t.Fatalf("pods once synced again = %v", got)
	}
	if lazy.Starts() != 2 || !lazy.Running() {
		t.Fatalf("started %d times, running %v; want 2, true", lazy.Starts(), lazy.Running())
	}
	// While wanted it follows the watch and is never stopped.
	pod("p4")
	waitFor(t, "p4 seen", func() bool { _, ok := pods.Get("a", "p4"); return ok })
	time.Sleep(4 * idle)
	if !lazy.Running() || lazy.Starts() != 2 {
		t.Fatalf("wanted: running %v, started %d times", lazy.Running(), lazy.Starts())
	}
}

// TestLazyBeforeItsFirstList: WaitForSync called before the members Run
// waits for have synced waits for them, then for the informer.
func TestLazyBeforeItsFirstList(t *testing.T) {
	st, ctx := realStore(t)
	if _, err := st.Create(ctx, &corev1.Service{Metadata: &corev1.ObjectMeta{Namespace: "b", Name: "s"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Create(ctx, &corev1.Pod{Metadata: &corev1.ObjectMeta{Namespace: "a", Name: "p"}}); err != nil {
		t.Fatal(err)
	}
	svcs, _ := informer.New[*corev1.Service](st, "", informer.Handlers[*corev1.Service]{})
	pods, _ := informer.New[*corev1.Pod](st, "", informer.Handlers[*corev1.Pod]{})
	lazy, err := informer.NewLazy(pods, func() bool { return svcs.Len() > 0 }, 0, svcs)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 2)
	go func() { done <- lazy.Run(runCtx) }()
	go func() { done <- svcs.Run(runCtx) }()
	if err := lazy.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
	if pods.Len() != 1 {
		t.Errorf("%d pods once synced, want 1", pods.Len())
	}
	stop()
	for range 2 {
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Error(err)
		}
	}
	if _, err := informer.NewLazy(pods, nil, 0); err == nil {
		t.Error("NewLazy took no wanted function")
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second) // a hang, not a speed check
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
