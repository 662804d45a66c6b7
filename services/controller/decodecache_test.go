package controller_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"

	"golang.org/x/sync/errgroup"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/raftstore/raftstoretest"
	"github.com/podflow/podflow/services/controller"
	"github.com/podflow/podflow/services/informer"
	"github.com/podflow/podflow/services/objects"
)

// TestDecodeCacheOncePerRevision: a revision is decoded once and its value
// shared; a new revision is decoded again; a failed decoding is not kept;
// Forget drops the key; an older revision decoded late does not replace a
// newer one.
func TestDecodeCacheOncePerRevision(t *testing.T) {
	var c controller.DecodeCache[*string]
	calls := 0
	dec := func(v string, err error) func() (*string, error) {
		return func() (*string, error) {
			calls++
			if err != nil {
				return nil, err
			}
			return &v, nil
		}
	}
	a, err := c.Decode("ns/a", 5, dec("five", nil))
	if err != nil || *a != "five" || calls != 1 {
		t.Fatalf("first decode: %v %v, %d calls", a, err, calls)
	}
	again, _ := c.Decode("ns/a", 5, dec("not again", nil))
	if again != a || calls != 1 {
		t.Fatalf("same revision: got %q after %d calls, want the kept value without a decode", *again, calls)
	}
	if b, _ := c.Decode("ns/b", 5, dec("other key", nil)); *b != "other key" || calls != 2 {
		t.Fatalf("another key at the same revision: %q, %d calls", *b, calls)
	}
	six, _ := c.Decode("ns/a", 6, dec("six", nil))
	if *six != "six" || calls != 3 {
		t.Fatalf("new revision: %q, %d calls", *six, calls)
	}

	bad := errors.New("undecodable")
	if v, err := c.Decode("ns/a", 7, dec("", bad)); !errors.Is(err, bad) || v != nil {
		t.Fatalf("failed decode: %v, %v", v, err)
	}
	if v, err := c.Decode("ns/a", 7, dec("seven", nil)); err != nil || *v != "seven" || calls != 5 {
		t.Fatalf("a failed decoding is kept: %v %v, %d calls", v, err, calls)
	}

	// A reader that decoded revision 6 late does not put it over 7.
	if v, _ := c.Decode("ns/a", 6, dec("six late", nil)); *v != "six late" {
		t.Fatalf("late decode of an older revision returned %q", *v)
	}
	if v, _ := c.Decode("ns/a", 7, dec("seven again", nil)); *v != "seven" {
		t.Fatalf("an older revision replaced the newer one: %q", *v)
	}

	if c.Len() != 2 {
		t.Fatalf("%d keys kept, want 2", c.Len())
	}
	c.Forget("ns/a")
	if c.Len() != 1 {
		t.Fatalf("%d keys kept after Forget, want 1", c.Len())
	}
	calls = 0
	if v, _ := c.Decode("ns/a", 7, dec("seven anew", nil)); *v != "seven anew" || calls != 1 {
		t.Fatalf("after Forget: %q, %d calls", *v, calls)
	}
}

// TestDecodeCacheConcurrent: readers of one key at once under -race all
// get a value of the revision they asked for.
func TestDecodeCacheConcurrent(t *testing.T) {
	var c controller.DecodeCache[int64]
	var wg sync.WaitGroup
	for i := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rev := int64(i % 4)
			v, err := c.Decode("ns/x", rev, func() (int64, error) { return rev * 10, nil })
			if err != nil || v != rev*10 {
				t.Errorf("revision %d: %d, %v", rev, v, err)
			}
			if i%8 == 0 {
				c.Forget("ns/x")
			}
		}()
	}
	wg.Wait()
}

// TestRunnerContextAndInformerKeys: a Runner's Context is Background
// before Start and Start's context after it; InformerKeys lists the key of
// every object of an informer, of every namespace.
func TestRunnerContextAndInformerKeys(t *testing.T) {
	st := objects.New(raftstoretest.MakeCluster(t, 1).Client(t))
	ctx := t.Context()
	for _, p := range []*corev1.Pod{
		{Metadata: &corev1.ObjectMeta{Namespace: "a", Name: "p1"}},
		{Metadata: &corev1.ObjectMeta{Namespace: "b", Name: "p2"}},
	} {
		if _, err := st.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	pods, err := informer.New[*corev1.Pod](st, "", informer.Handlers[*corev1.Pod]{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := controller.DefaultConfig("testctl", "r1")
	controller.FastConfig(&cfg)
	r, err := controller.New(st, cfg, func(context.Context, string) error { return nil },
		func() []string { return controller.InformerKeys(pods) })
	if err != nil {
		t.Fatal(err)
	}
	if r.Context() != context.Background() {
		t.Fatalf("Context before Start: %v, want Background", r.Context())
	}
	type marker struct{}
	sctx, cancel := context.WithCancel(context.WithValue(ctx, marker{}, "start's"))
	g, gctx := errgroup.WithContext(sctx)
	t.Cleanup(func() { cancel(); _ = g.Wait() })
	var infs informer.Group
	infs.Add(pods)
	if err := r.Start(gctx, g, &infs); err != nil {
		t.Fatal(err)
	}
	if got := r.Context().Value(marker{}); got != "start's" {
		t.Fatalf("Context after Start carries %v, want Start's context", got)
	}
	keys := controller.InformerKeys(pods)
	slices.Sort(keys)
	if !slices.Equal(keys, []string{"a/p1", "b/p2"}) {
		t.Fatalf("InformerKeys: %v, want [a/p1 b/p2]", keys)
	}
}
