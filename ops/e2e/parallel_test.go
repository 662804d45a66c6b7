package e2e

import (
	"flag"
	"strconv"
	"testing"
	"time"
)

// The e2e tests run concurrently. Each starts its own `podflow up` (or
// `podflow chaos --own`, `podflow bench`) on free ports, in a data
// directory of its own, and spends most of its time waiting on processes,
// timers and the network, so a few at a time share two cores well. The
// tests run in three lanes side by side:
//
//   - linuxNode: the Linux-runtime tests, one after another. There is one
//     linux-node-1 (and linux-node-2) per machine (its cgroup root, its
//     bridge, port 53 on its node IP), and TestLinuxRuntime checks that a
//     second one is refused.
//   - heavy: the tests that keep the cores busy for minutes (thousands of
//     pods, chaos runs with fault schedules and a settle deadline), one
//     after another. Together they are the longest chain, so they start
//     at once and take no cluster slot.
//   - any other test takes one of clusterSlots.
//
// A test waiting for its turn holds no slot: -parallel is raised in
// TestMain so that every test is released at once, and the lanes bound
// what runs.
const defaultClusterSlots = 2

// Test kinds for parallel.
const (
	simulated = iota
	linuxRuntime
	heavyLoad
)

var (
	// clusterSlots bounds the tests that run at once besides the Linux
	// ones: `go test -parallel N` when given, else defaultClusterSlots.
	clusterSlots chan struct{}
	linuxNode    = make(chan struct{}, 1)
	heavy        = make(chan struct{}, 1)
)

// setParallel sizes clusterSlots from -test.parallel when it was given and
// then lifts -test.parallel so that the testing package releases every
// parallel test at once (called in TestMain after flag.Parse).
func setParallel() {
	n := defaultClusterSlots
	flag.Visit(func(f *flag.Flag) {
		if f.Name == "test.parallel" {
			if v, err := strconv.Atoi(f.Value.String()); err == nil && v > 0 {
				n = v
			}
		}
	})
	clusterSlots = make(chan struct{}, n)
	_ = flag.Set("test.parallel", "1000")
}

// parallel runs t beside the other e2e tests once its kind's turn has
// come (see clusterSlots); the turn ends with the test, after its cluster
// stopped (cleanups run last-registered first).
func parallel(t *testing.T, kind int) {
	t.Helper()
	t.Parallel()
	start := time.Now()
	switch kind {
	case linuxRuntime:
		take(t, linuxNode)
	case heavyLoad:
		take(t, heavy)
	default:
		take(t, clusterSlots)
	}
	if w := time.Since(start); w > time.Second {
		t.Logf("waited %s for its turn", w.Round(time.Second))
	}
}

func take(t *testing.T, turn chan struct{}) {
	turn <- struct{}{}
	t.Cleanup(func() { <-turn })
}
