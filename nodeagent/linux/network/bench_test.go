package network

import (
	"context"
	"fmt"
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
