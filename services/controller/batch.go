package controller

import (
	"context"
	"sync"
)

// SlowStart calls fn for i in [0, n), as kube's controllers' slowStartBatch
// (a quota or a bad template fails the first calls, not a thousand), but
// as a window rather than batches: one call at first, one more in flight
// for each that succeeds, at most maxInFlight at once. After a failure, or
// once proceed returns false (the controller lost the key), it starts no
// more and waits for the calls in flight. It returns how many succeeded
// and the first error.
func SlowStart(ctx context.Context, n, maxInFlight int, proceed func() bool, fn func(ctx context.Context, i int) error) (int, error) {
	ok, _, err := SlowStartFrom(ctx, n, 1, maxInFlight, proceed, fn)
	return ok, err
}

// SlowStartFrom is SlowStart with a window of start calls at first
// (bounded to [1, maxInFlight]). It also returns the window it reached,
// 1 after a failure: a controller that creates an object's pods over
// several syncs (at most a burst each) passes the window one sync reached
// to the next, so that the creations ramp up once rather than from one
// call at every sync, and start from one call again after a failure.
func SlowStartFrom(ctx context.Context, n, start, maxInFlight int, proceed func() bool, fn func(ctx context.Context, i int) error) (int, int, error) {
	if maxInFlight < 1 {
		maxInFlight = 1
	}
	var (
		mu       sync.Mutex
		wg       sync.WaitGroup
		ok       int
		firstErr error
	)
	window := min(max(start, 1), maxInFlight)
	inFlight := 0
	cond := sync.NewCond(&mu)
	next := 0
	mu.Lock()
	for next < n {
		for inFlight >= window && firstErr == nil {
			cond.Wait()
		}
		if firstErr != nil || ctx.Err() != nil {
			break
		}
		if proceed != nil {
			mu.Unlock()
			p := proceed()
			mu.Lock()
			if !p {
				break
			}
		}
		i := next
		next++
		inFlight++
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := fn(ctx, i)
			mu.Lock()
			defer mu.Unlock()
			inFlight--
			if err != nil {
				if firstErr == nil {
					firstErr = err
				}
			} else {
				ok++
				window = min(window+1, maxInFlight)
			}
			cond.Broadcast()
		}()
	}
	mu.Unlock()
	wg.Wait()
	if firstErr == nil && ctx.Err() != nil {
		firstErr = ctx.Err()
	}
	if firstErr != nil {
		window = 1
	}
	return ok, window, firstErr
}
