package raftstore

import (
	"fmt"
	"sync"

	"github.com/hashicorp/raft"
)

// Bounds of the in-memory cache of recent raft log entries.
const (
	logCacheEntries = 4096
	// logCacheBytes bounds the cache by the entries' size too: raft's own
	// LogCache counts entries only, so 4,096 entries of 1 MiB ConfigMaps
	// held 4 GiB on every replica, a second copy of the state beside the
	// FSM's. 32 MiB holds over a second of writes at full speed; an entry
	// older than that is read from the log on disk (its page cache).
	logCacheBytes = 32 << 20
	// logEntryOverhead is what a cached *raft.Log costs beyond its data.
	logEntryOverhead = 96
)

// logCache keeps the most recent log entries in memory, as
// raft.LogCache does (a ring indexed by log index), bounded by
// logCacheBytes as well: the leader replicates and every replica applies
// recent entries from it without reading the disk.
type logCache struct {
	store raft.LogStore

	mu       sync.RWMutex
	ring     []*raft.Log
	bytes    int    // data held by the ring's entries
	maxBytes int    // bound of bytes, exceeded only by a single entry larger than it
	oldest   uint64 // lowest index the ring may hold; 0 when empty
}

func newLogCache(entries, maxBytes int, store raft.LogStore) (*logCache, error) {
	if entries <= 0 || maxBytes <= 0 {
		return nil, fmt.Errorf("raftstore: log cache of %d entries and %d bytes", entries, maxBytes)
	}
	return &logCache{store: store, ring: make([]*raft.Log, entries), maxBytes: maxBytes}, nil
}

func logSize(l *raft.Log) int { return len(l.Data) + len(l.Extensions) + logEntryOverhead }

// IsMonotonic passes the store's answer through (raft.MonotonicLogStore).
func (c *logCache) IsMonotonic() bool {
	m, ok := c.store.(raft.MonotonicLogStore)
	return ok && m.IsMonotonic()
}

func (c *logCache) GetLog(idx uint64, log *raft.Log) error {
	c.mu.RLock()
	cached := c.ring[idx%uint64(len(c.ring))]
	c.mu.RUnlock()
	if cached != nil && cached.Index == idx {
		*log = *cached
		return nil
	}
	return c.store.GetLog(idx, log)
}

func (c *logCache) StoreLog(log *raft.Log) error { return c.StoreLogs([]*raft.Log{log}) }

// StoreLogs writes the entries to the store, then caches them.
func (c *logCache) StoreLogs(logs []*raft.Log) error {
	if err := c.store.StoreLogs(logs); err != nil {
		return fmt.Errorf("unable to store logs within log store, err: %q", err)
	}
	c.mu.Lock()
	for _, l := range logs {
		c.put(l)
	}
	c.mu.Unlock()
	return nil
}

// put caches l, then evicts the oldest entries until the cache is within
// its bytes (l itself stays, however large).
func (c *logCache) put(l *raft.Log) {
	n := uint64(len(c.ring))
	slot := &c.ring[l.Index%n]
	if *slot != nil {
		c.bytes -= logSize(*slot)
	}
	*slot = l
	c.bytes += logSize(l)
	if c.oldest == 0 || c.oldest > l.Index {
		c.oldest = l.Index
	}
	if l.Index >= n && c.oldest < l.Index-n+1 {
		c.oldest = l.Index - n + 1 // older slots were overwritten
	}
	for c.bytes > c.maxBytes && c.oldest < l.Index {
		s := &c.ring[c.oldest%n]
		if *s != nil && (*s).Index == c.oldest {
			c.bytes -= logSize(*s)
			*s = nil
		}
		c.oldest++
	}
}

func (c *logCache) FirstIndex() (uint64, error) { return c.store.FirstIndex() }
func (c *logCache) LastIndex() (uint64, error)  { return c.store.LastIndex() }

// DeleteRange empties the cache, as raft.LogCache does, then deletes.
func (c *logCache) DeleteRange(lo, hi uint64) error {
	c.mu.Lock()
	clear(c.ring)
	c.bytes, c.oldest = 0, 0
	c.mu.Unlock()
	return c.store.DeleteRange(lo, hi)
}
