package console

import (
	"context"
	"encoding/json"
	"hash/fnv"
	"reflect"
	"sort"
	"strings"
	"sync"
	"time"
)

// Hub owns the polling of a Source: one goroutine (Run) takes a snapshot
// at most every Interval while at least one viewer is subscribed. What it
// sends is built once for every viewer:
//
//   - on subscribing, a "snapshot" event: the pipeline, the nodes, the
//     timeline, a summary of the pods (counts by namespace, stage, phase
//     and reason) and the pods' version — never the pods themselves;
//   - then, after each poll, a "delta" event with only what changed: the
//     stages, the nodes that changed or went, the new marks, the summary, the pods' version. When nothing changes it is
//     a few dozen bytes.
//
// The pods are read a page at a time (Pods: server-side search, filters
// and paging over the last poll's rows), when the version says they
// changed.
type Hub struct {
	src      Source
	interval time.Duration

	mu      sync.Mutex
	subs    map[chan []byte]bool // true once it had a snapshot
	full    []byte               // the last "snapshot" event
	last    *Snapshot            // what full holds (without pods)
	at      time.Time            // when the poll of last began
	pods    []Pod                // the last poll's rows, stuck first
	podsSum uint64               // a hash of pods (ages aside): a change bumps Version
	version int64
	wake    chan struct{}
	poll    int // snapshots taken (tests)
}

// subBuffer is how many events a viewer may fall behind; past it the
// viewer is dropped, and its browser reconnects for a fresh snapshot.
const subBuffer = 16

// NewHub returns a hub over src polling every interval (at least a second).
func NewHub(src Source, interval time.Duration) *Hub {
	return &Hub{src: src, interval: max(interval, time.Second), subs: map[chan []byte]bool{}, wake: make(chan struct{}, 1)}
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
		h.publish(snap, began)
	}
}

// publish takes a new snapshot in: it keeps its pods for Pods, and sends
// every viewer what changed.
func (h *Hub) publish(snap *Snapshot, began time.Time) {
	pods := snap.Pods
	snap.Pods = nil
	snap.Summary = summarize(pods)
	snap.PodsTotal = len(pods)
	sum := hashPods(pods)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.last == nil || sum != h.podsSum {
		h.version++
	}
	h.pods, h.podsSum = pods, sum
	snap.PodsVersion = h.version
	full, err := frame("snapshot", snap)
	if err != nil {
		return
	}
	var d []byte
	if h.last != nil {
		if d, err = frame("delta", delta(h.last, snap)); err != nil {
			return
		}
	}
	h.full, h.last, h.at = full, snap, began
	h.poll++
	for ch, had := range h.subs {
		msg := d
		if !had || d == nil {
			msg = full // nothing yet to apply a delta to
		}
		select {
		case ch <- msg:
			h.subs[ch] = true
		default: // too far behind: it reconnects for a fresh snapshot
			delete(h.subs, ch)
			close(ch)
		}
	}
}

// frame is one server-sent event.
func frame(event string, v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, len(b)+len(event)+16)
	out = append(out, "event: "...)
	out = append(out, event...)
	out = append(out, "\ndata: "...)
	out = append(out, b...)
	return append(out, "\n\n"...), nil
}

// Subscribe returns a channel of server-sent events, starting with the
// latest snapshot (a poll comes now when there is none, or it is older
// than a poll interval), and the function that ends the subscription.
// The channel is closed when the viewer falls too far behind.
func (h *Hub) Subscribe() (<-chan []byte, func()) {
	ch := make(chan []byte, subBuffer)
	h.mu.Lock()
	h.subs[ch] = h.full != nil
	if h.full != nil {
		ch <- h.full
	}
	fresh := h.full != nil && time.Since(h.at) < h.interval
	h.mu.Unlock()
	if !fresh {
		select {
		case h.wake <- struct{}{}:
		default:
		}
	}
	return ch, func() {
		h.mu.Lock()
		if _, ok := h.subs[ch]; ok {
			delete(h.subs, ch)
			close(ch)
		}
		h.mu.Unlock()
	}
}

// Polls is how many snapshots Run has taken.
func (h *Hub) Polls() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.poll
}

// Delta is what changed between two polls (a "delta" event); a field
// left out did not change.
type Delta struct {
	Time   time.Time `json:"time"`
	Stages []Stage   `json:"stages,omitempty"`
	// Nodes are the nodes that changed or came; Gone the names of those
	// that went.
	Nodes []Node   `json:"nodes,omitempty"`
	Gone  []string `json:"gone,omitempty"`
	// Marks are the polls' new marks.
	Marks       []Mark      `json:"marks,omitempty"`
	Summary     *PodSummary `json:"summary,omitempty"`
	PodsTotal   *int        `json:"podsTotal,omitempty"`
	PodsVersion int64       `json:"podsVersion,omitempty"`
	Errors      []string    `json:"errors,omitempty"`
	// NoErrors says the errors of the last snapshot are gone.
	NoErrors bool `json:"noErrors,omitempty"`
}

