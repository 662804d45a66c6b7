package network

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"
)

// BenchmarkSetup measures one pod's network setup (IPAM, netns, veth pair,
// addresses, routes) and, reported separately, its teardown. Needs root.
//
//	go test -run '^$' -bench Setup -benchtime 200x ./linux/network/
func BenchmarkSetup(b *testing.B) {
	m := newNode(b, "")
	b.Cleanup(func() {
		if atts, _ := m.List(context.Background()); len(atts) != 0 {
			b.Errorf("%d attachments left", len(atts))
		}
	})
	phases := map[string]time.Duration{}
	ctx := WithPhases(context.Background(), func(phase string, d time.Duration) { phases[phase] += d })
	var teardown time.Duration
	i := 0
	for b.Loop() {
		uid := fmt.Sprintf("bench-%d", i)
		i++
		if _, err := m.Setup(ctx, uid); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		start := time.Now()
		if err := m.Teardown(ctx, uid); err != nil {
			b.Fatal(err)
		}
		teardown += time.Since(start)
		b.StartTimer()
	}
	b.ReportMetric(float64(teardown.Microseconds())/float64(i), "teardown-µs/op")
	for phase, d := range phases {
		b.ReportMetric(float64(d.Microseconds())/float64(i), phase+"-µs/op")
	}
}

// BenchmarkSetup20 sets up 20 pods at once (as 20 pods starting together)
// and reports the wall time of the batch and the slowest pod.
func BenchmarkSetup20(b *testing.B) {
	m := newNode(b, "")
	ctx := context.Background()
	const n = 20
	var slowest, batch time.Duration
	round := 0
	for b.Loop() {
		var wg sync.WaitGroup
		took := make([]time.Duration, n)
		errs := make([]error, n)
		start := time.Now()
		for i := range n {
			wg.Go(func() {
				s := time.Now()
				_, errs[i] = m.Setup(ctx, fmt.Sprintf("b%d-%d", round, i))
				took[i] = time.Since(s)
			})
		}
		wg.Wait()
		batch += time.Since(start)
		for i := range n {
			if errs[i] != nil {
				b.Fatal(errs[i])
			}
			slowest = max(slowest, took[i])
		}
		b.StopTimer()
		for i := range n {
			if err := m.Teardown(ctx, fmt.Sprintf("b%d-%d", round, i)); err != nil {
				b.Fatal(err)
			}
		}
		round++
		b.StartTimer()
	}
	b.ReportMetric(float64(batch.Microseconds())/float64(round)/n, "µs/pod")
	b.ReportMetric(float64(slowest.Microseconds()), "slowest-µs")
}
