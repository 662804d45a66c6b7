package main

import (
	"os"
	"runtime/debug"
	"testing"
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
