package raftstore

import "sync/atomic"

// counters are a replica's request and watch counts since it started,
// reported in Status (and `podflow bench pipeline`'s cost table).
type counters struct {
	writes, reads, staleReads, watches, watchEvents atomic.Uint64
}

// Counters are a replica's counts since it started; a restart resets them.
type Counters struct {
	// WriteRequests, ReadRequests (linearizable reads and lists),
	// StaleReadRequests and WatchRequests (watch starts) are the requests
	// this replica served (refused ones included).
	WriteRequests, ReadRequests, StaleReadRequests, WatchRequests uint64
	// WatchEventsSent are the events this replica sent to watchers.
	WatchEventsSent uint64
	// LogAppends are its raft log's append batches (one fsync each unless
	// Config.NoSync) and LogEntriesWritten the entries they held.
	LogAppends, LogEntriesWritten uint64
}

func (n *Node) counters() Counters {
	c := Counters{
		WriteRequests: n.count.writes.Load(), ReadRequests: n.count.reads.Load(),
		StaleReadRequests: n.count.staleReads.Load(), WatchRequests: n.count.watches.Load(),
		WatchEventsSent: n.count.watchEvents.Load(),
	}
	if n.walStats != nil {
		s := n.walStats.Summary()
		c.LogAppends, c.LogEntriesWritten = s.Counters["log_appends"], s.Counters["log_entries_written"]
	}
	return c
}