// delta is what changed from a to b.
func delta(a, b *Snapshot) Delta {
	d := Delta{Time: b.Time}
	if !reflect.DeepEqual(a.Stages, b.Stages) {
		d.Stages = b.Stages
	}
	old := make(map[string]Node, len(a.Nodes))
	for _, n := range a.Nodes {
		old[n.Name] = n
	}
	for _, n := range b.Nodes {
		o, ok := old[n.Name]
		o.HeartbeatSec = n.HeartbeatSec // an age grows every second: the browser computes it
		if !ok || o != n {
			d.Nodes = append(d.Nodes, n)
		}
		delete(old, n.Name)
	}
	for name := range old {
		d.Gone = append(d.Gone, name)
	}
	sort.Strings(d.Gone)
	seen := make(map[Mark]bool, len(a.Marks))
	for _, m := range a.Marks {
		seen[m] = true
	}
	for _, m := range b.Marks {
		if !seen[m] {
			d.Marks = append(d.Marks, m)
		}
	}
	if !reflect.DeepEqual(a.Summary, b.Summary) {
		d.Summary = b.Summary
	}
	if a.PodsTotal != b.PodsTotal {
		d.PodsTotal = &b.PodsTotal
	}
	if a.PodsVersion != b.PodsVersion {
		d.PodsVersion = b.PodsVersion
	}
	if !reflect.DeepEqual(a.Errors, b.Errors) {
		d.Errors, d.NoErrors = b.Errors, len(b.Errors) == 0
	}
	return d
}

// PodSummary counts the pods by what the filters select on.
type PodSummary struct {
	Total       int            `json:"total"`
	Stuck       int            `json:"stuck"`
	ByNamespace map[string]int `json:"byNamespace"`
	ByStage     map[string]int `json:"byStage"`
	ByPhase     map[string]int `json:"byPhase"`
	ByReason    map[string]int `json:"byReason"`
	// StuckByStage counts the stuck pods waiting in each stage.
	StuckByStage map[string]int `json:"stuckByStage"`
}

// maxNamespaces bounds the namespaces a summary counts one by one.
const maxNamespaces = 500

func summarize(pods []Pod) *PodSummary {
	s := &PodSummary{Total: len(pods), ByNamespace: map[string]int{}, ByStage: map[string]int{}, ByPhase: map[string]int{},
		ByReason: map[string]int{}, StuckByStage: map[string]int{}}
	for _, p := range pods {
		if _, ok := s.ByNamespace[p.Namespace]; ok || len(s.ByNamespace) < maxNamespaces {
			s.ByNamespace[p.Namespace]++
		}
		s.ByStage[p.Stage]++
		s.ByPhase[p.Phase]++
		if p.Reason != "" {
			s.ByReason[p.Reason]++
		}
		if p.Stuck {
			s.Stuck++
			s.StuckByStage[p.Stage]++
		}
	}
	return s
}

// hashPods is a hash of the rows, their ages aside (they grow every
// second and the browser computes them).
func hashPods(pods []Pod) uint64 {
	f := fnv.New64a()
	for _, p := range pods {
		for _, s := range []string{p.Namespace, p.Name, p.Phase, p.Stage, p.Reason, p.Verdict, p.Node} {
			f.Write([]byte(s))
			f.Write([]byte{0})
		}
		var flags byte
		if p.Stuck {
			flags |= 1
		}
		if p.Ready {
			flags |= 2
		}
		f.Write([]byte{flags})
	}
	return f.Sum64()
}

// PodQuery selects pods: Q is searched for in every column; the others
// must match exactly when set.
type PodQuery struct {
	Q, Namespace, Stage, Phase, Reason, Node string
	Stuck                                    bool
	Offset, Limit                            int
}

// PodPage is a page of the pods a query selects.
type PodPage struct {
	Total   int   `json:"total"`
	Offset  int   `json:"offset"`
	Version int64 `json:"version"`
	Pods    []Pod `json:"pods"`
}

// MaxPageRows bounds a page of pods.
const MaxPageRows = 500

// Pods answers q from the last poll's rows (stuck first, then by
// namespace and name).
func (h *Hub) Pods(q PodQuery) PodPage {
	h.mu.Lock()
	pods, version := h.pods, h.version
	h.mu.Unlock()
	if q.Limit <= 0 || q.Limit > MaxPageRows {
		q.Limit = 100
	}
	q.Offset = max(q.Offset, 0)
	needle := strings.ToLower(strings.TrimSpace(q.Q))
	page := PodPage{Offset: q.Offset, Version: version, Pods: []Pod{}}
	for _, p := range pods {
		switch {
		case q.Namespace != "" && p.Namespace != q.Namespace, q.Stage != "" && p.Stage != q.Stage,
			q.Phase != "" && p.Phase != q.Phase, q.Reason != "" && p.Reason != q.Reason,
			q.Node != "" && p.Node != q.Node, q.Stuck && !p.Stuck:
			continue
		}
		if needle != "" && !matches(p, needle) {
			continue
		}
		if page.Total >= q.Offset && len(page.Pods) < q.Limit {
			page.Pods = append(page.Pods, p)
		}
		page.Total++
	}
	return page
}

func matches(p Pod, needle string) bool {
	for _, s := range []string{p.Name, p.Namespace, p.Node, p.Reason, p.Stage, p.Phase} {
		if strings.Contains(strings.ToLower(s), needle) {
			return true
		}
	}
	return strings.Contains(strings.ToLower(p.Namespace+"/"+p.Name), needle)
}
