package linux

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// An agent's identity on the machine. The bridge, the namespaces, the
// veths and the cgroup root are named after the node, so two agents of one
// node name on a machine would take each other's pods for orphans. Each
// Runtime therefore holds, for as long as it is open, an exclusive flock
// on LockDir/<node>.lock, whose content records who holds it: the node,
// the instance (a hash of the data directory), the data directory and the
// process. The file is the side table that says whose kernel objects the
// node's names are: it outlives the process (the kernel objects do too)
// and is removed by Decommission, after the last of them.
//
// At start:
//  1. The lock is held by a live process: refuse with ErrNodeInUse (the
//     live agent's state is never touched).
//  2. The last holder had this data directory: its leftovers are this
//     agent's own and recovery adopts or removes them.
//  3. The last holder had another data directory that still records
//     pods: refuse with ErrForeignLeftovers (that agent adopts them when it
//     starts again); when that directory is gone or holds no pod, its
//     leftovers are dead and recovery removes them all.
//
// The data directory has a lock of its own (DataDir/agent.lock), so two
// agents never share one either.

// nodeLock is a held lock file; Close releases it (the process's exit
// does too: the descriptor is close-on-exec, so no child keeps it).
type nodeLock struct {
	f    *os.File
	path string
}

// lockRecord is the content of a lock file.
type lockRecord struct {
	Node     string    `json:"node"`
	Instance string    `json:"instance"`
	DataDir  string    `json:"dataDir"`
	PID      int       `json:"pid"`
	Started  time.Time `json:"started"`
}

// InstanceOf returns the identity of the agent with dataDir: 12 hex
// digits of a hash of the directory.
func InstanceOf(dataDir string) string {
	sum := sha256.Sum256([]byte(filepath.Clean(dataDir)))
	return hex.EncodeToString(sum[:6])
}

// lockNode takes the locks of cfg's node and data directory and applies
// the start rules above; prev is the last holder's record (zero when none).
func lockNode(cfg Config) (_, _ *nodeLock, prev lockRecord, _ error) {
	self := lockRecord{Node: cfg.NodeName, Instance: InstanceOf(cfg.DataDir), DataDir: cfg.DataDir,
		PID: os.Getpid(), Started: time.Now().UTC()}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, nil, prev, err
	}
	data, held, err := acquireLock(filepath.Join(cfg.DataDir, "agent.lock"))
	if err != nil {
		return nil, nil, prev, err
	}
	if data == nil {
		return nil, nil, prev, fmt.Errorf("%w: data directory %s is used by a live agent (node %q, pid %d) on this machine",
			ErrNodeInUse, cfg.DataDir, held.Node, held.PID)
	}
	ok := false
	defer func() {
		if !ok {
			data.Close()
		}
	}()
	if err := os.MkdirAll(cfg.LockDir, 0o755); err != nil {
		return nil, nil, prev, fmt.Errorf("lock directory: %w", err)
	}
	node, prev, err := acquireLock(filepath.Join(cfg.LockDir, cfg.NodeName+".lock"))
	if err != nil {
		return nil, nil, prev, err
	}
	if node == nil {
		return nil, nil, prev, nodeInUse(cfg.NodeName, prev)
	}
	defer func() {
		if !ok {
			node.Close()
		}
	}()
	if prev.DataDir != "" && prev.DataDir != cfg.DataDir && recordsPods(prev.DataDir) {
		return nil, nil, prev, fmt.Errorf("%w: node %q has the pods of a stopped agent whose data directory is %s (pid %d was the last): "+
			"start that agent again, which adopts or decommissions them, or remove %s so that this agent removes them",
			ErrForeignLeftovers, cfg.NodeName, prev.DataDir, prev.PID, filepath.Join(prev.DataDir, "pods"))
	}
	for _, l := range []*nodeLock{data, node} {
		if err := l.write(self); err != nil {
			return nil, nil, prev, err
		}
	}
	ok = true
	return node, data, prev, nil
}

// recordsPods reports whether dataDir still records a pod.
func recordsPods(dataDir string) bool {
	entries, err := os.ReadDir(filepath.Join(dataDir, "pods"))
	return err == nil && len(entries) > 0
}

// inheritedLockGrace bounds the wait for a lock whose recorded holder is
// dead. A flock belongs to the open file description, which fork copies:
// an agent killed while it starts a shim leaves the child, between its
// fork and its exec (when the close-on-exec descriptor goes), holding the
// lock for a moment after the agent's own exit. Measured on a loaded
// 2-core machine under -race: up to tens of milliseconds.
const inheritedLockGrace = 3 * time.Second

