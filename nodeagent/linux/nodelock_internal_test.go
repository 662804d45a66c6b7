package linux

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestLockNode(t *testing.T) {
	locks := t.TempDir()
	cfgOf := func(node, dataDir string) Config {
		return Config{NodeName: node, DataDir: dataDir, LockDir: locks}
	}
	dirA, dirB := filepath.Join(t.TempDir(), "a"), filepath.Join(t.TempDir(), "b")
	type step struct {
		name    string
		cfg     Config
		pods    string // a pod directory to create under cfg's previous holder first
		wantErr error
		wantIn  string // in the error
		prevDir string // the previous holder's data dir, when it succeeds
	}
	held := []*nodeLock{}
	release := func() {
		for _, l := range held {
			l.Close()
		}
		held = nil
	}
	t.Cleanup(release)
	steps := []struct {
		step
		releaseFirst bool
	}{
		{step: step{name: "first agent of node-1", cfg: cfgOf("node-1", dirA)}},
		{step: step{name: "a second agent of node-1 is refused", cfg: cfgOf("node-1", dirB), wantErr: ErrNodeInUse,
			wantIn: "pid " + strconv.Itoa(os.Getpid())}},
		{step: step{name: "another node on the same data dir is refused", cfg: cfgOf("node-2", dirA), wantErr: ErrNodeInUse,
			wantIn: "data directory " + dirA}},
		{step: step{name: "another node beside it is fine", cfg: cfgOf("node-2", dirB)}},
		{step: step{name: "node-1 again on its own data dir after a stop", cfg: cfgOf("node-1", dirA), prevDir: dirA}, releaseFirst: true},
		{step: step{name: "node-1 from another data dir that records pods is refused", cfg: cfgOf("node-1", dirB), pods: dirA,
			wantErr: ErrForeignLeftovers, wantIn: filepath.Join(dirA, "pods")}, releaseFirst: true},
		{step: step{name: "node-1 from another data dir once those pods are gone", cfg: cfgOf("node-1", dirB+"-2"), prevDir: dirA}, releaseFirst: true},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			if s.releaseFirst {
				release()
			}
			if s.pods != "" {
				if err := os.MkdirAll(filepath.Join(s.pods, "pods", "uid-1"), 0o700); err != nil {
					t.Fatal(err)
				}
			}
			node, data, prev, err := lockNode(s.cfg)
			if s.wantErr != nil {
				if !errors.Is(err, s.wantErr) || !strings.Contains(err.Error(), s.wantIn) {
					t.Fatalf("lockNode = %v, want %v saying %q", err, s.wantErr, s.wantIn)
				}
				if s.pods != "" {
					_ = os.RemoveAll(filepath.Join(s.pods, "pods"))
				}
				return
			}
			if err != nil {
				t.Fatalf("lockNode: %v", err)
			}
			held = append(held, node, data)
			if prev.DataDir != s.prevDir {
				t.Errorf("previous holder's data dir = %q, want %q", prev.DataDir, s.prevDir)
			}
			var rec lockRecord
			if err := readJSON(filepath.Join(locks, s.cfg.NodeName+".lock"), &rec); err != nil {
				t.Fatal(err)
			}
			if rec.PID != os.Getpid() || rec.DataDir != s.cfg.DataDir || rec.Instance != InstanceOf(s.cfg.DataDir) || rec.Node != s.cfg.NodeName {
				t.Errorf("lock record %+v", rec)
			}
		})
	}
	t.Run("NodeInUse names the live holder only", func(t *testing.T) {
		release()
		if err := NodeInUse(locks, "node-1"); err != nil {
			t.Fatalf("NodeInUse with no live holder = %v", err)
		}
		if err := NodeInUse(locks, "never-ran"); err != nil {
			t.Fatalf("NodeInUse without a lock file = %v", err)
		}
		node, data, _, err := lockNode(cfgOf("node-1", dirA))
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, node, data)
		if err := NodeInUse(locks, "node-1"); !errors.Is(err, ErrNodeInUse) || !strings.Contains(err.Error(), dirA) {
			t.Fatalf("NodeInUse with a live holder = %v", err)
		}
		release()
		if err := NodeInUse(locks, "node-1"); err != nil {
			t.Fatalf("NodeInUse after the holder stopped = %v", err)
		}
		node, data, _, err = lockNode(cfgOf("node-1", dirA)) // NodeInUse kept no lock
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, node, data)
	})
	t.Run("remove leaves no file and a new agent starts clean", func(t *testing.T) {
		release()
		node, data, _, err := lockNode(cfgOf("node-3", dirA))
		if err != nil {
			t.Fatal(err)
		}
		if err := node.remove(); err != nil {
			t.Fatal(err)
		}
		node.Close()
		data.Close()
		if _, err := os.Stat(filepath.Join(locks, "node-3.lock")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("lock file after remove: %v", err)
		}
		node, data, prev, err := lockNode(cfgOf("node-3", dirB))
		if err != nil || prev.DataDir != "" {
			t.Fatalf("lockNode after remove = %+v, %v", prev, err)
		}
		node.Close()
		data.Close()
	})
	if InstanceOf(dirA) == InstanceOf(dirB) || InstanceOf(dirA) != InstanceOf(dirA+"/") {
		t.Errorf("InstanceOf: %s %s %s", InstanceOf(dirA), InstanceOf(dirB), InstanceOf(dirA+"/"))
	}
}

