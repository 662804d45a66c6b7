package bench

import (
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestProfileName(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"stage", "scheduler", "--replica", "scheduler-2", "--config", "/d/c.json"}, "stage-scheduler-scheduler-2"},
		{[]string{"store", "run", "--id", "store-1", "--data-dir", "/d/store-1"}, "store-run-store-1"},
		{[]string{"nats", "--data-dir", "/d/nats"}, "nats"},
		{[]string{"nodeagent", "--runtime", "sim", "--node", "a/b"}, "nodeagent-a_b"},
		{[]string{"--name"}, "podflow"},
		{nil, "podflow"},
	} {
		if got := profileName(tt.args); got != tt.want {
			t.Errorf("profileName(%q) = %q, want %q", tt.args, got, tt.want)
		}
	}
}

// TestStartProfile: with PODFLOW_CPUPROFILE_DIR set a process writes a
// profile named after its role and PID; without it, nothing.
func TestStartProfile(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(ProfileDirEnv, "")
	t.Setenv(HeapProfileDirEnv, "")
	StartProfile([]string{"nats"})()
	t.Setenv(ProfileDirEnv, dir)
	StartProfile([]string{"nats"})()
	ents, _ := os.ReadDir(dir)
	want := "nats-" + strconv.Itoa(os.Getpid()) + ".pprof"
	if len(ents) != 1 || ents[0].Name() != want {
		t.Fatalf("profile dir holds %v, want %s", ents, want)
	}
	if fi, err := os.Stat(filepath.Join(dir, want)); err != nil || fi.Size() == 0 {
		t.Fatalf("profile %s: %v (empty: the profile was not written)", want, err)
	}
}

// TestStartHeapProfile: with PODFLOW_HEAPPROFILE_DIR set a process writes
// a heap profile and its memory figures named after its role and PID while
// it runs; without it, nothing.
func TestStartHeapProfile(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(ProfileDirEnv, "")
	t.Setenv(HeapProfileDirEnv, "")
	StartProfile([]string{"nats"})()
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Fatalf("without %s the dir holds %v", HeapProfileDirEnv, ents)
	}
	t.Setenv(HeapProfileDirEnv, dir)
	want := filepath.Join(dir, "nats-"+strconv.Itoa(os.Getpid())+".heap")
	stop := startHeapProfile([]string{"nats"}, time.Millisecond)
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Millisecond) {
		if fi, err := os.Stat(want); err == nil && fi.Size() > 0 {
			break
		}
		if time.Now().After(deadline) {
			stop()
			t.Fatalf("no heap profile %s written while running", want)
		}
	}
	stop()
	stop() // idempotent
	b, err := os.ReadFile(want)
	if err != nil || len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b { // pprof's gzipped protobuf
		t.Fatalf("heap profile %s: %v, starts %x: not a pprof profile", want, err, b[:min(len(b), 2)])
	}
	var names []string
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		names = append(names, e.Name())
	}
	stats := strings.TrimSuffix(filepath.Base(want), ".heap") + ".memstats"
	if !slices.Equal(names, []string{filepath.Base(want), stats}) {
		t.Fatalf("profile dir holds %q, want only %s and %s", names, filepath.Base(want), stats)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, stats)); !strings.Contains(string(b), "heap_inuse ") {
		t.Fatalf("%s = %q, want a heap_inuse line", stats, b)
	}
}

// TestReadMemory: the resident set of this process, its peak and its
// anonymous part, read from /proc: non-zero, the peak no less than the
// current, the anonymous part within it and growing by what the process
// touches of a new allocation; nothing for a PID that does not exist.
func TestReadMemory(t *testing.T) {
	m := readMemory(os.Getpid())
	if m.rss == 0 || m.hwm < m.rss || m.anon == 0 || m.anon > m.rss {
		t.Errorf("readMemory(self) = %+v; want rss > 0, peak ≥ rss, 0 < anon ≤ rss", m)
	}
	held := make([]byte, 64<<20)
	for i := range held {
		held[i] = 1
	}
	if after := readMemory(os.Getpid()); after.anon < m.anon+60<<20 {
		t.Errorf("anon %d after touching 64 MiB, %d before", after.anon, m.anon)
	}
	runtime.KeepAlive(held)
	if m := readMemory(1 << 30); m != (memory{}) {
		t.Errorf("readMemory(no such pid) = %+v; want zeros", m)
	}
}
