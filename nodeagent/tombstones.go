package nodeagent

import "time"

// Tombstones: the uids of pods whose deletion the agent carried out. A
// redelivered PodScheduled read from a replica still showing the pod
// undeleted must not start it again, so a tombstone outlives any such
// redelivery: it is kept tombstoneTTL (or two resync periods, if longer),
// and at most maxTombstones are kept (the oldest go first).
const (
	tombstoneTTL  = 10 * time.Minute
	maxTombstones = 1 << 16
)

// tombstones is a FIFO-ordered set of uids with the time each was added;
// the agent's mu guards it.
type tombstones struct {
	ttl   time.Duration
	max   int
	at    map[string]time.Time
	order []tomb // oldest first from head; an entry whose time differs from at[uid] is stale
	head  int
}

type tomb struct {
	uid string
	at  time.Time
}

// agentTombstones are an agent's: tombstoneTTL or two resyncs, at most
// maxTombstones.
func agentTombstones(cfg Config) *tombstones {
	return newTombstones(max(tombstoneTTL, 2*cfg.ResyncPeriod), maxTombstones)
}

func newTombstones(ttl time.Duration, max int) *tombstones {
	return &tombstones{ttl: ttl, max: max, at: map[string]time.Time{}}
}

func (t *tombstones) has(uid string) bool {
	_, ok := t.at[uid]
	return ok
}

// add records uid at now and drops what is too old or too many.
func (t *tombstones) add(uid string, now time.Time) {
	t.at[uid] = now
	t.order = append(t.order, tomb{uid, now})
	t.prune(now)
}

// prune drops the tombstones older than ttl, then the oldest beyond max.
func (t *tombstones) prune(now time.Time) {
	for ; t.head < len(t.order); t.head++ {
		e := t.order[t.head]
		if at, ok := t.at[e.uid]; !ok || !at.Equal(e.at) {
			continue // superseded by a later add of the uid
		}
		if now.Sub(e.at) <= t.ttl && len(t.at) <= t.max {
			break
		}
		delete(t.at, e.uid)
	}
	if t.head > len(t.order)/2 { // compact: amortised O(1) per add
		t.order = append(t.order[:0:0], t.order[t.head:]...)
		t.head = 0
	}
}

func (t *tombstones) len() int { return len(t.at) }
