package admission

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestFreshReadsNeverJoinARunningRead: callers that arrive while a read
// runs share the next read, which starts after it — so each sees what was
// written before it asked (the value at its read's start), and one read at
// a time runs per namespace.
func TestFreshReadsNeverJoinARunningRead(t *testing.T) {
	var calls atomic.Int32
	var value atomic.Int32 // "the store"
	release := make(chan struct{})
	f := newFreshReads(func(ctx context.Context, ns string) ([]int32, error) {
		n := calls.Add(1)
		v := value.Load()
		if n == 1 {
			<-release // the first read is slow
		}
		return []int32{v}, nil
	})
	ctx := context.Background()
	first := make(chan []int32)
	go func() { got, _ := f.get(ctx, "ns"); first <- got }()
	for calls.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	value.Store(1) // written after the first read started
	var wg sync.WaitGroup
	later := make([][]int32, 5)
	for i := range later {
		wg.Go(func() { later[i], _ = f.get(ctx, "ns") })
	}
	time.Sleep(20 * time.Millisecond) // they queue behind the running read
	close(release)
	wg.Wait()
	if got := <-first; got[0] != 0 {
		t.Errorf("the first read: %v", got)
	}
	for i, got := range later {
		if got[0] != 1 {
			t.Errorf("caller %d read %v, written before it asked: want 1", i, got)
		}
	}
	if n := calls.Load(); n != 2 {
		t.Errorf("%d reads, want 2 (one running, one shared by the callers behind it)", n)
	}
}
