package controller

import (
	"sync"
	"time"
)

// GoneNames remembers, for a while, the names of pods that were deleted.
// A controller that names its pods by slot (PodName) would otherwise give
// a replacement the name of the pod it replaces whenever that pod is gone
// before the replacement is made (a failed daemon pod deleted at once):
// kube's generated names never repeat, and clients wait for the old
// name to be gone. A replica that starts later does not know the names;
// it may reuse one, which only costs that guarantee, never a second pod
// in a slot (the store refuses a taken name). It is safe for concurrent
// use.
type GoneNames struct {
	ttl time.Duration

	mu    sync.Mutex
	at    map[string]time.Time
	order []goneName // oldest first
}

type goneName struct {
	key string
	at  time.Time
}

// NewGoneNames returns a GoneNames that remembers a name for ttl.
func NewGoneNames(ttl time.Duration) *GoneNames {
	return &GoneNames{ttl: ttl, at: map[string]time.Time{}}
}

// Add remembers that the pod ns/name went at now.
func (g *GoneNames) Add(ns, name string, now time.Time) {
	key := Key(ns, name)
	g.mu.Lock()
	defer g.mu.Unlock()
	g.expire(now)
	g.at[key] = now
	g.order = append(g.order, goneName{key, now})
}

// Has reports whether a pod ns/name went less than the ttl before now.
func (g *GoneNames) Has(ns, name string, now time.Time) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	at, ok := g.at[Key(ns, name)]
	return ok && now.Sub(at) < g.ttl
}

// Len is the number of names remembered.
func (g *GoneNames) Len() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.at)
}

// expire forgets the names that went a ttl or more before now.
func (g *GoneNames) expire(now time.Time) {
	n := 0
	for ; n < len(g.order) && now.Sub(g.order[n].at) >= g.ttl; n++ {
		if e := g.order[n]; g.at[e.key].Equal(e.at) {
			delete(g.at, e.key)
		}
	}
	if n > 0 {
		g.order = append(g.order[:0:0], g.order[n:]...)
	}
}
