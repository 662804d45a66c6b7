package main

import (
	"os"
	"runtime"
	"runtime/debug"
	"testing"
	"time"
)

// TestSetGC: without GOGC a process collects at defaultGCPercent; an
// explicit GOGC is left to the runtime.
func TestSetGC(t *testing.T) {
	prev := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(prev) })

	t.Setenv("GOGC", "50")
	if got := setGC(); got != 0 {
		t.Fatalf("with GOGC=50 setGC set %d", got)
	}
	if got := debug.SetGCPercent(100); got != 100 {
		t.Fatalf("with GOGC=50 the percent is %d, want it untouched (100)", got)
	}

	os.Unsetenv("GOGC") // t.Setenv restores it
	if got := setGC(); got != defaultGCPercent {
		t.Fatalf("without GOGC setGC set %d, want %d", got, defaultGCPercent)
	}
	if got := debug.SetGCPercent(100); got != defaultGCPercent {
		t.Fatalf("without GOGC the percent is %d, want %d", got, defaultGCPercent)
	}
}

func TestGCPercentFor(t *testing.T) {
	for _, tt := range []struct {
		base uint64
		want int
	}{
		{0, defaultGCPercent},
		{10 << 20, defaultGCPercent},       // a stage: 3× its heap is under gcHeadroom
		{gcHeadroom / 3, defaultGCPercent}, // the largest heap that keeps 300 %
		{gcHeadroom, 100},                  // grows by gcHeadroom
		{2 * gcHeadroom, 50},               //
		{100 * gcHeadroom, minGCPercent},   // never below minGCPercent
		{1 << 62, minGCPercent},            // no overflow
	} {
		if got := gcPercentFor(tt.base); got != tt.want {
			t.Errorf("gcPercentFor(%d MiB) = %d, want %d", tt.base>>20, got, tt.want)
		}
	}
}

// TestGCTuner: once a process holds more live heap than gcHeadroom/3 its
// GC percent drops after the next collection, so the heap grows by about
// gcHeadroom instead of 3× itself; when the heap is freed, it returns to
// defaultGCPercent.
func TestGCTuner(t *testing.T) {
	t.Setenv("GOGC", "")
	os.Unsetenv("GOGC") // t.Setenv restores it
	prev := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(prev) })
	setGC()

	percentAfterGC := func() int {
		t.Helper()
		n := gcTuned.Load()
		for deadline := time.Now().Add(time.Minute); gcTuned.Load() <= n+1; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("the tuner did not run after a collection (%d runs)", gcTuned.Load())
			}
			runtime.GC()
		}
		p := debug.SetGCPercent(defaultGCPercent)
		debug.SetGCPercent(p)
		return p
	}

	held := make([]byte, 96<<20) // live: 96 MiB, more than gcHeadroom/3
	for i := range held {
		held[i] = byte(i)
	}
	if p, most := percentAfterGC(), 100*gcHeadroom/(96<<20); p > most || p < minGCPercent {
		t.Errorf("with 96 MiB live the GC percent is %d, want %d..%d", p, minGCPercent, most)
	}
	runtime.KeepAlive(held)
	held = nil
	if p := percentAfterGC(); p != defaultGCPercent {
		t.Errorf("with the heap freed the GC percent is %d, want %d", p, defaultGCPercent)
	}
}
