package main

import (
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"sync/atomic"
)

// defaultGCPercent is the garbage collector's target every podflow process
// runs with unless GOGC says otherwise, while its heap is small: most
// processes live on tens of MB, and short-lived garbage from decoding and
// encoding events is most of what they allocate, so letting the heap grow
// by 3× the live heap between collections instead of 1× cuts them to about
// a third. At saturation (`podflow bench pipeline --rate 1500`) it cut CPU
// per pod by ~10% (see docs/benchmarks.md).
const defaultGCPercent = 300

// gcHeadroom and minGCPercent bound what defaultGCPercent costs a process
// that caches many objects (a store replica, the scheduler, the simulated
// nodes at tens of thousands of pods): after each collection the percent is
// set so that the heap grows by at most gcHeadroom before the next one, and
// never below minGCPercent of the live heap. At 300 % a cache of 250 MB
// would let the heap reach 1 GB; with these bounds it reaches ~380 MB. A
// process under ~43 MB of live heap keeps defaultGCPercent.
const (
	gcHeadroom   = 128 << 20
	minGCPercent = 25
)

// gcPercentFor is the percent for a process whose collector scans base
// bytes (the live heap, goroutine stacks and globals, what GOGC is a
// percentage of): gcHeadroom/base, between minGCPercent and
// defaultGCPercent.
func gcPercentFor(base uint64) int {
	if base == 0 {
		return defaultGCPercent
	}
	return int(min(max(uint64(gcHeadroom)*100/base, minGCPercent), defaultGCPercent))
}

// setGC applies defaultGCPercent, bounded by gcHeadroom as the process's
// heap grows (startGCTuner), when the environment sets no GOGC (an explicit
// GOGC, "off" included, is the runtime's own and left alone), and reports
// the percent it set (0: none). `podflow up`'s children inherit its
// environment, so each sets it for itself.
func setGC() int {
	if _, ok := os.LookupEnv("GOGC"); ok {
		return 0
	}
	debug.SetGCPercent(defaultGCPercent)
	startGCTuner()
	return defaultGCPercent
}

// gcTuned counts the collections after which the tuner ran (tests read it).
var gcTuned atomic.Uint64

// startGCTuner sets the GC percent to gcPercentFor of what the collector
// scans after every collection, for the life of the process. It runs as a
// finalizer of an object it re-creates each time (the runtime runs it once
// per collection that finds the object unreachable, on the finalizer
// goroutine), so it costs nothing between collections and needs no
// goroutine of its own.
func startGCTuner() { tunerOnce.Do(runGCTuner) }

var tunerOnce sync.Once

func runGCTuner() {
	type sentinel struct{ _ [16]byte } // not tiny-allocated, so finalized on its own
	samples := []metrics.Sample{{Name: "/gc/heap/live:bytes"}, {Name: "/gc/scan/stack:bytes"}, {Name: "/gc/scan/globals:bytes"}}
	var tune func(*sentinel)
	tune = func(*sentinel) {
		metrics.Read(samples)
		var base uint64
		for _, s := range samples {
			if s.Value.Kind() == metrics.KindUint64 {
				base += s.Value.Uint64()
			}
		}
		debug.SetGCPercent(gcPercentFor(base)) // cheap: no stop of the world
		gcTuned.Add(1)
		runtime.SetFinalizer(&sentinel{}, tune)
	}
	runtime.SetFinalizer(&sentinel{}, tune)
}
