package bench

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
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

// TestReadRSS: the resident set of this process, and its peak, read from
// /proc: non-zero, the peak no less than the current; nothing for a PID
// that does not exist.
func TestReadRSS(t *testing.T) {
	rss, hwm := readRSS(os.Getpid())
	if rss == 0 || hwm < rss {
		t.Errorf("readRSS(self) = %d, %d; want rss > 0 and peak ≥ rss", rss, hwm)
	}
	if rss, hwm := readRSS(1 << 30); rss != 0 || hwm != 0 {
		t.Errorf("readRSS(no such pid) = %d, %d; want 0, 0", rss, hwm)
	}
}
