package raftstore

import "time"

// maxSnapshotThreshold bounds the log between snapshots in entries,
// whatever the state's size: the entries a restart replays.
const maxSnapshotThreshold = 1 << 20

// snapshotThreshold is the number of log entries after which a replica
// snapshots: as many as make up, at the mean size of the commands applied
// so far, the bytes of its state (keys, values and watch history), never
// fewer than base (Config.SnapshotThreshold) nor more than
// maxSnapshotThreshold. A snapshot rewrites the whole state, so a fixed
// count of entries made its cost grow with the state: at 100,000 pods
// every replica re-encoded ~400 MB every 30–60 s, and a cluster at rest
// with 5,000 nodes renewing their Leases did the same to log a few
// hundred bytes per renewal. Paced by the state, the snapshots write at
// most about as many bytes as the log did since the last one (what Redis
// does with auto-aof-rewrite-percentage 100), and a restart replays a log
// no larger than the state it restores.
func snapshotThreshold(base uint64, state, appliedBytes, appliedEntries int64) uint64 {
	if appliedEntries <= 0 || appliedBytes <= 0 || state <= 0 {
		return base
	}
	mean := max(appliedBytes/appliedEntries, 1)
	return max(base, min(uint64(state/mean), maxSnapshotThreshold))
}

// snapshotLoad returns the state's bytes and the commands applied so far
// (bytes and entries), for snapshotThreshold.
func (f *fsm) snapshotLoad() (state, appliedBytes, appliedEntries int64) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.liveSize + f.historySize, f.appliedBytes, f.appliedEntries
}

// paceSnapshots sets raft's snapshot threshold from snapshotThreshold
// every SnapshotInterval (raft checks the threshold that often), until
// the node stops. It changes it only when it moved by a quarter or more.
func (n *Node) paceSnapshots() {
	t := time.NewTicker(n.cfg.SnapshotInterval)
	defer t.Stop()
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-t.C:
		}
		state, applied, entries := n.fsm.snapshotLoad()
		want := snapshotThreshold(n.cfg.SnapshotThreshold, state, applied, entries)
		rc := n.raft.ReloadableConfig()
		have := rc.SnapshotThreshold
		if want == have || (want > have && want-have < have/4) || (want < have && have-want < have/4) {
			continue
		}
		rc.SnapshotThreshold = want
		if err := n.raft.ReloadConfig(rc); err != nil {
			n.log.Warn("snapshot threshold not changed", "threshold", want, "error", err)
		}
	}
}