// An agent killed while it forks a shim leaves the child holding a copy of
// its lock until the child's exec closes it: the next agent waits that
// moment out instead of refusing, but only when the recorded holder is
// dead.
func TestLockNodeWaitsForAnInheritedLock(t *testing.T) {
	cfg := Config{NodeName: "node-1", DataDir: filepath.Join(t.TempDir(), "a"), LockDir: t.TempDir()}
	node, data, _, err := lockNode(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	// The dead agent's record, and its lock held by another descriptor (the
	// forked child's copy).
	for _, l := range []*nodeLock{node, data} {
		if err := l.write(lockRecord{Node: cfg.NodeName, DataDir: cfg.DataDir, PID: dead.Process.Pid}); err != nil {
			t.Fatal(err)
		}
	}
	lockAfterRelease(t, cfg, dead.Process.Pid, "a dead agent's child", func() {
		node.Close()
		data.Close()
	})
	refusedAtOnce(t, cfg, "a live holder")
}

// lockAfterRelease takes cfg's locks while their holder keeps them for
// 200 ms more, then calls release: lockNode must wait for it, not refuse,
// and report the previous holder's pid. The locks are held until the
// test ends.
func lockAfterRelease(t *testing.T, cfg Config, prevPID int, holder string, release func()) {
	t.Helper()
	released := make(chan struct{})
	go func() {
		time.Sleep(200 * time.Millisecond)
		close(released)
		release()
	}()
	n2, d2, prev, err := lockNode(cfg)
	if err != nil {
		t.Fatalf("lockNode while %s holds the lock: %v", holder, err)
	}
	t.Cleanup(func() { n2.Close(); d2.Close() })
	if prev.PID != prevPID {
		t.Errorf("previous holder = %+v, want pid %d", prev, prevPID)
	}
	select {
	case <-released:
	default:
		t.Fatal("lockNode took the lock before it was released")
	}
}

// refusedAtOnce: lockNode of cfg, whose locks are held, is refused at
// once, not after the grace.
func refusedAtOnce(t *testing.T, cfg Config, holder string) {
	t.Helper()
	start := time.Now()
	if _, _, _, err := lockNode(cfg); !errors.Is(err, ErrNodeInUse) {
		t.Fatalf("lockNode with %s = %v", holder, err)
	}
	if d := time.Since(start); d >= inheritedLockGrace {
		t.Errorf("refusing %s took %v", holder, d)
	}
}

// An agent that closes its runtime while another goroutine of the process
// forks leaves the child holding a copy of the lock until its exec: the
// next runtime of the node in the same process waits that moment out
// instead of taking its own process for a live agent, while a lock this
// process still holds is refused at once.
func TestLockNodeWaitsForItsOwnInheritedLock(t *testing.T) {
	cfg := Config{NodeName: "node-1", DataDir: filepath.Join(t.TempDir(), "a"), LockDir: t.TempDir()}
	node, data, _, err := lockNode(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// The forked child's copies of the open file descriptions.
	var copies []int
	for _, l := range []*nodeLock{node, data} {
		fd, err := unix.Dup(int(l.f.Fd()))
		if err != nil {
			t.Fatal(err)
		}
		copies = append(copies, fd)
		l.Close()
	}
	lockAfterRelease(t, cfg, os.Getpid(), "a child of this process", func() {
		for _, fd := range copies {
			unix.Close(fd)
		}
	})
	refusedAtOnce(t, cfg, "a lock this process holds")
}
