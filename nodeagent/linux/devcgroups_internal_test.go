package linux

import (
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/podflow/podflow/nodeagent/linux/container"
)

// TestSweepDeviceCgroups: the sweep removes the device cgroups its ledger
// lists for containers it no longer runs (a start that failed, a shim
// that was SIGKILLed) and drops their entries; a container being started
// keeps its cgroup, and a cgroup that still holds a process stays listed
// for the next sweep, which removes it once the process is gone. Cgroups
// of containers not in the ledger (another agent's) are not touched.
func TestSweepDeviceCgroups(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for cgroups")
	}
	const root = "/sys/fs/cgroup/devices"
	if _, err := os.Stat(filepath.Join(root, "devices.allow")); err != nil {
		t.Skip("no cgroup v1 devices hierarchy:", err)
	}
	r := &Runtime{cfg: Config{DataDir: t.TempDir()}, log: slog.New(slog.DiscardHandler),
		pods: map[string]*pod{}, starting: map[string]bool{}}
	stamp := strconv.FormatInt(time.Now().UnixNano(), 36)
	gone, starting, busy, foreign := "sweep-gone-"+stamp, "sweep-starting-"+stamp, "sweep-busy-"+stamp, "sweep-foreign-"+stamp
	for _, id := range []string{gone, starting, busy, foreign} {
		dir := filepath.Join(root, "podflow-dev-"+id)
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.Remove(dir) })
		if id != foreign {
			if err := r.noteDeviceCgroup(id); err != nil {
				t.Fatal(err)
			}
		}
	}
	r.starting[starting] = true
	sleeper := exec.Command("sleep", "1000")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sleeper.Process.Kill(); _ = sleeper.Wait() })
	if err := os.WriteFile(filepath.Join(root, "podflow-dev-"+busy, "cgroup.procs"), []byte(strconv.Itoa(sleeper.Process.Pid)), 0); err != nil {
		t.Fatal(err)
	}

	r.sweepDeviceCgroups()
	for id, want := range map[string]bool{gone: false, starting: true, busy: true, foreign: true} {
		if got := exists(filepath.Join(root, "podflow-dev-"+id)); got != want {
			t.Errorf("device cgroup %s there: %v, want %v", id, got, want)
		}
		if got := exists(filepath.Join(r.deviceCgroupLedger(), id)); got != (want && id != foreign) {
			t.Errorf("ledger entry %s there: %v, want %v", id, got, !got)
		}
	}

	_ = sleeper.Process.Kill()
	_ = sleeper.Wait() // reaped: out of the cgroup
	delete(r.starting, starting)
	r.sweepDeviceCgroups()
	for _, id := range []string{starting, busy} {
		if exists(filepath.Join(root, "podflow-dev-"+id)) || exists(filepath.Join(r.deviceCgroupLedger(), id)) {
			t.Errorf("device cgroup %s or its ledger entry left after the second sweep", id)
		}
	}
	if err := container.RemoveDeviceCgroup(foreign); err != nil {
		t.Error(err)
	}
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return !errors.Is(err, os.ErrNotExist)
}
