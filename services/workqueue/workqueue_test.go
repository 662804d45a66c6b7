package workqueue

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"
)

func quiet() Config {
	c := DefaultConfig()
	c.RetryMin, c.RetryMax = time.Millisecond, 20*time.Millisecond
	c.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	return c
}

// TestDedupAndOrder: keys added while queued are synced once, in the order
// first queued.
func TestDedupAndOrder(t *testing.T) {
	q := New(quiet())
	for _, k := range []string{"b", "a", "b", "c", "a"} {
		q.Add(k)
	}
	if q.Len() != 3 {
		t.Fatalf("Len = %d, want 3", q.Len())
	}
	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex
	var got []string
	done := make(chan error)
	go func() {
		done <- q.Run(ctx, func(_ context.Context, k string) error {
			mu.Lock()
			defer mu.Unlock()
			got = append(got, k)
			if len(got) == 3 {
				cancel()
			}
			return nil
		})
	}()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[0] != "b" || got[1] != "a" || got[2] != "c" {
		t.Fatalf("synced %v, want [b a c]", got)
	}
}

// TestRetry: a failing key is synced again until it succeeds; others are
// not held up by it.
func TestRetry(t *testing.T) {
	q := New(quiet())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	calls := map[string]int{}
	done := make(chan error)
	go func() {
		done <- q.Run(ctx, func(_ context.Context, k string) error {
			calls[k]++
			if k == "flaky" && calls[k] < 4 {
				return errors.New("not yet")
			}
			if calls["flaky"] >= 4 && calls["steady"] >= 1 {
				cancel()
			}
			return nil
		})
	}()
	q.Add("flaky")
	q.Add("steady")
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if calls["flaky"] != 4 || calls["steady"] != 1 {
		t.Fatalf("calls %v, want flaky 4, steady 1", calls)
	}
}

// TestWorkersNeverShareAKey: with several workers, distinct keys sync at
// once but one key never does twice at once; a key added while it syncs
// is synced again after.
func TestWorkersNeverShareAKey(t *testing.T) {
	cfg := quiet()
	cfg.Workers = 4
	q := New(cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var mu sync.Mutex
	inFlight := map[string]int{}
	calls := map[string]int{}
	maxParallel := 0
	release := make(chan struct{})
	entered := make(chan string, 16)
	done := make(chan error)
	go func() {
		done <- q.Run(ctx, func(_ context.Context, k string) error {
			mu.Lock()
			inFlight[k]++
			calls[k]++
			if inFlight[k] > 1 {
				t.Errorf("key %q synced twice at once", k)
			}
			n := 0
			for _, c := range inFlight {
				n += c
			}
			maxParallel = max(maxParallel, n)
			first := calls[k] == 1
			mu.Unlock()
			if first {
				entered <- k
				<-release
			}
			mu.Lock()
			inFlight[k]--
			mu.Unlock()
			return nil
		})
	}()
	for _, k := range []string{"a", "b", "c"} {
		q.Add(k)
	}
	for range 3 {
		<-entered
	}
	q.Add("a") // while a syncs: once more after
	q.Add("a")
	close(release)
	deadline := time.After(5 * time.Second)
	for {
		mu.Lock()
		got := calls["a"]
		mu.Unlock()
		if got == 2 {
			break
		}
		select {
		case <-deadline:
			t.Fatalf("a synced %d times, want 2", got)
		case <-time.After(5 * time.Millisecond):
		}
	}
	time.Sleep(50 * time.Millisecond)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if calls["a"] != 2 || calls["b"] != 1 || calls["c"] != 1 {
		t.Errorf("calls %v, want a 2, b 1, c 1", calls)
	}
	if maxParallel != 3 {
		t.Errorf("at most %d syncs at once, want 3 (three keys, four workers)", maxParallel)
	}
}

// TestAddAfter: a key added for later is synced once its delay passed,
// not before; the earliest of two delays holds.
func TestAddAfter(t *testing.T) {
	q := New(quiet())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	synced := make(chan time.Time, 4)
	done := make(chan error)
	go func() {
		done <- q.Run(ctx, func(_ context.Context, k string) error {
			synced <- time.Now()
			return nil
		})
	}()
	start := time.Now()
	q.AddAfter("k", time.Hour)
	q.AddAfter("k", 100*time.Millisecond)
	at := <-synced
	if at.Sub(start) < 100*time.Millisecond {
		t.Errorf("synced after %s, before its delay", at.Sub(start))
	}
	select {
	case <-synced:
		t.Error("synced twice")
	case <-time.After(200 * time.Millisecond):
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
