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