// heldHere is the lock files this process holds (from acquireLock to
// Close). A lock whose record names this process but which is not among
// them was closed here and is held by a child forked from another
// goroutine just before, on its way to exec: the same moment as a dead
// agent's child's.
var heldHere = struct {
	sync.Mutex
	paths map[string]bool
}{paths: map[string]bool{}}

func setHeldHere(path string, held bool) {
	heldHere.Lock()
	defer heldHere.Unlock()
	if held {
		heldHere.paths[path] = true
	} else {
		delete(heldHere.paths, path)
	}
}

// inherited reports whether the holder of the lock at path, recorded as
// pid, can only be a child of that process on its way to exec: the
// process is dead, or it is this one and does not hold the lock.
func inherited(path string, pid int) bool {
	if pid <= 0 {
		return false
	}
	if pid != os.Getpid() {
		return !processAlive(pid)
	}
	heldHere.Lock()
	defer heldHere.Unlock()
	return !heldHere.paths[path]
}

// acquireLock opens path and takes an exclusive flock on it without
// waiting for a live holder. It returns the record found in the file; the
// lock is nil when a live holder has it. When the process the record
// names is dead, or is this one and closed the lock, the holder is a
// child of it on its way to exec, and acquireLock waits up to
// inheritedLockGrace for it.
func acquireLock(path string) (*nodeLock, lockRecord, error) {
	deadline := time.Now().Add(inheritedLockGrace)
	for {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			return nil, lockRecord{}, fmt.Errorf("lock %s: %w", path, err)
		}
		var rec lockRecord
		if b, err := os.ReadFile(path); err == nil && len(b) > 0 {
			_ = json.Unmarshal(b, &rec)
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			f.Close()
			if errors.Is(err, unix.EWOULDBLOCK) {
				if inherited(path, rec.PID) && time.Now().Before(deadline) {
					time.Sleep(5 * time.Millisecond)
					continue
				}
				return nil, rec, nil
			}
			return nil, rec, fmt.Errorf("lock %s: %w", path, err)
		}
		// Removed (by Decommission) between open and flock: lock the new file.
		var held, now unix.Stat_t
		if unix.Fstat(int(f.Fd()), &held) != nil || unix.Stat(path, &now) != nil || held.Ino != now.Ino || held.Dev != now.Dev {
			f.Close()
			continue
		}
		if b, err := os.ReadFile(path); err == nil && len(b) > 0 {
			rec = lockRecord{}
			_ = json.Unmarshal(b, &rec)
		}
		setHeldHere(path, true)
		return &nodeLock{f: f, path: path}, rec, nil
	}
}

// processAlive reports whether pid names a process (a zombie counts: its
// parent has not seen it exit yet).
func processAlive(pid int) bool {
	return unix.Kill(pid, 0) != unix.ESRCH
}

// write replaces the lock file's record.
func (l *nodeLock) write(rec lockRecord) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	if err := l.f.Truncate(0); err != nil {
		return fmt.Errorf("lock %s: %w", l.path, err)
	}
	if _, err := l.f.WriteAt(append(b, '\n'), 0); err != nil {
		return fmt.Errorf("lock %s: %w", l.path, err)
	}
	return l.f.Sync()
}

// remove deletes the lock file while still holding it (the node left the
// machine: no record is needed any more).
func (l *nodeLock) remove() error {
	if l == nil {
		return nil
	}
	if err := os.Remove(l.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// Close releases the lock. Safe on nil.
func (l *nodeLock) Close() error {
	if l == nil {
		return nil
	}
	setHeldHere(l.path, false)
	return l.f.Close()
}

// NodeInUse returns an ErrNodeInUse error naming the live agent that holds
// node's lock in lockDir, and nil when none does: for a launcher (`podflow
// up`) to refuse at once rather than start an agent that will. It holds a
// shared lock for the moment of the check.
func NodeInUse(lockDir, node string) error {
	path := filepath.Join(lockDir, node+".lock")
	f, err := os.Open(path)
	if err != nil {
		return nil // no lock file: no agent
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB); err == nil {
		return nil // closing f releases it
	}
	var rec lockRecord
	if b, err := os.ReadFile(path); err == nil {
		_ = json.Unmarshal(b, &rec)
	}
	return nodeInUse(node, rec)
}

// nodeInUse is the ErrNodeInUse error for node held by holder.
func nodeInUse(node string, holder lockRecord) error {
	return fmt.Errorf("%w: node %q is run by a live agent on this machine (pid %d, data directory %s, since %s); "+
		"stop it, or give this agent another node name", ErrNodeInUse, node, holder.PID, holder.DataDir, holder.Started.Format(time.RFC3339))
}
