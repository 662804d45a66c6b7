package objects

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestFreshReadsNeverJoinARunningRead: callers that arrive while a read
// runs do not take its answer (it may predate what they wrote): they get
// a read that started after they asked, which sees the write made while
// the first ran — without waiting for the first to end.
func TestFreshReadsNeverJoinARunningRead(t *testing.T) {
	var calls atomic.Int32
	var value atomic.Int32 // "the store"
	release := make(chan struct{})
	f := NewFreshReads(func(ctx context.Context, ns string) ([]int32, error) {
		n := calls.Add(1)
		v := value.Load()
		if n == 1 {
			<-release // the first read is slow
		}
		return []int32{v}, nil
	})
	ctx := context.Background()
	first := make(chan []int32)
	go func() { got, _ := f.Get(ctx, "ns"); first <- got }()
	for calls.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	value.Store(1) // written after the first read started
	var wg sync.WaitGroup
	later := make([][]int32, 5)
	for i := range later {
		wg.Go(func() { later[i], _ = f.Get(ctx, "ns") })
	}
	wg.Wait() // served while the first read still runs
	for i, got := range later {
		if got[0] != 1 {
			t.Errorf("caller %d read %v, written before it asked: want 1", i, got)
		}
	}
	close(release)
	if got := <-first; got[0] != 0 {
		t.Errorf("the first read: %v", got)
	}
	if n := calls.Load(); n < 2 || n > 6 {
		t.Errorf("%d reads, want the first and at most one per later caller", n)
	}
}

// TestFreshReadsBounded: at most freshReadsPerNamespace reads of one
// namespace run at once; callers beyond share the next one.
func TestFreshReadsBounded(t *testing.T) {
	var running, most, calls atomic.Int32
	release := make(chan struct{})
	f := NewFreshReads(func(ctx context.Context, ns string) ([]int32, error) {
		calls.Add(1)
		n := running.Add(1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		<-release
		running.Add(-1)
		return nil, nil
	})
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() { _, _ = f.Get(context.Background(), "ns") })
	}
	time.Sleep(100 * time.Millisecond) // every caller is waiting
	close(release)
	wg.Wait()
	if m := most.Load(); m != freshReadsPerNamespace {
		t.Errorf("%d reads ran at once, want %d", m, freshReadsPerNamespace)
	}
	if n := calls.Load(); n > freshReadsPerNamespace+1 {
		t.Errorf("%d reads for 20 callers, want the %d running and one shared by the rest", n, freshReadsPerNamespace)
	}
}
