package console

import (
	"context"
	"encoding/json"
	"sync"
	"time"
)

// Hub owns the polling of a Source: one goroutine (Run) takes a snapshot
// at most every Interval while at least one viewer is subscribed, and
// hands the same encoded snapshot to every viewer.
type Hub struct {
	src      Source
	interval time.Duration

	mu   sync.Mutex
	subs map[chan []byte]struct{}
	last []byte
	at   time.Time // when the poll of last began
	wake chan struct{}
	poll int // snapshots taken (tests)
}

// NewHub returns a hub over src polling every interval (at least a second).
func NewHub(src Source, interval time.Duration) *Hub {
	return &Hub{src: src, interval: max(interval, time.Second), subs: map[chan []byte]struct{}{}, wake: make(chan struct{}, 1)}
}

// Run polls until ctx is done.
func (h *Hub) Run(ctx context.Context) {
	t := time.NewTicker(h.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-h.wake: // the first viewer: do not make it wait a tick
		}
		h.mu.Lock()
		n, recent := len(h.subs), time.Since(h.at) < h.interval*9/10
		h.mu.Unlock()
		if n == 0 || recent {
			continue // nobody watches, or the last poll is not a second old
		}
		t.Reset(h.interval) // a wake-up restarts the second
		began := time.Now()
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		snap := h.src.Snapshot(pctx)
		cancel()
		b, err := json.Marshal(snap)
		if err != nil {
			continue
		}
		h.mu.Lock()
		h.last, h.at = b, began
		h.poll++
		for ch := range h.subs {
			select { // drop the older snapshot a slow viewer has not read
			case <-ch:
			default:
			}
			ch <- b
		}
		h.mu.Unlock()
	}
}

// Subscribe returns a channel of encoded snapshots, starting with the
// latest one when it is less than a poll interval old (else the next poll
// comes now), and the function that ends the subscription.
func (h *Hub) Subscribe() (<-chan []byte, func()) {
	ch := make(chan []byte, 1)
	h.mu.Lock()
	h.subs[ch] = struct{}{}
	fresh := h.last != nil && time.Since(h.at) < h.interval
	if fresh {
		ch <- h.last
	}
	h.mu.Unlock()
	if !fresh {
		select {
		case h.wake <- struct{}{}:
		default:
		}
	}
	return ch, func() {
		h.mu.Lock()
		delete(h.subs, ch)
		h.mu.Unlock()
	}
}

// Polls is how many snapshots Run has taken.
func (h *Hub) Polls() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.poll
}
