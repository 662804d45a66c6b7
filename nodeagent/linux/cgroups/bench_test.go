package cgroups

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"testing"
	"time"
)

// BenchmarkEnsurePod measures the cgroups of one pod with one container:
// EnsurePod + EnsureContainer (reported as ns/op) and RemovePod (reported
// separately). Needs root.
//
//	go test -run '^$' -bench EnsurePod -benchtime 200x ./linux/cgroups/
func BenchmarkEnsurePod(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("needs root: creates cgroups")
	}
	cfg := DefaultConfig()
	cfg.Root = fmt.Sprintf("podflow-bench-%d", rand.Int64())
	m, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.Cleanup(func() {
		if err := m.RemoveHierarchy(ctx); err != nil {
			b.Error(err)
		}
	})
	plan := testPlan()
	cp, _ := plan.Container("app")
	var remove time.Duration
	i := 0
	for b.Loop() {
		uid := fmt.Sprintf("bench-%d", i)
		i++
		if err := m.EnsurePod(ctx, uid, "", plan); err != nil {
			b.Fatal(err)
		}
		if _, err := m.EnsureContainer(ctx, uid, plan.QOSClass, "app", cp); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		start := time.Now()
		if err := m.RemovePod(ctx, uid, plan.QOSClass); err != nil {
			b.Fatal(err)
		}
		remove += time.Since(start)
		b.StartTimer()
	}
	b.ReportMetric(float64(remove.Microseconds())/float64(i), "remove-µs/op")
	b.Logf("cgroup %s", m.Mode())
}
